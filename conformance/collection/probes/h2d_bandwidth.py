"""Host-to-device copy bandwidth per GPU and per NUMA node, run on the node by python3.

Uses only the NVIDIA driver: the CUDA driver API through ctypes on libcuda.so.1 (no toolkit, no
PyTorch), and NVML (nvidia-ml-py travels with this program) for the PCIe link state and replay counter
before and after. One GPU at a time; for each NUMA node that has CPUs: bind this process to the node
(CPU affinity and MPOL_BIND memory policy), allocate pinned host memory, check on which node its pages
landed (move_pages), warm up, then time batches of async copies with CUDA events and keep the median
of the samples, in decimal GB/s. Everything allocated is freed, also after a failure.

argv[1] is a JSON document: {"gpus": [uuid...] or null, "numa": {"0": [cpus]}, "bytes": N, "copies": 10,
"samples": 5, "warmup": 3, "warmup_s": 0.5, "budget_s": 10, "grace_s": 20}. Prints JSON lines as it goes:
a header ({"probe": 2, ...}), one {"gpu": {...}} per GPU as soon as it is measured, and {"end": "done"}.
It ends by itself after budget_s per GPU plus grace_s ({"end": "timeout"}, exit 124). Exit 0, or 3 when
CUDA could not be used at all. Kept compatible with python3.6+.
"""

import ctypes
import json
import os
import platform
import sys
import threading
import time

SPEC = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
ROOT = SPEC.get("root", "")
SYSCALLS = {"x86_64": {"set_mempolicy": 238, "move_pages": 279}, "aarch64": {"set_mempolicy": 237, "move_pages": 239}}
MPOL_DEFAULT, MPOL_BIND = 0, 2


class CudaError(Exception):
    def __init__(self, call, code, name):
        Exception.__init__(self, "%s failed: %s (%d)" % (call, name, code))
        self.call = call
        self.code = code


class Cuda:
    """The few driver API calls this probe needs, each checked."""

    def __init__(self, lib):
        self.lib = lib

    def name(self, code):
        s = ctypes.c_char_p()
        try:
            if self.lib.cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value:
                return s.value.decode()
        except AttributeError:
            pass
        return "CUDA error"

    def __call__(self, fn, *args):
        code = getattr(self.lib, fn)(*args)
        if code != 0:
            raise CudaError(fn, code, self.name(code))


def uuid_text(raw):
    h = "".join("%02x" % b for b in bytearray(raw))
    return "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


class Numa:
    """CPU affinity and memory policy of this process, and where pages are."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.nr = SYSCALLS.get(platform.machine(), {})

    def bind(self, node, cpus):
        got = {"node": node}
        try:
            os.sched_setaffinity(0, cpus)
            got["cpus"] = sorted(os.sched_getaffinity(0))
        except OSError as e:
            got["cpus"] = sorted(os.sched_getaffinity(0))
            got["cpu_error"] = "sched_setaffinity(%s): %s" % (cpus, e.strerror)
        if "set_mempolicy" not in self.nr:
            got["mem_policy"] = "not set: unknown syscall numbers for %s" % platform.machine()
            return got
        mask = ctypes.c_ulong(1 << node) if node < 64 else None
        if mask is None:
            got["mem_policy"] = "not set: node number above 63"
            return got
        rc = self.libc.syscall(self.nr["set_mempolicy"], MPOL_BIND, ctypes.byref(mask), 65)
        if rc != 0:
            err = ctypes.get_errno()
            got["mem_policy"] = "not set: set_mempolicy(MPOL_BIND, node %d): %s" % (node, os.strerror(err))
        else:
            got["mem_policy"] = "bind"
        return got

    def unbind(self, all_cpus):
        if "set_mempolicy" in self.nr:
            self.libc.syscall(self.nr["set_mempolicy"], MPOL_DEFAULT, None, 0)
        try:
            os.sched_setaffinity(0, all_cpus)
        except OSError:
            pass

    def pages_on(self, addr, size, samples=64):
        """Histogram {node: pages} of a sample of the buffer's pages (move_pages with no target nodes)."""
        if "move_pages" not in self.nr:
            return None
        page = os.sysconf("SC_PAGE_SIZE")
        count = max(1, min(samples, size // page))
        step = max(page, (size // count) // page * page)
        pages = (ctypes.c_void_p * count)(*[addr + i * step for i in range(count)])
        status = (ctypes.c_int * count)()
        rc = self.libc.syscall(self.nr["move_pages"], 0, ctypes.c_ulong(count), pages, None, status, 0)
        if rc != 0:
            return {"error": "move_pages failed: %s" % os.strerror(ctypes.get_errno() or 0)}
        out = {}
        for s in status:
            key = str(s) if s >= 0 else "absent"
            out[key] = out.get(key, 0) + 1
        return out


class Nvml:
    """NVML for this probe: link state and replay counter, and whether a GPU is idle right now."""

    def __init__(self, pynvml):
        self.nv = pynvml

    @staticmethod
    def load():
        """An Nvml, or None when NVML cannot be used here."""
        try:
            import pynvml

            _, pynvml.nvmlLib = find_library("libnvidia-ml.so.1", ROOT)  # noqa: F821 - from driver_library.py
            pynvml.nvmlInit()
        except Exception:
            return None
        return Nvml(pynvml)

    def read(self, uuid, link_only=False):
        """{replay, gen, width} of the GPU (link_only: gen and width), errors per field."""
        nv, out = self.nv, {}
        try:
            h = nv.nvmlDeviceGetHandleByUUID(uuid)
        except nv.NVMLError as e:
            return {"error": str(e)}
        fields = (
            ("replay", nv.nvmlDeviceGetPcieReplayCounter),
            ("gen", nv.nvmlDeviceGetCurrPcieLinkGeneration),
            ("width", nv.nvmlDeviceGetCurrPcieLinkWidth),
        )
        for key, fn in fields[1:] if link_only else fields:
            try:
                out[key] = fn(h)
            except nv.NVMLError as e:
                out[key + "_error"] = str(e)
        return out

    def idle(self, uuid, need_bytes):
        """None when the GPU may be measured now, else why not: asked right before its context is made,
        since the facts collected earlier may be minutes old. Any NVML error counts as busy."""
        nv = self.nv
        try:
            h = nv.nvmlDeviceGetHandleByUUID(uuid)
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            if procs:
                pids = ", ".join(str(p.pid) for p in procs[:5])
                return "busy: %d compute process(es) running now (pids %s)" % (len(procs), pids)
            mode = nv.nvmlDeviceGetComputeMode(h)
            if mode != nv.NVML_COMPUTEMODE_DEFAULT:
                names = {nv.NVML_COMPUTEMODE_PROHIBITED: "Prohibited", nv.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: "Exclusive-Process"}
                return "not measured: compute mode %s (only Default is measured)" % names.get(mode, mode)
            free = nv.nvmlDeviceGetMemoryInfo(h).free
            if free < need_bytes:
                return "not measured: %d MiB of device memory free, %d MiB needed" % (free >> 20, need_bytes >> 20)
        except nv.NVMLError as e:
            return "treated as busy: NVML could not tell whether it is idle (%s)" % e
        return None


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


CU_CTX_SCHED_BLOCKING_SYNC = 0x04
OUT_LOCK = threading.Lock()


def emit(obj):
    """One JSON line, flushed at once: what was measured survives a later hang or a cut connection."""
    with OUT_LOCK:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def start_watchdog(seconds, started):
    """End this process by itself after `seconds`, whatever call it is stuck in (a GPU that fell off the
    bus never returns from a synchronise): killing the SSH client would not stop it."""

    def fire():
        emit({"end": "timeout", "after_s": round(time.monotonic() - started, 3), "bound_s": seconds})
        os._exit(124)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def release_all(cu, handles):
    """Free in reverse order of creation; each failure is recorded, the rest still freed."""
    errors = []
    for fn, handle in reversed(handles):
        try:
            cu(fn, handle)
        except CudaError as e:
            errors.append(str(e))
    return errors


def measure(cu, numa, node, cpus, deadline, dptr, busy_reader=None):
    """One (GPU, NUMA node) figure in the GPU's current context, into its device buffer `dptr`. Frees
    what it allocated, whatever happens. `busy_reader`, when given, reads the link while the first
    sample's copies are still in flight: idle links downshift."""
    size = int(SPEC.get("bytes", 256 << 20))
    copies = int(SPEC.get("copies", 10))
    samples = int(SPEC.get("samples", 5))
    warmup = max(1, int(SPEC.get("warmup", 3)))
    warmup_s = float(SPEC.get("warmup_s", 0.5))
    row = {"node": node, "bytes": size, "copies": copies}
    row["binding"] = numa.bind(node, cpus)
    host, stream, ev0, ev1 = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    handles = []
    try:
        cu("cuMemHostAlloc", ctypes.byref(host), ctypes.c_size_t(size), 0)
        handles.append(("cuMemFreeHost", host))
        ctypes.memset(host, 0x5A, size)
        row["pages_on"] = numa.pages_on(host.value, size)
        cu("cuStreamCreate", ctypes.byref(stream), 1)
        handles.append(("cuStreamDestroy_v2", stream))
        cu("cuEventCreate", ctypes.byref(ev0), 0)
        handles.append(("cuEventDestroy_v2", ev0))
        cu("cuEventCreate", ctypes.byref(ev1), 0)
        handles.append(("cuEventDestroy_v2", ev1))
        # Warm up for a time, not a count: a GPU coming out of idle raises its clocks and link speed first.
        t0, rounds = time.monotonic(), 0
        while rounds == 0 or (time.monotonic() - t0 < warmup_s and time.monotonic() < deadline):
            for _ in range(warmup):
                cu("cuMemcpyHtoDAsync_v2", dptr, host, ctypes.c_size_t(size), stream)
            cu("cuStreamSynchronize", stream)
            rounds += 1
        row["warmup_s"] = round(time.monotonic() - t0, 3)
        figures = []
        for _ in range(samples):
            cu("cuEventRecord", ev0, stream)
            for _ in range(copies):
                cu("cuMemcpyHtoDAsync_v2", dptr, host, ctypes.c_size_t(size), stream)
            cu("cuEventRecord", ev1, stream)
            if busy_reader is not None and "nvml_busy" not in row:
                row["nvml_busy"] = busy_reader()  # copies queued and running: the link is busy now
            cu("cuEventSynchronize", ev1)
            ms = ctypes.c_float()
            cu("cuEventElapsedTime", ctypes.byref(ms), ev0, ev1)
            if ms.value > 0:
                figures.append(size * copies / (ms.value / 1000.0) / 1e9)
            if time.monotonic() > deadline:
                row["note"] = "time budget reached after %d sample(s)" % len(figures)
                break
        row["samples_gbps"] = [round(x, 3) for x in figures]
        row["gbps"] = round(median(figures), 3) if figures else None
    except CudaError as e:
        row["error"] = str(e)
        row["failed_call"] = e.call
    finally:
        cleanup = release_all(cu, handles)
    if cleanup:
        row["cleanup_errors"] = cleanup
    return row


def measure_gpu(cu, dev, g, numa, nodes, all_cpus, nvml, budget):
    """Every NUMA node's figure for one GPU, in one primary context held for all of them."""
    t0 = time.monotonic()
    if nvml:
        g["nvml_before"] = nvml.read(g["uuid"])
    g["results"] = []
    ctx, dptr = ctypes.c_void_p(), ctypes.c_uint64()
    size = int(SPEC.get("bytes", 256 << 20))
    handles = []
    try:
        # Block instead of spin while waiting for copies (CU_CTX_SCHED_BLOCKING_SYNC, cuda.h; CUDA driver API
        # "Primary Context Management"): a spinning host thread would burn a CPU next to other work.
        cu("cuDevicePrimaryCtxSetFlags_v2", dev, CU_CTX_SCHED_BLOCKING_SYNC)
        cu("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        handles.append(("cuDevicePrimaryCtxRelease_v2", dev))
        cu("cuCtxSetCurrent", ctx)
        cu("cuMemAlloc_v2", ctypes.byref(dptr), ctypes.c_size_t(size))
        handles.append(("cuMemFree_v2", dptr))
        busy = (lambda u=g["uuid"]: nvml.read(u, True)) if nvml else None
        for node, cpus in nodes:
            g["results"].append(measure(cu, numa, node, cpus, t0 + budget, dptr, busy))
            numa.unbind(all_cpus)
            if g["results"][-1].get("nvml_busy"):
                g["nvml_busy"] = g["results"][-1].pop("nvml_busy")
            if time.monotonic() > t0 + budget:
                g["note"] = "time budget of %g s reached" % budget
                break
    except CudaError as e:  # the GPU's context or device buffer: no node could be measured
        g["results"] = [{"node": node, "error": str(e), "failed_call": e.call} for node, _ in nodes]
    finally:
        cleanup = release_all(cu, handles)
    if cleanup and g["results"]:
        g["results"][-1].setdefault("cleanup_errors", []).extend(cleanup)
    if nvml:
        g["nvml_after"] = nvml.read(g["uuid"])
    g["duration_s"] = round(time.monotonic() - t0, 3)


def main():
    started = time.monotonic()
    head = {"probe": 2}
    # The CUDA driver reads these when it initialises (CUDA Programming Guide, "CUDA Environment
    # Variables"): an inherited CUDA_VISIBLE_DEVICES would hide GPUs from the probe, and
    # CUDA_DEVICE_ORDER=PCI_BUS_ID numbers devices as NVML and nvidia-smi do (the default is fastest first).
    masked = os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    if masked is not None:
        head["ignored_device_mask"] = masked
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    wanted = SPEC.get("gpus")
    budget = float(SPEC.get("budget_s", 10))
    start_watchdog(budget * max(1, len(wanted or [1])) + float(SPEC.get("grace_s", 20)), started)
    try:
        head["library"], lib = find_library("libcuda.so.1", ROOT)  # noqa: F821 - from driver_library.py
        cu = Cuda(lib)
        cu("cuInit", 0)
        n = ctypes.c_int()
        cu("cuDeviceGetCount", ctypes.byref(n))
    except (RuntimeError, CudaError) as e:
        head["error"] = str(e)
        emit(head)
        emit({"end": "done", "duration_s": round(time.monotonic() - started, 3)})
        return 3
    emit(head)
    numa = Numa()
    all_cpus = os.sched_getaffinity(0)
    nodes = sorted((int(k), sorted(v)) for k, v in SPEC.get("numa", {}).items() if v)
    if not nodes:
        nodes = [(0, sorted(all_cpus))]
    nvml = Nvml.load()
    for ordinal in range(n.value):
        g = {"ordinal": ordinal}
        try:
            dev = ctypes.c_int()
            cu("cuDeviceGet", ctypes.byref(dev), ordinal)
            raw = (ctypes.c_ubyte * 16)()
            cu("cuDeviceGetUuid", raw, dev)
            g["uuid"] = uuid_text(raw)
            bus = ctypes.create_string_buffer(32)
            cu("cuDeviceGetPCIBusId", bus, 32, dev)
            g["bus_id"] = bus.value.decode()
        except CudaError as e:
            g["error"] = str(e)
            g["failed_call"] = e.call
            emit({"gpu": g})
            continue
        if wanted is not None and g["uuid"] not in wanted:
            continue
        # the busy gate, right before a context is made: without NVML nothing says the GPU is idle
        need = int(SPEC.get("bytes", 256 << 20)) + (64 << 20)
        why = nvml.idle(g["uuid"], need) if nvml else "treated as busy: NVML cannot be used here to check it is idle"
        if why:
            g["skipped"] = why
        else:
            measure_gpu(cu, dev.value, g, numa, nodes, all_cpus, nvml, budget)
        emit({"gpu": g})
    emit({"end": "done", "duration_s": round(time.monotonic() - started, 3)})
    return 0


sys.exit(main())
