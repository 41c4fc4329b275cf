"""Builds the Python programs sent to nodes: a probe with the nvidia-ml-py bindings embedded, so the
node needs only python3 and the NVIDIA driver. Nothing is written on the node."""

from __future__ import annotations

import base64
import functools
import zlib
from importlib import resources
from pathlib import Path

import pynvml

# The bindings are compiled when the probe first uses them, not when it starts: a GPU node whose driver library is
# not there (not loaded, a driver container not mounted) costs the probe its library search only, not the compile of
# 200 KB of bindings (a quarter of the collector's CPU on such a node, issue 60). Setting a name (nvmlLib) compiles
# them first, so that their own `nvmlLib = None` cannot undo it.
BOOT = (
    "import base64, sys, types, zlib\n"
    "class _GncBindings(types.ModuleType):\n"
    "    def _gnc_load(self):\n"
    "        if not self.__dict__.get('_gnc_loaded'):\n"
    "            self.__dict__['_gnc_loaded'] = True\n"
    "            exec(compile(zlib.decompress(base64.b64decode({blob!r})), 'pynvml.py', 'exec'), self.__dict__)\n"
    "    def __getattr__(self, name):\n"
    "        if self.__dict__.get('_gnc_loaded'):\n"
    "            raise AttributeError(name)\n"
    "        self._gnc_load()\n"
    "        return getattr(self, name)\n"
    "    def __setattr__(self, name, value):\n"
    "        self._gnc_load()\n"
    "        types.ModuleType.__setattr__(self, name, value)\n"
    "sys.modules['pynvml'] = _GncBindings('pynvml')\n"
)


@functools.cache
def _bindings_blob() -> str:
    source = Path(pynvml.__file__).read_bytes()
    return base64.b64encode(zlib.compress(source, 9)).decode("ascii")


@functools.cache
def program(name: str) -> bytes:
    """The probe `name` (a module of conformance.collection.probes) as one self-contained Python program: the
    bindings, the shared driver-library lookup, then the probe."""
    folder = resources.files("conformance.collection.probes")
    shared = folder.joinpath("driver_library.py").read_text(encoding="utf-8")
    source = folder.joinpath(f"{name}.py").read_text(encoding="utf-8")
    return (BOOT.format(blob=_bindings_blob()) + shared + "\n" + source).encode("utf-8")


@functools.cache
def packed(name: str) -> str:
    """The program compressed and base64-encoded: a value a shell script can carry in a variable."""
    return base64.b64encode(zlib.compress(program(name), 9)).decode("ascii")


# How the collector runs a packed program: stdin carries it, python3 unpacks it in memory.
UNPACK = "import base64,sys,zlib;exec(compile(zlib.decompress(base64.b64decode(sys.stdin.read())),'gnc-probe','exec'))"
