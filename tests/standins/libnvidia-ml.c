/* Stand-in for libnvidia-ml.so.1: the NVML entry points the suite's probe calls through nvidia-ml-py,
 * with NVML's return codes and struct layouts (nvml.h), answering from config.h's GPU description.
 * Built with -DOLD_DRIVER it lacks nvmlDeviceGetGpuMaxPcieLinkGeneration, as drivers before R510 do. */
#include "config.h"
#include <unistd.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
       NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_UNKNOWN = 999 };

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
