"""GPU facts through NVML, run on the node by python3 (sent on stdin; nothing is installed there).

The nvidia-ml-py bindings (`pynvml`) travel with this program and are loaded from memory. Output:
one JSON document on stdout. Exit 0 when NVML answered, 3 when it could not be used (no library,
no driver): the collector then falls back to `nvidia-smi`.

Kept compatible with the python3 of older node images (3.6+): no dataclasses, no walrus.
"""

import json
import sys

try:
    import pynvml
except ImportError as e:  # the bindings did not come along: report, let the collector fall back
    print(json.dumps({"probe": 1, "nvml": "bindings unavailable: %s" % e}))
    sys.exit(3)

ROOT = sys.argv[1] if len(sys.argv) > 1 else ""
CPU_WORDS = 64  # 64 x 64 bits: up to 4096 CPUs
NODE_WORDS = 16


def text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def bits(words):
    """CPU or node numbers from NVML's array of 64-bit masks."""
    out = []
    for i, w in enumerate(words):
        w = int(w)
        b = 0
        while w:
            if w & 1:
                out.append(i * 64 + b)
            w >>= 1
            b += 1
    return out


def gpu(index, missing):
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    g = {"index": index}
    errors = {}

    def read(key, fn, convert=None):
        try:
            v = fn()
            g[key] = convert(v) if convert else v
        except pynvml.NVMLError as e:
            code = getattr(e, "value", None)
            if code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                missing.add(key)
                errors[key] = "function not in this driver's NVML"
            elif code == pynvml.NVML_ERROR_NOT_SUPPORTED:
                errors[key] = "not supported on this GPU"
            else:
                errors[key] = text(e)

    read("uuid", lambda: pynvml.nvmlDeviceGetUUID(h), text)
    read("name", lambda: pynvml.nvmlDeviceGetName(h), text)
    read("minor", lambda: pynvml.nvmlDeviceGetMinorNumber(h))
    read("bus_id", lambda: pynvml.nvmlDeviceGetPciInfo(h).busId, text)
    read("pcie_gen", lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h))
    read("pcie_width", lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h))
    read("pcie_max_gen", lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h))
    read("pcie_max_width", lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(h))
    read("pcie_gpu_max_gen", lambda: pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h))
    read("pcie_replay", lambda: pynvml.nvmlDeviceGetPcieReplayCounter(h))
    read("mig", lambda: pynvml.nvmlDeviceGetMigMode(h))
    read("vbios", lambda: pynvml.nvmlDeviceGetVbiosVersion(h), text)
    read("inforom", lambda: pynvml.nvmlDeviceGetInforomImageVersion(h), text)
    read("cpu_affinity", lambda: pynvml.nvmlDeviceGetCpuAffinityWithinScope(h, CPU_WORDS, 0), bits)
    read("mem_affinity", lambda: pynvml.nvmlDeviceGetMemoryAffinity(h, NODE_WORDS, 0), bits)
    read("c2c", lambda: bool(pynvml.nvmlDeviceGetC2cModeInfoV(h).isC2cEnabled))  # R550+; Grace boards
    read(
        "processes",
        lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
        lambda ps: [{"pid": int(p.pid), "used_bytes": p.usedGpuMemory} for p in ps],
    )
    health(h, g, read)
    g["errors"] = errors
    return g


# nvmlMemoryLocation_t names (nvml.h), for the uncorrected-error locations the driver reports
LOCATIONS = ("l1_cache", "l2_cache", "device_memory", "register_file", "texture_memory", "texture_shm", "cbu", "sram")
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")  # nvmlNvLinkErrorCounter_t 0..3


def health(h, g, read):
    """What GPU health checks judge: ECC, row remapping / page retirement, NVLink, fabric, persistence
    mode and clock event reasons. Each value is read on its own: a function an older driver lacks, or one
    a GPU does not support, leaves only that value out (named in errors / missing_functions)."""
    read("ecc_mode", lambda: pynvml.nvmlDeviceGetEccMode(h))
    counters = ((pynvml.NVML_VOLATILE_ECC, "volatile"), (pynvml.NVML_AGGREGATE_ECC, "aggregate"))
    types = ((pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, "corrected"), (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "uncorrected"))
    for counter, cname in counters:
        for etype, ename in types:
            read("ecc_%s_%s" % (cname, ename), lambda c=counter, e=etype: pynvml.nvmlDeviceGetTotalEccErrors(h, e, c))
    if "ecc_volatile_uncorrected" in g:
        where = {}
        for loc, name in enumerate(LOCATIONS):
            for counter, cname in counters:
                try:
                    n = pynvml.nvmlDeviceGetMemoryErrorCounter(h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter, loc)
                except pynvml.NVMLError:
                    continue  # locations this GPU does not report
                where.setdefault(name, {})[cname] = int(n)
        g["ecc_uncorrected_by_location"] = where
    read("remapped_rows", lambda: list(pynvml.nvmlDeviceGetRemappedRows(h)))
    sbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    dbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    read("retired_pages_sbe", lambda: len(pynvml.nvmlDeviceGetRetiredPages(h, sbe)))
    read("retired_pages_dbe", lambda: len(pynvml.nvmlDeviceGetRetiredPages(h, dbe)))
    read("retired_pages_pending", lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h))
    read("nvlinks", lambda: nvlinks(h))
    read("fabric", lambda: fabric(h))
    read("persistence_mode", lambda: pynvml.nvmlDeviceGetPersistenceMode(h))
    read("clock_event_reasons", lambda: clock_reasons(h))
    read("recovery_action", lambda: recovery_action(h))


def recovery_action(h):
    """What the driver says must still be done (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and
    reset...). The field's own return code says when this driver or GPU does not report it."""
    # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml.h): the driver's nvmlDeviceGpuRecoveryAction_t for the GPU
    field = getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)
    (v,) = pynvml.nvmlDeviceGetFieldValues(h, [field])
    if v.nvmlReturn != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(v.nvmlReturn)
    return int(v.value.uiVal)


def nvlinks(h):
    """Every link the GPU has, each read on its own as DCGM reads them: its state, or why the state could not
    be read (NOT_SUPPORTED: the link is not supported; another error: unknown), and each error counter, or
    why it could not be read. nvmlDeviceGetNvLinkState answers INVALID_ARGUMENT past the last link. A GPU
    whose every link answers NOT_SUPPORTED has no NVLink (an empty list)."""
    links = []
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = pynvml.nvmlDeviceGetNvLinkState(h, link)
        except pynvml.NVMLError as e:
            code = getattr(e, "value", None)
            if code == pynvml.NVML_ERROR_INVALID_ARGUMENT:
                break
            if code != pynvml.NVML_ERROR_NOT_SUPPORTED:
                links.append({"link": link, "state_error": text(e)})
            continue
        counters, unread = {}, {}
        for i, name in enumerate(NVLINK_COUNTERS):
            try:
                counters[name] = int(pynvml.nvmlDeviceGetNvLinkErrorCounter(h, link, i))
            except pynvml.NVMLError as e:
                not_supported = getattr(e, "value", None) == pynvml.NVML_ERROR_NOT_SUPPORTED
                unread[name] = "not supported on this GPU" if not_supported else text(e)
        links.append({"link": link, "active": bool(active), "errors": counters, "unread": unread})
    return links


def fabric(h):
    """The GPU's registration with the NVLink fabric: nvmlDeviceGetGpuFabricInfoV (v3: with the health mask of
    GB200 NVL72 fabrics) where the driver and these bindings have it, else the v1 call (R525+, deprecated from
    CUDA 13; a CUDA 14 driver answers NVML_ERROR_DEPRECATED: "use the newer call", never unknown health)."""
    v3 = getattr(pynvml, "c_nvmlGpuFabricInfo_v3_t", None)
    if v3 is not None and hasattr(pynvml, "nvmlDeviceGetGpuFabricInfoV"):
        info = v3()
        try:
            pynvml.nvmlDeviceGetGpuFabricInfoV(h, pynvml.byref(info))
            out = _fabric(info)
            out["health_mask"] = int(info.healthMask)
            return out
        except pynvml.NVMLError as e:
            if getattr(e, "value", None) not in (
                pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                getattr(pynvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),
            ):
                raise
    info = pynvml.c_nvmlGpuFabricInfo_t()
    pynvml.nvmlDeviceGetGpuFabricInfo(h, pynvml.byref(info))
    return _fabric(info)


def _fabric(info):
    return {
        "state": int(info.state),
        "status": int(info.status),
        "clique": int(info.cliqueId),
        "cluster": "".join("%02x" % b for b in bytes(info.clusterUuid)),
    }


def clock_reasons(h):
    """The clock event reasons bitmask (R535 renamed "throttle" reasons to "event" reasons; older drivers
    have only the old name, with the same bits)."""
    try:
        return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
    except pynvml.NVMLError as e:
        if getattr(e, "value", None) != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise
    return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))


def main():
    doc = {"probe": 1}
    try:
        path, lib = find_library("libnvidia-ml.so.1", ROOT)  # noqa: F821 - from driver_library.py
    except RuntimeError as e:  # no library: the bindings are never compiled
        doc["nvml"] = text(e)
        print(json.dumps(doc))
        return 3
    try:
        pynvml.nvmlLib = lib
        doc["library"] = path
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        doc["nvml"] = text(e)
        print(json.dumps(doc))
        return 3
    doc["nvml"] = "ok"
    missing = set()
    try:
        try:
            doc["driver"] = text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError as e:
            doc["driver"] = None
            doc["driver_error"] = text(e)
        try:
            v = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12040: CUDA 12.4 (major * 1000 + minor * 10)
            doc["cuda_driver"] = "%d.%d" % (v // 1000, (v % 1000) // 10)
        except pynvml.NVMLError as e:
            doc["cuda_driver"] = None
            doc["cuda_driver_error"] = text(e)
        doc["gpus"] = [gpu(i, missing) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as e:
        doc["nvml"] = "NVML failed while listing GPUs: %s" % text(e)
        print(json.dumps(doc))
        return 3
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            doc["shutdown_error"] = True
    doc["missing_functions"] = sorted(missing)
    print(json.dumps(doc))
    return 0


sys.exit(main())
