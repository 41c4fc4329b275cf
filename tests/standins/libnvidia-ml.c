/* Stand-in for libnvidia-ml.so.1: the NVML entry points the suite's probe calls through nvidia-ml-py,
 * with NVML's return codes and struct layouts (nvml.h), answering from config.h's GPU description.
 * Built with -DOLD_DRIVER it lacks nvmlDeviceGetGpuMaxPcieLinkGeneration (drivers before R510), and
 * nvmlDeviceGetCurrentClocksEventReasons and nvmlDeviceGetGpuFabricInfo (both newer than R510; such a
 * driver answers nvmlDeviceGetCurrentClocksThrottleReasons, the older name of the same bitmask). */
#include "config.h"
#include <unistd.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
       NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_UNKNOWN = 999 };

typedef struct { int index; } *nvmlDevice_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;

static int initialised;
static struct { int index; } HANDLES[MAXGPU];

#define INJECT(name) do { int c_ = cfg_injected(name); if (c_) return c_; } while (0)
#define DEVICE(h, out) \
    if (!initialised) return NVML_ERROR_UNINITIALIZED; \
    if (!(h) || !(out) || (h)->index < 0 || (h)->index >= CFG.ngpu) return NVML_ERROR_INVALID_ARGUMENT; \
    struct fake_gpu *g = &CFG.gpu[(h)->index]

int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    cfg_load();
    INJECT("nvmlInitWithFlags");
    if (CFG.ngpu == 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    initialised++;
    return NVML_SUCCESS;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    initialised--;
    return NVML_SUCCESS;
}
const char *nvmlErrorString(int r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}
int nvmlSystemGetDriverVersion(char *out, unsigned len) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!out || strlen(CFG.driver) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, CFG.driver);
    return NVML_SUCCESS;
}
int nvmlDeviceGetCount_v2(unsigned *n) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    *n = CFG.ngpu;
    return NVML_SUCCESS;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *out) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!out || i >= (unsigned)CFG.ngpu) return NVML_ERROR_INVALID_ARGUMENT;
    HANDLES[i].index = i;
    *out = (nvmlDevice_t)&HANDLES[i];
    return NVML_SUCCESS;
}
int nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *out) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !out) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < CFG.ngpu; i++)
        if (!strcmp(CFG.gpu[i].uuid, uuid)) {
            HANDLES[i].index = i;
            *out = (nvmlDevice_t)&HANDLES[i];
            return NVML_SUCCESS;
        }
    return 6; /* NVML_ERROR_NOT_FOUND */
}
static int copy_str(const char *s, char *out, unsigned len) {
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, s);
    return NVML_SUCCESS;
}
int nvmlDeviceGetUUID(nvmlDevice_t h, char *out, unsigned len) { DEVICE(h, out); INJECT("nvmlDeviceGetUUID"); return copy_str(g->uuid, out, len); }
int nvmlDeviceGetName(nvmlDevice_t h, char *out, unsigned len) { DEVICE(h, out); return copy_str(g->name, out, len); }
/* the versions an H100 SXM with driver 550 reports (nvidia-smi -q: VBIOS Version, Inforom Image Version) */
int nvmlDeviceGetVbiosVersion(nvmlDevice_t h, char *out, unsigned len) { DEVICE(h, out); (void)g; return copy_str("96.00.99.00.01", out, len); }
int nvmlDeviceGetInforomImageVersion(nvmlDevice_t h, char *out, unsigned len) { DEVICE(h, out); (void)g; return copy_str("G520.0200.00.05", out, len); }
int nvmlSystemGetCudaDriverVersion(int *out) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = 12040; /* CUDA 12.4, what driver 550 reports */
    return NVML_SUCCESS;
}
int nvmlSystemGetCudaDriverVersion_v2(int *out) { return nvmlSystemGetCudaDriverVersion(out); }
int nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned *out) { DEVICE(h, out); *out = g->minor; return NVML_SUCCESS; }
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *out) {
    DEVICE(h, out);
    memset(out, 0, sizeof *out);
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    sscanf(g->bus, "%x:%x:%x.%x", &dom, &bus, &dev, &fn);
    out->domain = dom; out->bus = bus; out->device = dev; out->pciDeviceId = 0x233010de;
    snprintf(out->busId, sizeof out->busId, "%s", g->bus);
    snprintf(out->busIdLegacy, sizeof out->busIdLegacy, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return NVML_SUCCESS;
}
int nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t h, unsigned *out) { DEVICE(h, out); *out = g->gen; return NVML_SUCCESS; }
int nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t h, unsigned *out) { DEVICE(h, out); *out = g->width; return NVML_SUCCESS; }
int nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t h, unsigned *out) { DEVICE(h, out); *out = g->maxgen; return NVML_SUCCESS; }
int nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t h, unsigned *out) { DEVICE(h, out); *out = g->maxwidth; return NVML_SUCCESS; }
#ifndef OLD_DRIVER
int nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t h, unsigned *out) { DEVICE(h, out); *out = g->gpumaxgen; return NVML_SUCCESS; }
#endif
int nvmlDeviceGetPcieReplayCounter(nvmlDevice_t h, unsigned *out) {
    DEVICE(h, out);
    *out = g->replay;
    g->replay += g->replay_step; /* a link that keeps retrying: the counter grows between reads */
    return NVML_SUCCESS;
}
int nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned *cur, unsigned *pending) {
    DEVICE(h, cur);
    if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
    *cur = *pending = g->mig;
    return NVML_SUCCESS;
}
static int masks(unsigned long long m, unsigned words, unsigned long long *out, int scope) {
    if (!words || !out || scope < 0 || scope > 1) return NVML_ERROR_INVALID_ARGUMENT;
    memset(out, 0, words * sizeof *out);
    out[0] = m;
    return NVML_SUCCESS;
}
int nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t h, unsigned words, unsigned long long *out, int scope) {
    DEVICE(h, out);
    return masks(g->cpumask, words, out, scope);
}
int nvmlDeviceGetMemoryAffinity(nvmlDevice_t h, unsigned words, unsigned long long *out, int scope) {
    DEVICE(h, out);
    return masks(g->nodemask, words, out, scope);
}
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *count, nvmlProcessInfo_t *infos) {
    DEVICE(h, count);
    /* procs_if: the processes appear once the test creates that file (between collection and measurement) */
    unsigned n = (g->procs_if[0] && access(g->procs_if, F_OK) != 0) ? 0 : g->nprocs;
    if (*count < n || (!infos && n)) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned i = 0; i < n; i++) {
        infos[i].pid = g->procs[i];
        infos[i].usedGpuMemory = 1ULL << 30;
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    *count = n;
    return NVML_SUCCESS;
}
int nvmlDeviceGetComputeMode(nvmlDevice_t h, int *mode) { DEVICE(h, mode); *mode = (int)g->computemode; return NVML_SUCCESS; }
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
int nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    DEVICE(h, m);
    m->total = 81920ULL << 20;
    m->free = g->memfree_mib << 20;
    m->used = m->total > m->free ? m->total - m->free : 0;
    return NVML_SUCCESS;
}

/* Health: ECC, row remapping and page retirement, NVLink, fabric, persistence, clock event reasons. */
int nvmlDeviceGetEccMode(nvmlDevice_t h, int *cur, int *pending) {
    DEVICE(h, cur);
    if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->ecc < 0) return NVML_ERROR_NOT_SUPPORTED;
    *cur = g->ecc;
    *pending = g->ecc_pending;
    return NVML_SUCCESS;
}
/* errorType 0 corrected, 1 uncorrected; counterType 0 volatile, 1 aggregate */
int nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, unsigned type, unsigned counter, unsigned long long *out) {
    DEVICE(h, out);
    if (type > 1 || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->ecc != 1) return NVML_ERROR_NOT_SUPPORTED;  /* the counters exist only while ECC is on */
    *out = (counter ? g->ecc_agg : g->ecc_vol)[type] + (counter && type ? g->ecc_sram_unc : 0);
    return NVML_SUCCESS;
}
/* locations as a Hopper reports them: device memory (2) and SRAM (7); the others are not supported */
int nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t h, unsigned type, unsigned counter, unsigned loc, unsigned long long *out) {
    DEVICE(h, out);
    if (type > 1 || counter > 1 || loc > 7) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->ecc != 1 || (loc != 2 && loc != 7)) return NVML_ERROR_NOT_SUPPORTED;
    if (loc == 2) *out = (counter ? g->ecc_agg : g->ecc_vol)[type];
    else *out = counter && type ? g->ecc_sram_unc : 0;
    return NVML_SUCCESS;
}
int nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned *corr, unsigned *unc, unsigned *pending, unsigned *failure) {
    DEVICE(h, corr);
    if (!unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->remap_na) return NVML_ERROR_NOT_SUPPORTED;
    *corr = g->remap[0]; *unc = g->remap[1]; *pending = g->remap[2]; *failure = g->remap[3];
    return NVML_SUCCESS;
}
int nvmlDeviceGetRetiredPages(nvmlDevice_t h, unsigned cause, unsigned *count, unsigned long long *addresses) {
    DEVICE(h, count);
    if (cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->retired_na) return NVML_ERROR_NOT_SUPPORTED;
    unsigned n = g->retired[cause];
    if (!addresses || *count < n) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned i = 0; i < n; i++) addresses[i] = 0x1000ULL * (i + 1);
    *count = n;
    return NVML_SUCCESS;
}
int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t h, int *pending) {
    DEVICE(h, pending);
    if (g->retired_na) return NVML_ERROR_NOT_SUPPORTED;
    *pending = g->retired[2] ? 1 : 0;
    return NVML_SUCCESS;
}
int nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned link, unsigned *active) {
    DEVICE(h, active);
    if (!g->nvlinks) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nvlinks) return NVML_ERROR_INVALID_ARGUMENT;  /* as the driver answers for a link the GPU lacks */
    if ((g->nvlink_na >> link) & 1) return NVML_ERROR_NOT_SUPPORTED;
    *active = (g->nvlink_down >> link) & 1 ? 0 : 1;
    return NVML_SUCCESS;
}
int nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t h, unsigned link, unsigned counter, unsigned long long *out) {
    DEVICE(h, out);
    if (!g->nvlinks) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nvlinks || counter > 4) return NVML_ERROR_INVALID_ARGUMENT;
    if (counter == 4 || (g->nvlink_na >> link) & 1) return NVML_ERROR_NOT_SUPPORTED;  /* 4, ECC_DATA: some generations */
    if ((g->nvlink_cnt_fail >> link) & 1) return NVML_ERROR_UNKNOWN;
    *out = g->nvlink_err[link][counter];
    return NVML_SUCCESS;
}
#ifndef OLD_DRIVER
typedef struct { unsigned char clusterUuid[16]; int status; unsigned cliqueId; unsigned char state; } nvmlGpuFabricInfo_t;
int nvmlDeviceGetGpuFabricInfo(nvmlDevice_t h, nvmlGpuFabricInfo_t *info) {
    DEVICE(h, info);
    memset(info, 0, sizeof *info);
    info->state = (unsigned char)g->fabric_state;
    info->status = (int)g->fabric_status;
    info->cliqueId = g->fabric_state == 3 ? 7 : 0;
    if (g->fabric_state == 3) memset(info->clusterUuid, 0xab, sizeof info->clusterUuid);
    return NVML_SUCCESS;
}
int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *out) { DEVICE(h, out); *out = g->clocks; return NVML_SUCCESS; }
/* nvmlGpuFabricInfo_v3_t (nvml.h, R550+): the versioned call, with the health mask of GB200 NVL72 fabrics */
typedef struct {
    unsigned version; unsigned char clusterUuid[16]; int status; unsigned cliqueId; unsigned char state;
    unsigned healthMask; unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
int nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t h, nvmlGpuFabricInfo_v3_t *info) {
    DEVICE(h, info);
    if (info->version != 0x3000028u) return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    memset(info->clusterUuid, 0, sizeof info->clusterUuid);
    info->state = (unsigned char)g->fabric_state;
    info->status = (int)g->fabric_status;
    info->cliqueId = g->fabric_state == 3 ? 7 : 0;
    if (g->fabric_state == 3) memset(info->clusterUuid, 0xab, sizeof info->clusterUuid);
    info->healthMask = g->fabric_health;
    info->healthSummary = 0;
    return NVML_SUCCESS;
}
#endif
/* nvmlC2cModeInfo_v1_t (nvml.h, R550+): NVLink-C2C between a Grace CPU and its GPU */
typedef struct { unsigned isC2cEnabled; } nvmlC2cModeInfo_v1_t;
int nvmlDeviceGetC2cModeInfoV(nvmlDevice_t h, nvmlC2cModeInfo_v1_t *info) {
    DEVICE(h, info);
    if (g->c2c == 0) return NVML_ERROR_NOT_SUPPORTED;
    info->isC2cEnabled = g->c2c == 1;
    return NVML_SUCCESS;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *out) { DEVICE(h, out); *out = g->clocks; return NVML_SUCCESS; }
/* nvmlFieldValue_t (nvml.h): each field has its own return code; the value is a union of 8 bytes. Only
 * NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230) is known here; any other field answers NOT_SUPPORTED. */
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned valueType, nvmlReturn;
    union { double d; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; int si; } value;
} nvmlFieldValue_t;
int nvmlDeviceGetFieldValues(nvmlDevice_t h, int count, nvmlFieldValue_t *values) {
    DEVICE(h, values);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        if (v->fieldId == 230 && g->recovery >= 0) {
            v->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            v->value.ui = (unsigned)g->recovery;
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
int nvmlDeviceGetPersistenceMode(nvmlDevice_t h, int *mode) { DEVICE(h, mode); *mode = (int)g->persistence; return NVML_SUCCESS; }
