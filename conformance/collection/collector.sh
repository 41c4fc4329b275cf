# gpu-node-conformance collector. It is sent on stdin (`sh -s -- ROOT MAX`) and only reads:
# it writes no file and changes nothing. Every record is one line:
#   KIND NAME STATUS DATA_BASE64   (NAME: "=name" when plain, else base64)
# KIND: F file, C command, D directory, G glob, P process, L symlink, M meta; and T, a one-line text
# file given as `T =NAME STATUS TEXT` (the rest of the line, not base64).
# ROOT is a host-root prefix (e.g. /host when run in a pod with the host filesystem mounted).
R=${1:-}
GNC_NVML_PROBE='@NVML_PROBE@'
GNC_UNPACK="@UNPACK@"
GNC_SITE='@SITE@'  # what the operator's declarative site rules read: "KIND PATH" lines, base64 as a whole
MAX=${2:-4194304}
# The node's shell and awk differ (dash, bash, BusyBox ash; mawk, gawk, BusyBox awk). Everything below is
# written for all of them (README: supported node shells and awks); the C locale makes awk count bytes and
# every bracket range mean the same characters whatever locale the login session brought.
LC_ALL=C
export LC_ALL
set -f
NL='
'
# The programs this collector runs come only from folders that no user but root (or the user the audit runs as)
# can write, the folder and every folder above it: a PATH entry a node's user could write (a home's bin, a
# world-writable folder) is dropped before anything is looked up in it (issue 50). The check itself runs the
# system's own stat and awk (/usr/bin, /bin), which are checked like every other folder.
GNC_PATH_IN=${PATH:-}
PATH=/usr/sbin:/usr/bin:/sbin:/bin
ME=
while IFS= read -r _l; do case $_l in Uid:*) set -f; set -- $_l; ME=$3; break ;; esac; done < /proc/self/status
safe_set() {  # $1 a prefix ("" or the host root), $2 newline-separated paths below it (prefixed): prints those
  # that no user but root (or this collector's own user) could replace: the path and every folder above it, up
  # to the prefix, owned by them and writable by neither group nor others (links followed), except a folder
  # with the sticky bit (/tmp), where only an entry's owner may remove or rename it (the next component, which
  # must pass itself). With $3 = strict, the path itself has no such exception: a folder whose new files are run
  # (a PATH entry) is one where a user may add files, sticky or not (issue 59). One stat and one awk for all the
  # paths, whatever their number.
  _all=; _seen=$NL; _top=$1; _want=$2; _strict=${3:-}
  for _p in $2; do
    _c=${_p%/}
    while :; do
      case $_seen in *"$NL${_c:-/}$NL"*) ;; *) _seen="$_seen${_c:-/}$NL"; _all="$_all${_c:-/}$NL" ;; esac
      case $_c in ''|/|"$1") break ;; esac
      _c=${_c%/*}
    done
  done
  [ -n "$_all" ] || return 0
  set --
  for _p in $_all; do set -- "$@" "$_p"; done
  stat -L -c '%u %a %F|%n' -- "$@" 2>/dev/null | GNC_WANT=$_want GNC_TOP=$_top GNC_ME=${ME:-0} GNC_STRICT=$_strict awk '
    { i = index($0, "|"); split(substr($0, 1, i - 1), a, " "); m = a[2]; q = substr($0, i + 1)
      g = substr(m, length(m) - 1, 1); o = substr(m, length(m), 1)
      sticky = length(m) == 4 && substr(m, 1, 1) ~ /[1357]/ && a[3] == "directory"
      owned = a[1] == 0 || a[1] == ENVIRON["GNC_ME"]; closed = g !~ /[2367]/ && o !~ /[2367]/
      ok[q] = owned && (sticky || closed); shut[q] = owned && closed }
    END {
      n = split(ENVIRON["GNC_WANT"], want, "\n"); top = ENVIRON["GNC_TOP"]; strict = ENVIRON["GNC_STRICT"] == "strict"
      for (k = 1; k <= n; k++) {
        c = want[k]; if (c == "") continue
        sub(/\/$/, "", c); good = 1; first = 1
        while (1) {
          q = c == "" ? "/" : c
          if (!(q in ok) || !ok[q] || (first && strict && !shut[q])) { good = 0; break }
          first = 0
          if (c == "" || c == "/" || c == top) break
          sub(/\/[^\/]*$/, "", c)
        }
        if (good) print want[k]
      }
    }'
}
resolve_in_root() {  # $1 an absolute path on the node: set IR to it with every symlink in it resolved as the node
  # resolves it, inside the host root $R (an absolute target starts again at $R, `..` stops at it; in a
  # pod, /host/etc/x -> /etc/y must not read the pod's own /etc/y). Fails after 40 links, as the kernel
  # does (MAXSYMLINKS, ELOOP), or on a link it cannot read. No process is started (only a link's readlink).
  _ir_rest=${1#/}; _ir_out=; _ir_n=0
  while [ -n "$_ir_rest" ]; do
    _ir_c=${_ir_rest%%/*}
    case $_ir_rest in */*) _ir_rest=${_ir_rest#*/} ;; *) _ir_rest= ;; esac
    case $_ir_c in ''|.) continue ;; ..) _ir_out=${_ir_out%/*}; continue ;; esac
    if [ -L "$R$_ir_out/$_ir_c" ]; then
      _ir_n=$((_ir_n + 1)); [ "$_ir_n" -le 40 ] || return 1
      _ir_t=$(readlink -- "$R$_ir_out/$_ir_c") && [ -n "$_ir_t" ] || return 1
      case $_ir_t in /*) _ir_out= ;; esac
      _ir_rest=$_ir_t${_ir_rest:+/$_ir_rest}  # a leading / is an empty first name, skipped
    else
      _ir_out=$_ir_out/$_ir_c
    fi
  done
  IR=${_ir_out:-/}
}
# Each PATH entry is checked as named and with its links resolved (a root-owned link into a tree a user can rename in
# leads wherever that user makes it lead), and PATH then holds the resolved folders: a program is looked up only
# through folders whose every component only root could change, so nothing can be swapped after the check (issue 59).
path_resolve() {  # $1 an absolute folder: PR set to it with every link resolved (the audit's own root), or fails
  _pr_root=$R; R=
  resolve_in_root "$1"; _pr_rc=$?
  R=$_pr_root; PR=$IR
  return "$_pr_rc"
}
cands=; dropped=; pairs=
IFS=:
for _d in $GNC_PATH_IN; do
  case $_d in /*) cands="$cands$_d$NL" ;; *) dropped="$dropped$_d (not absolute)$NL" ;; esac
done
IFS=$NL
set -f
all=
for _d in $cands; do
  if path_resolve "$_d"; then pairs="$pairs$_d|$PR$NL"; all="$all$_d$NL$PR$NL"; else dropped="$dropped$_d (its links do not resolve)$NL"; fi
done
kept=$NL$(safe_set "" "$all" strict)$NL
PATH=
for _pp in $pairs; do
  _d=${_pp%%|*}; _r=${_pp#*|}
  case $kept in
    *"$NL$_d$NL"*) case $kept in *"$NL$_r$NL"*) case :$PATH: in *":$_r:"*) ;; *) PATH="$PATH${PATH:+:}$_r" ;; esac; continue ;; esac ;;
  esac
  if [ "$_r" = "$_d" ]; then dropped="$dropped$_d$NL"; else dropped="$dropped$_d (resolved: $_r)$NL"; fi
done
IFS=' 	
'
[ -n "$PATH" ] || PATH=/nonexistent
miss=
for t in awk base64 head tail cat tr cut stat readlink dirname uname; do command -v "$t" >/dev/null 2>&1 || miss="$miss $t"; done
if [ -n "$miss" ]; then
  echo "the collector needs these commands on the node, missing:$miss" >&2
  exit 3
fi
IFS=$NL
# base64 on one line: "$B64" "$B64_ARG" at the end of a pipeline is the program itself where it can print one line
# (GNU's and BusyBox's -w0); a function there would be one more process per record (issue 60)
b64_lines() { base64 | tr -d '\n'; }
if printf x | base64 -w0 >/dev/null 2>&1; then B64=base64 B64_ARG=-w0; else B64=b64_lines B64_ARG=; fi
# A short text of printable ASCII, tabs and newlines is encoded by the shell itself, exactly as base64 -w0 does
# (RFC 4648, padded): most records' data are such (paths, lists, versions), and a process each would make the
# collection's cost grow with what it reads. Anything else goes through base64, and so does any text longer than
# B64_SHORT. The shell takes a text apart one character at a time: each step copies the rest, and finds the first
# character by the longest suffix match (%%), which costs dash and BusyBox about the text's length; the shortest (%)
# costs the square of it on a repeated character (a 1,600-character text: dash 1.5 s, bash 3.3 s of CPU; 0.03 s and
# 0.24 s with %%). Measured per text (issue 60, a repeated character), beside 1.3-1.7 ms for printf | base64 in
# each shell: 128 characters cost dash 1.1 ms and BusyBox 1.0 ms; bash spends about 45 us a character (64: 2.9 ms).
B64_SHORT=128
[ -z "${BASH_VERSION:-}" ] || B64_SHORT=32
TAB='	'
PRINTABLE=' -~'  # a bracket range taken from a variable: quoted, its '-' would be a plain character
ASC=' !"#$%&'"'"'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\]^_`abcdefghijklmnopqrstuvwxyz{|}~'
b64c() {  # $1 0..63: the digit, appended to _b
  case $1 in
    0) _b=${_b}A;; 1) _b=${_b}B;; 2) _b=${_b}C;; 3) _b=${_b}D;; 4) _b=${_b}E;; 5) _b=${_b}F;; 6) _b=${_b}G;; 7) _b=${_b}H;;
    8) _b=${_b}I;; 9) _b=${_b}J;; 10) _b=${_b}K;; 11) _b=${_b}L;; 12) _b=${_b}M;; 13) _b=${_b}N;; 14) _b=${_b}O;; 15) _b=${_b}P;;
    16) _b=${_b}Q;; 17) _b=${_b}R;; 18) _b=${_b}S;; 19) _b=${_b}T;; 20) _b=${_b}U;; 21) _b=${_b}V;; 22) _b=${_b}W;; 23) _b=${_b}X;;
    24) _b=${_b}Y;; 25) _b=${_b}Z;; 26) _b=${_b}a;; 27) _b=${_b}b;; 28) _b=${_b}c;; 29) _b=${_b}d;; 30) _b=${_b}e;; 31) _b=${_b}f;;
    32) _b=${_b}g;; 33) _b=${_b}h;; 34) _b=${_b}i;; 35) _b=${_b}j;; 36) _b=${_b}k;; 37) _b=${_b}l;; 38) _b=${_b}m;; 39) _b=${_b}n;;
    40) _b=${_b}o;; 41) _b=${_b}p;; 42) _b=${_b}q;; 43) _b=${_b}r;; 44) _b=${_b}s;; 45) _b=${_b}t;; 46) _b=${_b}u;; 47) _b=${_b}v;;
    48) _b=${_b}w;; 49) _b=${_b}x;; 50) _b=${_b}y;; 51) _b=${_b}z;; 52) _b=${_b}0;; 53) _b=${_b}1;; 54) _b=${_b}2;; 55) _b=${_b}3;;
    56) _b=${_b}4;; 57) _b=${_b}5;; 58) _b=${_b}6;; 59) _b=${_b}7;; 60) _b=${_b}8;; 61) _b=${_b}9;; 62) _b=${_b}+;; *) _b=${_b}/;;
  esac
}
b64o() {  # $1 one character of the text: its code in _n
  case $1 in "$NL") _n=10 ;; "$TAB") _n=9 ;; *) _t=${ASC%%"$1"*}; _n=$((${#_t} + 32)) ;; esac
}
b64s() {  # $1 a text: printed in base64 as base64 -w0 prints it
  case $1 in *[!$PRINTABLE"$TAB$NL"]*) printf '%s' "$1" | "$B64" "$B64_ARG"; return ;; esac
  [ "${#1}" -le "$B64_SHORT" ] || { printf '%s' "$1" | "$B64" "$B64_ARG"; return; }
  _s=$1; _b=
  while [ -n "$_s" ]; do
    _r=${_s#?}; _c1=${_s%%"$_r"}; _s=$_r; b64o "$_c1"; _x=$_n; _k=1
    if [ -n "$_s" ]; then _r=${_s#?}; _c2=${_s%%"$_r"}; _s=$_r; b64o "$_c2"; _x=$((_x * 256 + _n)); _k=2; else _x=$((_x * 256)); fi
    if [ -n "$_s" ] && [ "$_k" = 2 ]; then _r=${_s#?}; _c3=${_s%%"$_r"}; _s=$_r; b64o "$_c3"; _x=$((_x * 256 + _n)); _k=3; else _x=$((_x * 256)); fi
    b64c $((_x >> 18)); b64c $((_x >> 12 & 63))
    if [ "$_k" -ge 2 ]; then b64c $((_x >> 6 & 63)); else _b=$_b=; fi
    if [ "$_k" -ge 3 ]; then b64c $((_x & 63)); else _b=$_b=; fi
  done
  printf '%s' "$_b"
}
# A name made only of safe characters travels as "=name"; others in base64, by the shell's own encoder when it
# can (a glob's name, its * and [, costs no process: issue 60).
rec() {
  case $2 in
    *[!A-Za-z0-9/._:+,@=-]*|'') printf '%s ' "$1"; b64s "$2"; printf ' %s ' "$3" ;;
    *) printf '%s =%s %s ' "$1" "$2" "$3" ;;
  esac
}

in_root() {  # the same, printed (for callers that take it in a command substitution)
  resolve_in_root "$1" || return 1
  printf '%s\n' "$IR"
}
emit_file() {
  p=$R$1
  if [ -n "$R" ]; then
    resolve_in_root "$1" || { rec F "$1" loop; echo; return 0; }
    p=$R$IR
  fi
  if [ -n "$R" ] && [ "$p" = "$R/dev/null" ]; then rec F "$1" ok; echo  # /dev/null reads empty: a masked file
  elif [ -d "$p" ]; then rec F "$1" dir; echo
  elif [ ! -e "$p" ]; then rec F "$1" missing; echo
  elif [ -z "$R" ] && [ -c "$p" ] && [ "$p" -ef /dev/null ]; then rec F "$1" ok; echo
  elif [ ! -f "$p" ]; then rec F "$1" special; echo  # a FIFO, socket or device: opening it could block or act
  elif [ ! -r "$p" ] || ! head -c 1 "$p" >/dev/null 2>&1; then rec F "$1" denied; echo
  else rec F "$1" ok; head -c "$((MAX + 1))" "$p" 2>/dev/null | "$B64" "$B64_ARG"; echo
  fi
}
unlisted() {  # $1 a pattern on the node: true when the folder its matches come from exists but cannot be
  # listed by this user (an empty list would then read as "no such files": unknown is never "none")
  d=${1%%[][*?]*}; d=${d%/*}
  [ -d "$R${d:-/}" ] && { [ ! -r "$R${d:-/}" ] || [ ! -x "$R${d:-/}" ]; }
}
emit_dir() { if [ -d "$R$1" ]; then rec D "$1" present; else rec D "$1" missing; fi; echo; }
emit_glob() {  # $1 pattern on the node; emits G with the matches (symlinks too: below a host root their
  # absolute targets do not resolve), then each file
  if unlisted "$1"; then rec G "$1" denied; echo; return 0; fi
  set +f
  m=
  for f in $R$1; do { [ -e "$f" ] || [ -L "$f" ]; } && m="$m${f#"$R"}$NL"; done
  set -f
  rec G "$1" ok; b64s "$m"; echo
  for f in $m; do emit_file "$f"; done
}
emit_lines() {  # $1 pattern of one-line sysfs text files: one awk reads them all (no process per file)
  if unlisted "$1"; then rec G "$1" denied; echo; return 0; fi
  pat=$1; _cwd=$PWD
  # globbed from the root itself: the matches need no prefix taken off, and their list is one printf (a list grown
  # name by name costs the square of 2,000 IRQs' names: issue 60)
  cd "$R/" 2>/dev/null || { rec G "$pat" denied; echo; return 0; }
  set +f
  set -- ${1#/}
  set -f
  [ $# -gt 1 ] || [ -e "$1" ] || set --  # no match: the pattern itself is not a file
  m=
  [ $# -eq 0 ] || m=$(printf '/%s\n' "$@")
  rec G "$pat" ok; b64s "$m"; echo
  [ $# -eq 0 ] || TA_ROOT= TA_LEAD=/ texts_awk "$@"
  cd "$_cwd" 2>/dev/null || cd /
}
texts_awk() {  # "$@": one-line text files (with the root's prefix), each one T record, read by one awk
  # Patterns as strings, with ']' first in a bracket and no backslash in one: a POSIX bracket expression
  # takes '\' literally and ends at the first ']' that is not first (BusyBox's regcomp does exactly that).
  awk -v r="${TA_ROOT-$R}" -v lead="${TA_LEAD-}" 'FNR == 1 {
      name = lead substr(FILENAME, length(r) + 1)
      if (name !~ "^[A-Za-z0-9/._:+,@=-]+$") next
      if ($0 ~ "^[][A-Za-z0-9,. _:/-]*$") printf "T =%s ok %s\n", name, $0
      else printf "T =%s unreadable \n", name }' "$@" 2>/dev/null
}
emit_texts() {  # $1 newline-separated paths (on the node) of one-line text files, read by one awk
  m=$1
  [ -n "$m" ] || return 0
  set --
  for f in $m; do set -- "$@" "$R$f"; done
  texts_awk "$@"
}
emit_cmd() {  # $1 label, rest: the command
  label=$1; shift
  out=$("$@" 2>/dev/null); rc=$?
  rec C "$label" "$rc"; b64s "$out"; echo
}
arg_value() {  # $1 cmdline file, $2.. flag names: print the value of the last occurrence
  tr '\0' '\n' < "$1" 2>/dev/null | awk -v names="$(printf '%s ' "$@" | cut -d' ' -f2-)" '
    BEGIN { n = split(names, want, " "); for (i = 1; i <= n; i++) if (want[i] != "") w[want[i]] = 1 }
    take { v = $0; take = 0; next }
    { a = $0; sub(/^--?/, "", a); eq = index(a, "=")
      if (eq) { if (substr(a, 1, eq - 1) in w) v = substr(a, eq + 1) }
      else if (a in w && $0 ~ /^-/) take = 1 }
    END { if (v != "") print v }'
}
walk_conf() {  # $1 folder on the node, $2 depth, $3 the names taken: every such file below it, as Go's
  # filepath.Walk/WalkDir find them (recursive, dotfiles too; folders that are symlinks are not entered): the
  # kubelet's --config-dir drop-ins (*.conf), CRI-O's crio.conf.d (every file, pkg/config UpdateFromPath)
  [ "$2" -ge 8 ] && return 0
  set +f
  for f in "$R$1"/* "$R$1"/.[!.]* "$R$1"/..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    if [ -d "$f" ] && [ ! -L "$f" ]; then walk_conf "${f#"$R"}" $(($2 + 1)) "$3"
    else case $f in $3) printf '%s\n' "${f#"$R"}" ;; esac
    fi
  done
  set -f
}
emit_walk() {  # $1 folder on the node, $2 the names taken (default *.conf): a G record of what walk_conf found,
  # then each of those files
  pat=${2:-*.conf}
  tag=walk; [ "$pat" = "*" ] && tag=walk-all
  if unlisted "$1/*"; then rec G "$tag:$1" denied; echo; return 0; fi
  m=$(walk_conf "$1" 0 "$pat")
  rec G "$tag:$1" ok; b64s "$m"; echo
  for f in $m; do emit_file "$f"; done
}
containerd_imports() {
  awk '
    /^[ \t]*\[/ { exit }
    /^[ \t]*imports[ \t]*=/ { grab = 1; sub(/^[^=]*=/, "") }
    grab { line = $0
      while (match(line, /"[^"]*"|\047[^\047]*\047/)) { print substr(line, RSTART + 1, RLENGTH - 2); line = substr(line, RSTART + RLENGTH) }
      if (index($0, "]")) exit }' "$R$1" 2>/dev/null
}
read_containerd() {  # $1 path, $2 depth; $ccwd: the daemon's working directory (empty: unknown)
  emit_file "$1"
  [ "$2" -ge 4 ] && return 0
  # Below a host root every link resolves inside it, as on the node (Flatcar's /etc/containerd/config.toml is an
  # absolute link into /usr/share): the file read for its imports, and the folders the import globs match in.
  rp=$1
  if [ -n "$R" ]; then rp=$(in_root "$1") || return 0; fi
  [ -f "$R$rp" ] || return 0
  # every file its imports name or match, one per line ("-denied PATH": a folder that could not be listed),
  # recorded as a whole: a file whose imports were not read is then unknown, never one importing nothing
  found=$(for pat in $(containerd_imports "$rp"); do
    # A relative path is joined with the file's folder; a relative glob too from containerd 1.6.29/1.7.16,
    # matched against the daemon's working directory before (resolveImports): expand it both ways.
    case $pat in
      /*) pats=$pat ;;
      *'*'*) pats="$(dirname "$1")/$pat"; [ -n "$ccwd" ] && pats="$pats$NL${ccwd%/}/$pat" ;;
      *) pats="$(dirname "$1")/$pat" ;;
    esac
    for ip in $pats; do
      if unlisted "$ip"; then printf '%s\n' "-denied $ip"; continue; fi
      # containerd globs only a path holding '*' (resolveImports); any other it opens as named, and one that is
      # missing stops it ("failed to load TOML"): listed whether or not it exists, so its absence is recorded
      case $ip in *'*'*) ;; *) printf '%s\n' "$ip"; continue ;; esac
      # Go's filepath.Glob matches a leading dot with '*' and '?' (path/filepath.Match), the shell does not: the
      # file name's pattern is also expanded with the dot written out (.*.toml for *.toml), never '.' and '..'
      last=${ip##*/}; dir=${ip%/*}; rdir=$dir
      if [ -n "$R" ]; then case $dir in *[][*?]*) ;; *) rdir=$(in_root "$dir/") || continue; rdir=${rdir%/} ;; esac; fi
      dotp=
      case $last in '*'*) dotp=".$last" ;; '?'*) dotp=".${last#?}" ;; esac
      set +f
      for f in "$R$rdir"/$last ${dotp:+"$R$rdir"/$dotp}; do
        case ${f##*/} in .|..) continue ;; esac
        [ -e "$f" ] && printf '%s\n' "$dir/${f##*/}"  # as the node names it; not echo: dash's expands backslashes
      done
      set -f
    done
  done)
  rec G "imports-of:$1" ok; b64s "$found"; echo
  [ -n "$found" ] || return 0
  printf '%s\n' "$found" | while IFS= read -r f; do
    case $f in -denied\ *) rec G "import:$1" denied; b64s "${f#-denied }"; echo; continue ;; esac
    rec G "import:$1" ok; b64s "$f"; echo
    read_containerd "$f" $(($2 + 1))
  done
}

# The release of each verified daemon (issue 58) is decided by the runner from what no user of the node can forge;
# this collects, for the kubelet (or k3s), containerd and CRI-O, in one pass whatever their number:
# - NAME-package: the installed package that owns the running executable (dpkg, else rpm at /var/lib/rpm,
#   /usr/lib/sysimage/rpm or rpm-ostree's /usr/share/rpm, each resolved inside the host root), and NAME-package-proof:
#   whether the file that runs is still the one that package installed. dpkg renames every file of a package into
#   place before it writes info/PKG.list (src/main/unpack.c: tar_deferred_extract, then write_filelist_except), so an
#   executable whose ctime is no later than that list's mtime is unchanged since; else its digest against the one dpkg
#   recorded while unpacking (info/PKG.md5sums, write_filehash_except). For rpm: the size and mtime its header records
#   (rpm -V's S and T; rpm sets the mtime it records), else the digest (FILEDIGESTS, by FILEDIGESTALGO). A digest is
#   computed only where the cheap proof fails, of /proc/PID/exe: the file that runs, even when replaced on disk.
# - NAME-journal: the daemon's own start line in the journal, matched by journald's trusted fields only (_PID, _UID=0,
#   _BOOT_ID: a client cannot set them; systemd.journal-fields(7)), never by SYSLOG_IDENTIFIER, within the first five
#   minutes of its life. Read only where no package proves the release and no platform record names it.
# - The platform's own records (EKS /etc/eks/*-version.txt, Bottlerocket's application inventory), with whether only
#   root could have written them and their mtime (M record-stat:PATH "MTIME SAFE").
# The exes' and the records' "CTIME MTIME SIZE" come from one stat (M exe-stat:PID).
emit_releases() {  # $1: lines "NAME PID EXE" of the verified daemons whose release matters
  _dl=$1
  [ -n "$_dl" ] || return 0
  _paths=
  for _dl1 in $_dl; do _dr=${_dl1#* }; _dr=${_dr#* }; _paths="$_paths${_dr% (deleted)}$NL"; done
  set --; for _dp in $_paths; do set -- "$@" "$_dp"; done
  _db=$R/var/lib/dpkg; _own=; _dpkg=
  if [ -f "$_db/status" ]; then
    if ! command -v dpkg-query >/dev/null 2>&1; then _dpkg=notool:dpkg-query
    elif ! command -v timeout >/dev/null 2>&1; then _dpkg="notool:timeout (to bound dpkg-query in time)"
    else _dpkg=ok; _own=$(timeout -s KILL 20 dpkg-query --admindir="$_db" -S -- "$@" 2>/dev/null); fi
  fi
  # each daemon's owning package (dpkg-query -S prints "PKG[, PKG2]: PATH"; diversions are not owners)
  _pkgs=; _lists=; _need_rpm=
  for _dl1 in $_dl; do
    _dn=${_dl1%% *}; _dr=${_dl1#* }; _pid=${_dr%% *}; _e=${_dr#* }; _e=${_e% (deleted)}; _do=
    for _dx in $_own; do case $_dx in "diversion "*) ;; *": $_e") _do=${_dx%": $_e"}; _do=${_do%%,*} ;; esac; done
    eval "own_$_dn=\$_do"
    if [ -n "$_do" ]; then _pkgs="$_pkgs$_do$NL"; _lists="$_lists$_db/info/$_do.list$NL"; else _need_rpm="$_need_rpm$_dl1$NL"; fi
  done
  _vers=
  if [ -n "$_pkgs" ]; then
    set --; for _dp in $_pkgs; do set -- "$@" "$_dp"; done
    _vers=$NL$(timeout -s KILL 20 dpkg-query --admindir="$_db" -W -f '${binary:Package} ${Version}\n' -- "$@" 2>/dev/null)$NL
  fi
  # rpm for what dpkg does not own
  _rdb=; _rpmq=; _rpm=
  if [ -n "$_need_rpm" ]; then
    for _d in /var/lib/rpm /usr/lib/sysimage/rpm /usr/share/rpm; do
      resolve_in_root "$_d/" || continue
      [ -f "$R$IR/rpmdb.sqlite" ] || [ -f "$R$IR/Packages" ] || [ -f "$R$IR/Packages.db" ] || continue
      _rdb=$IR; break
    done
    if [ -n "$_rdb" ]; then
      if ! command -v rpm >/dev/null 2>&1; then _rpm=notool:rpm
      elif ! command -v timeout >/dev/null 2>&1; then _rpm="notool:timeout (to bound rpm in time)"
      else
        _rpm=ok
        set --; _want=
        [ -n "$R" ] && set -- --root "$R"  # (IFS is a newline here: an unquoted "--root $R" would stay one word)
        set -- "$@" --dbpath "$_rdb" -qf --queryformat \
          '=%{NAME} %{VERSION}-%{RELEASE} %{FILEDIGESTALGO}\n[%{FILESIZES} %{FILEMTIMES} %{FILEDIGESTS} %{FILENAMES}\n]' --
        for _dl1 in $_need_rpm; do _dr=${_dl1#* }; _dr=${_dr#* }; _dr=${_dr% (deleted)}; set -- "$@" "$_dr"; _want="$_want$_dr$NL"; done
        _rpmq=$(timeout -s KILL 60 rpm "$@" 2>/dev/null | GNC_WANT=$_want awk '
            BEGIN { n = split(ENVIRON["GNC_WANT"], a, "\n"); for (i = 1; i <= n; i++) if (a[i] != "") w[a[i]] = 1 }
            /^=/ { print; next }
            { f = $0; sub(/^[^ ]* [^ ]* [^ ]* /, "", f); if (f in w) print }')
      fi
    fi
  fi
  # one stat: the running executables, the dpkg file lists, the platform's records
  _recs=
  for _df in /etc/eks/kubelet-version.txt /etc/eks/containerd-version.txt /usr/share/bottlerocket/application-inventory.json \
            /var/lib/bottlerocket/inventory/applications.json ${rpid:+/var/run/crio/version}; do
    [ -e "$R$_df" ] && _recs="$_recs$_df$NL"
  done
  # the file that runs: the executable's path resolved inside the root (the same inode, while it is not replaced);
  # /proc/PID/exe, the kernel's link to the running inode, for one replaced since it started
  set --
  for _dl1 in $_dl; do
    _dr=${_dl1#* }; _pid=${_dr%% *}; _e=${_dr#* }
    case $_e in *' (deleted)') _rf=$R/proc/$_pid/exe ;; *) _rf=$R/proc/$_pid/exe; resolve_in_root "$_e" && _rf=$R$IR ;; esac
    eval "runf_$_pid=\$_rf"; set -- "$@" "$_rf"
  done
  for _dp in $_lists; do set -- "$@" "$_dp"; done
  for _dp in $_recs; do set -- "$@" "$R$_dp"; done
  _st=$NL$(stat -L -c '%Z %Y %s|%n' -- "$@" 2>/dev/null)$NL
  _rsafe=; _rneed=; _pairs=
  for _df in $_recs; do resolve_in_root "$_df" && { _pairs="$_pairs$_df|$IR$NL"; _rneed="$_rneed$R$_df$NL$R$IR$NL"; }; done
  [ -n "$_rneed" ] && _rsafe=$NL$(safe_set "$R" "$_rneed")$NL
  _plat=
  for _df in $_recs; do
    emit_file "$_df"
    _dx=${_st%%"|$R$_df$NL"*}; _dm=
    [ "$_dx" != "$_st" ] && { _dx=${_dx##*"$NL"}; _dm=${_dx#* }; _dm=${_dm%% *}; }
    _ir=$NL$_pairs; _ir=${_ir#*"$NL$_df|"}; _ir=${_ir%%"$NL"*}
    _ok=no
    case $NL$_pairs in *"$NL$_df|"*) case $_rsafe in *"$NL$R$_df$NL"*) case $_rsafe in *"$NL$R$_ir$NL"*) _ok=yes ;; esac ;; esac ;; esac
    rec M "record-stat:$_df" ok; b64s "${_dm:--} $_ok"; echo
    [ "$_ok" = yes ] && _plat="$_plat$_df$NL"
  done
  for _dl1 in $_dl; do
    _dn=${_dl1%% *}; _dr=${_dl1#* }; _pid=${_dr%% *}; _e=${_dr#* }; _del=; case $_e in *' (deleted)') _del=1; _e=${_e% (deleted)} ;; esac
    eval "_rf=\$runf_$_pid"
    _dx=${_st%%"|$_rf$NL"*}; _es=
    [ "$_dx" != "$_st" ] && _es=${_dx##*"$NL"}
    rec M "exe-stat:$_pid" ok; b64s "$_es"; echo
    eval "_do=\$own_$_dn"; _proof=; _proven=
    if [ -n "$_do" ]; then
      _dv=${_vers#*"$NL$_do "}; _dv=${_dv%%"$NL"*}
      if [ "$_dv" = "$_vers" ] || [ -z "$_dv" ]; then rec C "$_dn-package" unread; b64s "dpkg $_do"; echo; continue; fi
      rec C "$_dn-package" 0; b64s "dpkg $_do $_dv"; echo
      _dx=${_st%%"|$_db/info/$_do.list$NL"*}; _lm=
      [ "$_dx" != "$_st" ] && { _dx=${_dx##*"$NL"}; _lm=${_dx#* }; _lm=${_lm%% *}; }
      if [ -z "$_del" ] && [ -n "$_es" ] && [ -n "$_lm" ] && [ "${_es%% *}" -le "$_lm" ]; then
        _proof="ctime ${_es%% *} $_lm"; _proven=1
      else
        _want=$(awk -v f="${_e#/}" '{ i = index($0, "  "); if (i && substr($0, i + 2) == f) { print substr($0, 1, i - 1); exit } }' \
          "$_db/info/$_do.md5sums" 2>/dev/null)
        _have=$(timeout -s KILL 60 md5sum < "$_rf" 2>/dev/null); _have=${_have%% *}
        _proof="digest md5 ${_have:--} ${_want:--} ${_lm:--}"; [ -n "$_have" ] && [ "$_have" = "$_want" ] && _proven=1
      fi
    else
      _hdr=; _file=
      for _dx in $_rpmq; do
        case $_dx in =*) _hdr=${_dx#=} ;; *" $_e") _file=$_dx; break ;; esac
      done
      if [ -n "$_file" ]; then
        _name=${_hdr%% *}; _rest=${_hdr#* }; _vr=${_rest%% *}; _algo=${_rest#* }
        rec C "$_dn-package" 0; b64s "rpm $_name $_vr"; echo
        IFS=' '; set -- $_file; IFS=$NL  # SIZE MTIME DIGEST NAME
        _es_s=${_es##* }; _es_m=${_es#* }; _es_m=${_es_m%% *}
        if [ -z "$_del" ] && [ -n "$_es" ] && [ "$1" = "$_es_s" ] && [ "$2" = "$_es_m" ]; then
          _proof="rpm-attrs $1 $2"; _proven=1
        else
          case $_algo in 1|''|'(none)') _tool=md5sum ;; 2) _tool=sha1sum ;; 8) _tool=sha256sum ;; 9) _tool=sha384sum ;;
            10) _tool=sha512sum ;; 11) _tool=sha224sum ;; *) _tool= ;; esac  # rpm's PGPHASHALGO numbers
          _have=
          if [ -n "$_tool" ] && command -v "$_tool" >/dev/null 2>&1; then
            _have=$(timeout -s KILL 60 "$_tool" < "$_rf" 2>/dev/null); _have=${_have%% *}
          fi
          _proof="digest ${_tool:-algo$_algo} ${_have:--} ${3:--} $1:$2"; [ -n "$_have" ] && [ "$_have" = "$3" ] && _proven=1
        fi
      # no owner: a database that could not be asked leaves it unknown (a tool missing from the audit's own image
      # below a host root, or from the node), never "no package"
      elif [ "$_dpkg" != "${_dpkg#notool:}" ]; then rec C "$_dn-package" notool; b64s "${_dpkg#notool:}"; echo
      elif [ "$_rpm" != "${_rpm#notool:}" ]; then rec C "$_dn-package" notool; b64s "${_rpm#notool:}"; echo
      elif [ -n "$_dpkg$_rdb" ]; then rec C "$_dn-package" unowned; echo
      else rec C "$_dn-package" nodb; echo
      fi
    fi
    [ -n "$_proof" ] && { rec M "$_dn-package-proof" ok; b64s "$_proof"; echo; }
    # the journal, where neither a package nor a platform record of root's says which release runs
    [ -n "$_proven" ] && continue
    case $_dn in
      kubelet) case $_plat in *eks/kubelet*|*bottlerocket*) continue ;; esac ;;
      containerd) case $_plat in *eks/containerd*|*bottlerocket*) continue ;; esac ;;
      *) continue ;;  # CRI-O writes its version file at each start
    esac
    if ! command -v journalctl >/dev/null 2>&1 || ! command -v timeout >/dev/null 2>&1; then rec C "$_dn-journal" 127; echo; continue; fi
    eval "_ds=\$start_$_pid"
    if [ -z "$bootid" ] || [ -z "$btime" ] || [ -z "$_ds" ]; then rec C "$_dn-journal" unread; echo; continue; fi
    _since=$((btime + _ds / 100))  # USER_HZ: 100 on every Linux architecture (include/asm-generic/param.h)
    if [ -n "$R" ]; then _jd="--directory=$R/var/log/journal"; else _jd=--quiet; fi
    _j=$(timeout -s KILL 20 journalctl "$_jd" --no-pager -o json --output-fields=MESSAGE,_PID,_UID,_BOOT_ID,_SYSTEMD_UNIT \
      --since "@$_since" --until "@$((_since + 300))" "_PID=$_pid" _UID=0 "_BOOT_ID=$bootj" 2>/dev/null |
      awk 'index($0, "Kubelet version") || index($0, "starting containerd") { print; exit }')  # JSON escapes its quotes
    if [ -n "$_j" ]; then rec C "$_dn-journal" 0; b64s "$_j"; echo; else rec C "$_dn-journal" notfound; echo; fi
  done
}

rec M version ok; b64s 1; echo
rec M root ok; b64s "$R"; echo
rec M path-dropped ok; b64s "$dropped"; echo  # PATH folders a user other than root could write: not used
emit_file /proc/sys/kernel/hostname
emit_file /etc/os-release  # the OS image, for the node's identity record
emit_cmd uname uname -r
emit_cmd uname-m uname -m  # the machine: NVLink-C2C joins GPUs to Grace (aarch64) CPUs only
emit_cmd stat-cgroup stat -fc %t "$R/sys/fs/cgroup"  # the magic: BusyBox stat names cgroup2fs "UNKNOWN"
# This boot (its id, as journald's _BOOT_ID and the Node's nodeInfo.bootID name it) and when it began (btime): a
# daemon's start time is btime plus its /proc/PID/stat starttime
bootid=; { IFS= read -r bootid < /proc/sys/kernel/random/boot_id; } 2>/dev/null
btime=$(awk '$1 == "btime" { print $2; exit }' /proc/stat 2>/dev/null)
IFS=-; set -- $bootid; IFS=$NL; bootj=$1$2$3$4$5
rec M boot ok; b64s "$bootid $btime"; echo

# Processes of interest: kubelet and the container runtimes. Every process's command name is read by head (its
# "==> FILE <==" headers say whose; /dev/null first, so that there are headers for a single process too) and
# picked by one awk: no process per process, and no byte-by-byte read (dash's `read` makes a system call per
# byte). The names are given to head by xargs, in batches that fit the kernel's argument limit (ARG_MAX: with
# 200,000 processes one command line of every /proc/N/comm would not, and head would not start); paths are
# relative to /proc, so a host root's own name never reaches xargs' word splitting. Without xargs, one head.
# A name that looks like a header is not one of these.
set +f
procs=$(cd "$R/proc" 2>/dev/null && {
  if command -v xargs >/dev/null 2>&1; then printf '%s\n' [0-9]*/comm | xargs head -n 1 /dev/null
  else head -n 1 /dev/null [0-9]*/comm; fi; } 2>/dev/null | awk '
  /^==> .* <==$/ { pid = ""; if (match($0, /^==> [0-9]+\/comm <==$/)) { pid = substr($0, 5, RLENGTH - 13) }; next }
  pid != "" && /^(kubelet|containerd|crio|dockerd|k3s|k3s-server|k3s-agent|nv-fabricmanage|nvidia-persiste)$/ { print pid " " $0 }
  { pid = "" }')
set -f
trusted_file() {  # $1 a path on the node: true when only root could have written it (or this collector's user):
  # the file and every folder above it as named, and again once its links are resolved inside the root
  resolve_in_root "$1" || return 1
  [ "$(safe_set "$R" "$R$1$NL$R$IR")" = "$R$1$NL$R$IR" ]
}
# A process is one of the node's daemons only when nothing a local user can forge says so (issue 50): its
# command name is free to choose (a file named kubelet, prctl(PR_SET_NAME)), so it must also run as root (real,
# effective, saved and filesystem uids 0), in the node's own PID and mount namespaces (those of PID 1, which a
# container's processes are not in), from an executable that only root could have written: the file and every
# folder above it, as named and with its links resolved (for an executable replaced since it started, the
# running file itself, through /proc/PID/exe, and its folder). For each candidate: why (what rules it out, "" if
# nothing), exe (as the kernel names it, " (deleted)" when replaced) and need (the paths, prefixed, that safe_set
# must keep).
# Each candidate is examined in passes that start a bounded number of processes whatever their number: its uids
# and its start time (/proc/PID/stat field 22, clock ticks after boot) by the shell's own reads; its namespaces,
# beside PID 1's, by one stat (a namespace is its inode); the executable of each that is left by readlink; then one
# safe_set for all executables. Only a verified daemon's command line and working directory are read (issue 59): a
# user's process named kubelet gets nothing of its memory read, however large its argv. At most CAND_MAX candidates
# of one name are recorded (a node with thousands of processes a user named kubelet costs nothing more). The
# nvidia-persistenced that NVIDIA's unit starts drops root for the account its --user names, so of the GPU daemons
# only nv-fabricmanager must run as root; every daemon runs from a root-only executable in the node's namespaces.
CAND_MAX=8
daemon_uid() {  # $1 pid, $2 comm: sets why ("" if it may still be the daemon) and start
  _d=$R/proc/$1; _dpid=$1; _dcomm=$2; why=; _u=; start=; _st=
  { while IFS= read -r _l; do case $_l in Uid:*) _u=${_l#Uid:}; break ;; esac; done < "$_d/status"; } 2>/dev/null
  { IFS= read -r _st < "$_d/stat"; } 2>/dev/null
  IFS=' 	'; set -- $_u; _u="$*"; set -- ${_st##*) }; start=${20:-}; IFS=$NL  # uids "0 0 0 0": real, effective, saved, fs
  if [ -z "$_u" ]; then why="its /proc/$_dpid/status could not be read"; return; fi
  case $start in ''|*[!0-9]*) why="its /proc/$_dpid/stat could not be read"; start=; return ;; esac
  [ "$_dcomm" = nvidia-persiste ] && return 0
  if [ "$_u" != "0 0 0 0" ]; then why="it runs as uid ${_u%% *} (uids $_u), not root"; fi
}
kpid=; cpid=; kcwd=; ccwd=; rpid=; kpid_k3s=; kexe=; cexe=; rexe=; k3exe=; nk=0; nc=0; nr=0; n3=0; dpid=; nd=0
cands=; nslinks=; verified=
for _k in k c r d t f p; do eval "seen_$_k=0; over_$_k=0"; done  # nothing of the environment's reaches the counts
while IFS=" " read -r pid c; do
  [ -n "$pid" ] || continue
  case $c in kubelet) _k=k ;; containerd) _k=c ;; crio) _k=r ;; dockerd) _k=d ;; k3s|k3s-server|k3s-agent) _k=t ;;
    nv-fabricmanage) _k=f ;; *) _k=p ;; esac
  eval "_n=\${seen_$_k:-0}"
  _n=$((_n + 1)); eval "seen_$_k=\$_n"
  if [ "$_n" -gt "$CAND_MAX" ]; then eval "over_$_k=\$((\${over_$_k:-0} + 1))"; continue; fi
  daemon_uid "$pid" "$c"
  eval "why_$pid=\$why; start_$pid=\$start"
  cands="$cands$pid $c$NL"
  [ -z "$why" ] && nslinks="$nslinks$R/proc/$pid/ns/pid$NL$R/proc/$pid/ns/mnt$NL"
done <<EOF
$procs
EOF
# namespaces: "DEV:INODE|PATH" of each candidate's and PID 1's (stat -L follows the ns links; a link that cannot be
# read, another user's without root or CAP_SYS_PTRACE, has no line)
nsinfo=
if [ -n "$nslinks" ]; then
  set --
  for _p in $R/proc/1/ns/pid$NL$R/proc/1/ns/mnt$NL$nslinks; do set -- "$@" "$_p"; done
  nsinfo=$NL$(stat -L -c '%d:%i|%n' -- "$@" 2>/dev/null)$NL
fi
ns_of() {  # $1 a path of nslinks: sets NS to its "DEV:INODE", or to nothing
  NS=${nsinfo%%"|$1$NL"*}
  if [ "$NS" = "$nsinfo" ]; then NS=; else NS=${NS##*"$NL"}; fi
}
ns_of "$R/proc/1/ns/pid"; ns_pid1=$NS; ns_of "$R/proc/1/ns/mnt"; ns_mnt1=$NS
allneed=
for _l in $cands; do
  pid=${_l%% *}; c=${_l#* }
  eval "why=\$why_$pid"; exe=; need=; _d=$R/proc/$pid
  if [ -z "$why" ]; then
    ns_of "$_d/ns/pid"; _a=$NS; ns_of "$_d/ns/mnt"; _b=$NS
    if [ -z "$_a" ] || [ -z "$_b" ] || [ -z "$ns_pid1" ] || [ -z "$ns_mnt1" ]; then
      why="its namespaces or PID 1's could not be read (another user's /proc/PID/ns needs root or CAP_SYS_PTRACE)"
    elif [ "$_a" != "$ns_pid1" ] || [ "$_b" != "$ns_mnt1" ]; then
      why="it runs in other namespaces than the node's PID 1 (a container's process)"
    fi
  fi
  if [ -z "$why" ]; then
    exe=$(readlink "$_d/exe" 2>/dev/null)
    case $exe in
      '') why="its executable (/proc/$pid/exe) could not be read" ;;
      *' (deleted)')
        _f=${exe% (deleted)}
        if resolve_in_root "${_f%/*}/"; then need="$_d/exe$NL$R${_f%/*}$NL$R$IR$NL"; else why="its folder ${_f%/*} is gone"; fi ;;
      *) if resolve_in_root "$exe"; then need="$R$exe$NL$R$IR$NL"; else why="its executable $exe could not be resolved"; fi ;;
    esac
  fi
  allneed=$allneed$need
  eval "why_$pid=\$why; exe_$pid=\$exe; need_$pid=\$need"
done
safe=$NL
[ -n "$allneed" ] && safe=$NL$(safe_set "$R" "$allneed")$NL
for _l in $cands; do
  pid=${_l%% *}; c=${_l#* }
  eval "why=\$why_$pid; exe=\$exe_$pid; need=\$need_$pid; start=\$start_$pid"
  if [ -z "$why" ]; then
    for _p in $need; do
      case $safe in *"$NL$_p$NL"*) ;; *) why="its executable $exe can be written by a user other than root (the file or a folder above it)"; break ;; esac
    done
  fi
  rec P "$c" "$pid"; echo
  rec L "/proc/$pid/exe" ok
  case $exe in *"$NL"*) printf '%s' "$exe" | tr -d '\n' | "$B64" "$B64_ARG" ;; *) b64s "$exe" ;; esac; echo
  rec M "daemon:$pid" ok; b64s "$why"; echo
  [ -z "$why" ] || continue
  # A verified daemon: when it started (what is read below is dropped if this PID names another process by the end,
  # and the journal's and the API's records are tied to this very process), its command line and working directory.
  rec M "daemon-start:$pid" ok; b64s "$start"; echo
  verified="$verified$pid$NL"
  case $c in nv-fabricmanage|nvidia-persiste) continue ;; esac  # nothing of theirs is read
  emit_file "/proc/$pid/cmdline"
  w=$(readlink "$R/proc/$pid/cwd" 2>/dev/null)
  rec L "/proc/$pid/cwd" ok
  case $w in *"$NL"*) printf '%s' "$w" | tr -d '\n' | "$B64" "$B64_ARG" ;; *) b64s "$w" ;; esac; echo
  case $c in
    kubelet) nk=$((nk + 1)); kpid=$pid; kcwd=$w; kexe=$exe ;;
    containerd) nc=$((nc + 1)); cpid=$pid; ccwd=$w; cexe=$exe ;;
    crio) nr=$((nr + 1)); rpid=$pid; rexe=$exe ;;
    dockerd) nd=$((nd + 1)); dpid=$pid ;;
    k3s|k3s-server|k3s-agent) n3=$((n3 + 1)); kpid_k3s=$pid; k3exe=$exe ;;
  esac
done
for _k in k:kubelet c:containerd r:crio d:dockerd t:k3s f:nv-fabricmanage p:nvidia-persiste; do
  eval "_n=\${over_${_k%%:*}:-0}"
  if [ "$_n" -gt 0 ]; then rec M "candidates-left-out:${_k#*:}" ok; b64s "$_n"; echo; fi
done
[ "$nk" -eq 1 ] || kpid=
[ "$nc" -eq 1 ] || { cpid=; ccwd=; }
[ "$nr" -eq 1 ] || rpid=
[ "$n3" -eq 1 ] || kpid_k3s=
[ "$nd" -eq 1 ] || dpid=
dl=
if [ -n "$kpid" ]; then dl="kubelet $kpid $kexe$NL"; elif [ -n "$kpid_k3s" ]; then dl="kubelet $kpid_k3s $k3exe$NL"; fi
[ -n "$cpid" ] && dl="${dl}containerd $cpid $cexe$NL"
[ -n "$rpid" ] && dl="${dl}crio $rpid $rexe$NL"
emit_releases "$dl"

# Kubelet: --config file (no default path), --config-dir drop-ins, state files under --root-dir.
root_dir=/var/lib/kubelet
if [ -n "$kpid" ]; then
  cwd=$kcwd
  cfg=$(arg_value "$R/proc/$kpid/cmdline" config)
  cdir=$(arg_value "$R/proc/$kpid/cmdline" config-dir)
  rd=$(arg_value "$R/proc/$kpid/cmdline" root-dir root_dir)
  [ -n "$rd" ] && root_dir=$rd
  for v in cfg cdir root_dir; do
    eval "x=\$$v"
    case $x in ''|/*) ;; *) eval "$v=\${cwd:-}/\$x" ;; esac
  done
  [ -n "$cfg" ] && emit_file "$cfg"
  [ -n "$cdir" ] && emit_walk "$cdir"
fi
# k3s runs the kubelet inside its own process: the kubelet's flags are k3s's kubelet-arg values, from its
# command line and /etc/rancher/k3s/config.yaml (+ config.yaml.d). Read those, and the files that
# `config=` / `config-dir=` among them name (a YAML-blind scan: the runner parses the YAML itself).
if [ "$nk" -eq 0 ]; then
  if [ -n "${kpid_k3s:-}" ]; then
    emit_file /etc/rancher/k3s/config.yaml
    emit_glob '/etc/rancher/k3s/config.yaml.d/*.yaml'
    set +f
    named=$( { tr '\0' '\n' < "$R/proc/$kpid_k3s/cmdline"
               for f in "$R"/etc/rancher/k3s/config.yaml "$R"/etc/rancher/k3s/config.yaml.d/*.yaml; do
                 [ -f "$f" ] && head -c "$MAX" "$f"  # regular files only, bounded: as emit_file reads them
               done; } 2>/dev/null |
      awk '{ while (match($0, "(^|[^A-Za-z0-9-])config(-dir)?=[^] \"\047,]+")) { t = substr($0, RSTART, RLENGTH); sub(/^[^c]*/, "", t); print t; $0 = substr($0, RSTART + RLENGTH) } }')
    set -f
    for t in $named; do
      case $t in
        config=/*) emit_file "${t#config=}" ;;
        config-dir=/*) emit_walk "${t#config-dir=}" ;;
      esac
    done
  fi
fi
emit_file "$root_dir/cpu_manager_state"
emit_file "$root_dir/memory_manager_state"
emit_file "$root_dir/device-plugins/kubelet_internal_checkpoint"  # which pod holds which device (GPU)
emit_file "$root_dir/dra_manager_state"  # which ResourceClaims (DRA: GPUs too) the kubelet prepared, for which pods
emit_glob "$root_dir/plugins_registry/*"  # the plugins registered with the kubelet: DRA drivers hand out GPUs too

# Runtime configuration (its release: emit_releases above; CRI-O writes its own to /var/run/crio/version each time it
# starts, internal/version WriteVersionFile, crio.conf(5) version_file).
ccfg=
if [ -n "$cpid" ]; then
  ccfg=$(arg_value "$R/proc/$cpid/cmdline" config c)
  case $ccfg in ''|/*) ;; *) [ -n "$ccwd" ] && ccfg="${ccwd%/}/$ccfg" ;; esac
fi
read_containerd "${ccfg:-/etc/containerd/config.toml}" 0
# CRI-O: its --config/-c file and --config-dir/-d drop-ins, or the CONTAINER_CONFIG and CONTAINER_CONFIG_DIR of its
# environment, else /etc/crio/crio.conf and /etc/crio/crio.conf.d (internal/criocli/criocli.go). Of its
# environment only the CONTAINER_* names that decide the judged settings leave the node.
rcfg=/etc/crio/crio.conf; rdir=/etc/crio/crio.conf.d
if [ -n "$rpid" ]; then
  renv=$(tr '\0' '\n' < "$R/proc/$rpid/environ" 2>/dev/null | awk '/^CONTAINER_(CONFIG|CONFIG_DIR|CGROUP_MANAGER|DEFAULT_RUNTIME|RUNTIMES)=/')
  if [ -r "$R/proc/$rpid/environ" ]; then rec C crio-environ 0; else rec C crio-environ 1; fi
  b64s "$renv"; echo
  v=$(printf '%s\n' "$renv" | awk -F= '$1 == "CONTAINER_CONFIG" { sub(/^[^=]*=/, ""); print }'); [ -n "$v" ] && rcfg=$v
  v=$(printf '%s\n' "$renv" | awk -F= '$1 == "CONTAINER_CONFIG_DIR" { sub(/^[^=]*=/, ""); print }'); [ -n "$v" ] && rdir=$v
  v=$(arg_value "$R/proc/$rpid/cmdline" config c); [ -n "$v" ] && rcfg=$v
  v=$(arg_value "$R/proc/$rpid/cmdline" config-dir d); [ -n "$v" ] && rdir=$v
fi
emit_file "$rcfg"
case $rdir in /*) emit_walk "$rdir" '*' ;; esac
# Docker (behind cri-dockerd): the daemon's --config-file, else /etc/docker/daemon.json, holds its cgroup driver
# (exec-opts native.cgroupdriver; dockerd(8))
dcfg=/etc/docker/daemon.json
if [ -n "$dpid" ]; then v=$(arg_value "$R/proc/$dpid/cmdline" config-file); [ -n "$v" ] && dcfg=$v; fi
case $dcfg in /*) emit_file "$dcfg" ;; esac

# Cgroups.
for d in /sys/fs/cgroup/kubepods.slice /sys/fs/cgroup/kubepods \
         /sys/fs/cgroup/cpu/kubepods.slice /sys/fs/cgroup/cpu/kubepods \
         /sys/fs/cgroup/cpuset/kubepods.slice /sys/fs/cgroup/cpuset/kubepods; do
  emit_dir "$d"
done

# Network sysctls of the namespace this runs in (the host's, over SSH).
for s in net/ipv4/tcp_tw_reuse net/core/somaxconn net/ipv4/ip_local_port_range net/ipv4/ip_local_reserved_ports; do
  emit_file "/proc/sys/$s"
done

# Where system services and device interrupts may run (kept off the CPUs pods get exclusively?): the
# system.slice cpuset, systemd's CPUAffinity=, and each IRQ's affinity with its handlers' names.
emit_file /sys/fs/cgroup/system.slice/cpuset.cpus.effective
for d in /etc/systemd /run/systemd /usr/local/lib/systemd /usr/lib/systemd; do  # systemd-system.conf(5)'s folders
  emit_file "$d/system.conf"
  emit_glob "$d/system.conf.d/*.conf"
done
# PID 1's name and Cpus_allowed_list (the affinity systemd really runs with, and its services inherit); only
# those lines travel: the rest of /proc/1/status changes from one read to the next
if [ -e "$R/proc/1/status" ]; then
  emit_cmd pid1-status awk '/^(Name|Cpus_allowed_list):/' "$R/proc/1/status"
else
  rec C pid1-status missing; echo
fi
emit_file /proc/cmdline  # isolcpus=managed_irq,...
emit_lines '/proc/irq/[0-9]*/smp_affinity_list'
emit_lines '/proc/irq/[0-9]*/effective_affinity_list'
# Kernel-managed IRQs cannot be moved through /proc/irq; debugfs (root only) is the one place that says which
# they are (kernel/irq/debugfs.c prints IRQD_AFFINITY_MANAGED in an IRQ's dstate)
dbg=$R/sys/kernel/debug/irq/irqs
if [ -d "$dbg" ] && [ -r "$dbg" ] && [ -x "$dbg" ]; then
  set +f
  managed=$(awk '/IRQD_AFFINITY_MANAGED/ { print FILENAME }' "$dbg"/[0-9]* 2>/dev/null)
  set -f
  rec M managed-irqs ok; b64s "$managed"; echo
else
  rec M managed-irqs missing; echo
fi
acts=; _cwd=$PWD
if cd "$R/" 2>/dev/null; then  # a pattern ending in / matches folders only: one glob, one printf
  set +f
  set -- proc/irq/[0-9]*/*/
  set -f
  [ $# -gt 1 ] || [ -d "$1" ] || set --
  [ $# -eq 0 ] || acts=$(printf '/%s\n' "$@")
  cd "$_cwd" 2>/dev/null || cd /
fi
rec M irq-actions ok; b64s "$acts"; echo

# NUMA topology and SMT siblings.
emit_file /sys/devices/system/node/online
emit_file /sys/devices/system/cpu/online
emit_lines '/sys/devices/system/node/node[0-9]*/cpulist'
emit_lines '/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list'

# GPUs: NVIDIA PCI functions (vendor 0x10de) of the display class (0x03xxxx), their sysfs NUMA and
# link attributes; then NVML through python3 (the bindings travel in this script), else nvidia-smi.
gpus=
set +f
for d in "$R"/sys/bus/pci/devices/*; do
  { read -r v < "$d/vendor"; } 2>/dev/null || continue
  [ "$v" = 0x10de ] || continue
  { read -r c < "$d/class"; } 2>/dev/null || continue
  case $c in 0x03*) gpus="$gpus${d##*/}$NL" ;; 0x0680*) nvsw="${nvsw:-}${d##*/}$NL" ;; esac
done
set -f
rec M gpus ok; b64s "$gpus"; echo
rec M nvswitches ok; b64s "${nvsw:-}"; echo  # NVIDIA bridge-class functions: NVSwitches
if [ -n "$gpus" ]; then
  emit_file /proc/driver/nvidia/params  # the driver's module parameters: CoherentGPUMemoryMode on Grace boards
  # CDI specs in the runtimes' default spec folders, and the NVIDIA Container Toolkit's runtime mode. Below a host
  # root each folder is resolved as the node resolves it (/var/run -> /run would otherwise lead to this pod's /run);
  # M cdi-dir:FOLDER says where its listing came from.
  for d in /etc/cdi /var/run/cdi; do
    dr=$d
    if [ -n "$R" ]; then resolve_in_root "$d" || { rec G "$d/*" loop; echo; continue; }; dr=$IR; fi
    rec M "cdi-dir:$d" ok; b64s "$dr"; echo
    emit_glob "$dr/*"
  done
  emit_file /etc/nvidia-container-runtime/config.toml
  m=
  for g in $gpus; do
    for a in numa_node local_cpulist current_link_speed current_link_width max_link_speed max_link_width device; do
      [ -e "$R/sys/bus/pci/devices/$g/$a" ] && m="$m/sys/bus/pci/devices/$g/$a$NL"
    done
  done
  emit_texts "$m"
  rc=127; out=
  if command -v python3 >/dev/null 2>&1; then
    # isolated (-I: no PYTHON* variables, no user site, no working folder on its path) and without site (-S): half the
    # start-up, and nothing of the environment's reaches a program run as root
    out=$(printf '%s' "$GNC_NVML_PROBE" | python3 -I -S -c "$GNC_UNPACK" "$R" 2>/dev/null); rc=$?
  fi
  rec C nvml-probe "$rc"; b64s "$out"; echo
  if [ "$rc" -ne 0 ]; then
    smi=
    # from the checked PATH, else the GPU Operator's driver root or the node's own /usr/bin below the host root,
    # each run only when no user but root could have written it (the file and every folder above it)
    smi=$(command -v nvidia-smi 2>/dev/null)
    case $smi in /*) ;; *) smi= ;; esac
    if [ -z "$smi" ]; then
      for s in /run/nvidia/driver/usr/bin/nvidia-smi /usr/bin/nvidia-smi; do
        [ -x "$R$s" ] && trusted_file "$s" && { smi=$R$s; break; }
      done
    fi
    if [ -n "$smi" ]; then
      emit_cmd nvidia-smi-q "$smi" -q -x
      emit_cmd nvidia-smi-topo "$smi" topo -m
      emit_cmd nvidia-smi-nvlink "$smi" nvlink -s
      emit_cmd nvidia-smi-nvlink-errors "$smi" nvlink -e
    else
      rec C nvidia-smi-q 127; echo
    fi
  fi
fi

# The NVIDIA driver's Xid events of this boot, from the kernel log the node keeps. What was read covers the
# boot only when it holds the boot's first kernel line ("Linux version ..."); sources, in order:
# - the syslog file and, when it began after this boot (logrotate rotates kern.log weekly on Ubuntu), its
#   rotations newest first (NAME.1, NAME.2.gz, ...; dateext NAME-YYYYMMDD) up to the one with the boot line,
#   8 files at most; a file last written before this boot (btime in /proc/stat) holds nothing of it;
# - else this boot's journal (journalctl -k -b 0), else the kernel ring buffer (dmesg).
# The first source that covers the boot is used, else the first one read, marked as not covering it.
# One awk counts, on the node, every Xid number per GPU address (count, first and last line): no Xid
# number is lost to a line limit. Only those counts and the newest 500 Xid lines (512 bytes each) travel.
if [ -n "$gpus" ]; then
  XMAX=16777216
  # No POSIX character class (":space:" in brackets) anywhere in the collector's awk: mawk 1.3.3 (Debian 10, Ubuntu
  # 18.04) has none and matches nothing with one. The blank set is written out instead.
  xid_awk='BEGIN { ws = "[ \t\r\f\v]" }
    function forget(i) { for (i = 1; i <= keys; i++) { delete c[o[i]]; delete first[o[i]]; delete last[o[i]]; delete at[o[i]] } keys = 0; n = 0; dropped = 0 }
    { bytes += length($0) + 1 }
    /kernel: Linux version |[]] Linux version |^Linux version / { forget(); boot = 1; next }
    /NVRM: Xid/ {
      line = substr($0, 1, 512); l[n % 500] = line; n++
      if (!match($0, "NVRM: Xid [(](PCI:)?[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+([.][0-7])?[)]: [0-9]+")) next
      pre = substr($0, 1, RSTART - 1)
      if (pre !~ "(^|" ws ")kernel:" ws "*([[]" ws "*[0-9]+[.][0-9]+[]]" ws "*)?$" &&
          pre !~ "^" ws "*([[]" ws "*[0-9]+[.][0-9]+[]]" ws "*)?$") next
      m = substr($0, RSTART, RLENGTH); sub("^NVRM: Xid [(](PCI:)?", "", m)
      i = index(m, "): "); a = tolower(substr(m, 1, i - 1)); sub("[.][0-7]$", "", a)
      k = a " " (substr(m, i + 3) + 0)
      if (!(k in c)) { if (keys >= 1000) { dropped++; next } o[++keys] = k; first[k] = line }
      c[k]++; last[k] = line; at[k] = n
    }
    END {
      printf "#xid-aggregates %d\n", keys
      for (i = 1; i <= keys; i++) printf "%s %d %d\n%s\n%s\n", o[i], c[o[i]], at[o[i]], first[o[i]], last[o[i]]
      for (i = (n > 500 ? n - 500 : 0); i < n; i++) print l[i % 500]
      printf "#xid total=%d boot-line=%d keys=%d dropped=%d bytes=%d\n", n, boot, keys, dropped, bytes
    }'
  boot_seen='/kernel: Linux version |[]] Linux version |^Linux version / { f = 1; exit } END { exit !f }'
  covers() { case ${1##*"$NL"} in '#xid '*' boot-line=1 '*) return 0 ;; esac; return 1; }
  xcat() { case $1 in *.gz) gzip -dc -- "$1" 2>/dev/null ;; *) cat -- "$1" 2>/dev/null ;; esac; }
  xsrc=; xout=; xtried=
  for f in /var/log/kern.log /var/log/messages; do
    [ -f "$R$f" ] || continue
    if [ ! -r "$R$f" ]; then xsrc="file $f denied"; xtried="$xtried$f: permission denied; "; continue; fi
    cands=$f$NL
    set +f
    for i in 1 2 3 4 5 6 7 8 9; do
      for r in "$R$f.$i" "$R$f.$i.gz"; do [ -f "$r" ] && cands=$cands${r#"$R"}$NL; done
    done
    dated=
    for r in "$R$f"-[0-9]*; do [ -f "$r" ] && dated=${r#"$R"}$NL$dated; done
    set -f
    used=; nused=0; why=
    for c in $cands$dated; do
      mt=$(stat -c %Y "$R$c" 2>/dev/null)
      if [ -n "$btime" ] && [ -n "$mt" ] && [ "$mt" -lt "$btime" ]; then why="$c was last written before this boot"; break; fi
      if [ ! -r "$R$c" ]; then why="$c: permission denied"; break; fi
      case $c in *.gz) command -v gzip >/dev/null 2>&1 || { why="$c: gzip not found"; break; } ;; esac
      if [ "$nused" -ge 8 ]; then why="no boot line in the newest 8 files"; break; fi
      used=$c$NL$used; nused=$((nused + 1))
      xcat "$R$c" | awk "$boot_seen" && break
    done
    if [ -n "$used" ]; then
      xsrc="file $f files=$nused read-last=$XMAX"
      xout=$(for c in $used; do xcat "$R$c"; done | tail -c "$XMAX" | awk "$xid_awk")
      covers "$xout" || xtried="$xtried$f and $((nused - 1)) rotation(s): no boot line${why:+ ($why)}; "
    else
      xtried="$xtried$f: ${why:-not read}; "
    fi
    break
  done
  if ! covers "$xout"; then
    if command -v journalctl >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1; then
      if [ -n "$R" ]; then jd="--directory=$R/var/log/journal"; else jd=--quiet; fi
      jout=$(timeout -s KILL 20 journalctl "$jd" -k -b 0 -o short-iso --no-pager 2>/dev/null | tail -c "$XMAX" | awk "$xid_awk")
      if covers "$jout"; then xsrc="journal -k -b 0 read-last=$XMAX"; xout=$jout
      else
        case $jout in *"$NL#xid total=0 "*) xtried="${xtried}journal: no entries of this boot; " ;;
          *) xtried="${xtried}journal: no boot line (its start was rotated or vacuumed); "
             case $xsrc in ''|*denied) xsrc="journal -k -b 0 read-last=$XMAX"; xout=$jout ;; esac ;;
        esac
      fi
    else
      xtried="${xtried}journalctl or timeout not found; "
    fi
  fi
  if ! covers "$xout"; then
    if command -v dmesg >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1 && dm=$(timeout -s KILL 10 dmesg 2>/dev/null); then
      dout=$(printf '%s\n' "$dm" | tail -c "$XMAX" | awk "$xid_awk")
      if covers "$dout"; then xsrc="kernel ring buffer (dmesg)"; xout=$dout
      else
        xtried="${xtried}dmesg: no boot line (the ring buffer wrapped); "
        case $xsrc in ''|*denied) xsrc="kernel ring buffer (dmesg)"; xout=$dout ;; esac
      fi
    else
      xtried="${xtried}dmesg: not found or not permitted (kernel.dmesg_restrict needs CAP_SYSLOG); "
    fi
  fi
  dm=
  rec M kernel-log ok; b64s "${xsrc:-none}"; echo
  rec M kernel-log-tried ok; b64s "$xtried"; echo
  rec C xid-lines 0; b64s "$xout"; echo
fi

# An RPM database (rpm's %_dbpath: /var/lib/rpm on RHEL 8/9 and Amazon Linux, /usr/lib/sysimage/rpm on
# SUSE and Fedora 36+, /usr/share/rpm under rpm-ostree: RHCOS, Fedora CoreOS): its packages as rpm itself reads
# them, bounded in time. Debian's rpm ships an empty
# /var/lib/rpm, so the folder counts only with a database file of a backend rpm knows (sqlite, bdb, ndb).
emit_rpm() {
  d=$R$1
  if [ -n "$R" ]; then  # every link resolved inside the host root (rpm-ostree: /var/lib/rpm -> /usr/share/rpm)
    resolve_in_root "$1/" || { rec C "rpm:$1" loop; echo; return 0; }
    d=$R$IR
  fi
  if [ -d "$d" ] && [ ! -x "$d" ]; then rec C "rpm:$1" denied; echo; return 0; fi
  if [ ! -f "$d/rpmdb.sqlite" ] && [ ! -f "$d/Packages" ] && [ ! -f "$d/Packages.db" ]; then rec C "rpm:$1" missing; echo; return 0; fi
  if ! command -v rpm >/dev/null 2>&1 || ! command -v timeout >/dev/null 2>&1; then rec C "rpm:$1" 127; echo; return 0; fi
  emit_cmd "rpm:$1" timeout -s KILL 60 rpm --dbpath "$d" -qa --queryformat '%{NAME} %{ARCH} %|EPOCH?{%{EPOCH}}:{-}| %{VERSION} %{RELEASE}\n'
}

in_parent() {  # $1 a path on the node: its folder resolved inside the root, and its own last name (a link
  # itself is examined, not followed)
  if [ -z "$R" ] || [ "$1" = / ]; then printf '%s\n' "$1"; return 0; fi  # without a root the kernel resolves
  _ip=$(in_root "${1%/*}/") || return 1
  printf '%s/%s\n' "${_ip%/}" "${1##*/}"
}
emit_stat() {  # $1 record name, $2 the path on the node to stat (not followed if a link)
  if [ -e "$R$2" ] || [ -L "$R$2" ]; then
    st=$(stat -c '%a %u %g %U %G %F' -- "$R$2" 2>/dev/null)
    if [ -n "$st" ]; then rec S "$1" ok; b64s "$st"; echo; else rec S "$1" denied; echo; fi
  else rec S "$1" missing; echo
  fi
}

# Site rules: files to read, paths to stat, links and globs, from the operator's rule files (untrusted:
# each path is only ever quoted, and stat/readlink get -- before it).
if [ -n "$GNC_SITE" ]; then
  printf '%s' "$GNC_SITE" | base64 -d 2>/dev/null | while IFS= read -r line || [ -n "$line" ]; do
    p=${line#* }
    case $p in /*) ;; *) continue ;; esac
    case $p in *@KREL@*) p="${p%%@KREL@*}$(uname -r)${p#*@KREL@}" ;; esac  # the running kernel's release
    case $line in
      'read '*) emit_file "$p" ;;
      'stat '*) at=$(in_parent "$p") && emit_stat "$p" "$at" || { rec S "$p" loop; echo; } ;;
      'link '*)
        if at=$(in_parent "$p"); then rec L "$p" ok; readlink -- "$R$at" 2>/dev/null | tr -d '\n' | "$B64" "$B64_ARG"; echo
        else rec L "$p" loop; echo
        fi ;;
      'target '*)  # what the path names once its links are followed inside the root: the file a rule judges
        if at=$(in_root "$p"); then
          rec L "target:$p" ok; b64s "$at"; echo
          emit_stat "target:$p" "$at"
        else rec L "target:$p" loop; echo
        fi ;;
      'glob '*) emit_glob "$p" ;;
      'rpm '*) emit_rpm "$p" ;;
    esac
  done
fi

# Block devices.
emit_glob '/sys/block/nvme*/queue/scheduler'
# Each verified daemon's start time once more: a PID that now names another process (a crash-looping kubelet's PID
# handed to a user's process) leaves what was read of it unknown (issue 59)
_rc=
for _p in $verified; do
  _st=; { IFS= read -r _st < "$R/proc/$_p/stat"; } 2>/dev/null
  IFS=' '; set -- ${_st##*) }; IFS=$NL; _rc="$_rc$_p:${20:-gone} "
done
rec M daemon-recheck ok; b64s "$_rc"; echo
rec M end ok; echo
