/* Stand-in for libcuda.so.1: exactly the CUDA driver API entry points the H2D bandwidth probe uses,
 * with the driver's error codes (cuda.h) for misuse. "Device memory" is host memory; a host-to-device
 * copy is a real memcpy, paced to the rate config.h gives for the GPU and the NUMA node of the
 * calling thread's CPU (sched_getcpu), so the probe's binding decides the figure it measures.
 * Events read CLOCK_MONOTONIC. Any call can be made to fail (config "fail"); at exit the handles
 * still alive are written to the config's "leaks" file, which is how the tests see cleanup. */
#define _GNU_SOURCE
#include "config.h"
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2, CUDA_ERROR_NOT_INITIALIZED = 3,
       CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101, CUDA_ERROR_INVALID_CONTEXT = 201,
       CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_NOT_READY = 600, CUDA_ERROR_UNKNOWN = 999 };

#define MAXOBJ 256
struct ctx { int device, refs; };
struct stream { uint32_t magic; int live; };
struct event { uint32_t magic; int live, recorded; long long ns; };
struct dalloc { char *p; size_t n; };
struct halloc { void *p; };

static int inited;
static struct ctx PRIMARY[MAXGPU];
static struct ctx *current;
static struct stream STREAMS[MAXOBJ];
static struct event EVENTS[MAXOBJ];
static struct dalloc DALLOC[MAXOBJ];
static struct halloc HALLOC[MAXOBJ];

#define INJECT(name) do { int c_ = cfg_injected(name); if (c_) return c_; } while (0)
#define NEED_INIT() if (!inited) return CUDA_ERROR_NOT_INITIALIZED
#define NEED_CTX() if (!current || current->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* CUDA_VISIBLE_DEVICES, as the driver reads it at cuInit: a comma list of ordinals (the subset the
 * stand-in needs); the visible devices are renumbered from 0. */
static int VISIBLE[MAXGPU], NVISIBLE;
static void read_device_mask(void) {
    const char *mask = getenv("CUDA_VISIBLE_DEVICES");
    NVISIBLE = 0;
    if (!mask) {
        for (int i = 0; i < CFG.ngpu; i++) VISIBLE[NVISIBLE++] = i;
        return;
    }
    for (const char *p = mask; *p && NVISIBLE < MAXGPU;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v >= 0 && v < CFG.ngpu) VISIBLE[NVISIBLE++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
}
int cuInit(unsigned flags) {
    cfg_load();
    INJECT("cuInit");
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    read_device_mask();
    if (NVISIBLE == 0) return CUDA_ERROR_NO_DEVICE;
    inited = 1;
    return CUDA_SUCCESS;
}
int cuDriverGetVersion(int *v) { if (!v) return CUDA_ERROR_INVALID_VALUE; *v = 12040; return CUDA_SUCCESS; }
int cuDeviceGetCount(int *n) { NEED_INIT(); INJECT("cuDeviceGetCount"); if (!n) return CUDA_ERROR_INVALID_VALUE; *n = NVISIBLE; return CUDA_SUCCESS; }
int cuDeviceGet(int *dev, int ordinal) {
    NEED_INIT();
    INJECT("cuDeviceGet");
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= NVISIBLE) return CUDA_ERROR_INVALID_DEVICE;
    *dev = VISIBLE[ordinal];
    return CUDA_SUCCESS;
}
#define VALID_DEV(d) if ((d) < 0 || (d) >= CFG.ngpu) return CUDA_ERROR_INVALID_DEVICE
int cuDeviceGetName(char *out, int len, int dev) {
    NEED_INIT(); VALID_DEV(dev);
    if (!out || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(out, len, "%s", CFG.gpu[dev].name);
    return CUDA_SUCCESS;
}
int cuDeviceGetUuid(unsigned char *out16, int dev) {
    NEED_INIT(); VALID_DEV(dev);
    INJECT("cuDeviceGetUuid");
    if (!out16) return CUDA_ERROR_INVALID_VALUE;
    /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx": the 16 bytes behind NVML's text form */
    const char *s = CFG.gpu[dev].uuid;
    if (!strncmp(s, "GPU-", 4)) s += 4;
    int n = 0;
    for (; *s && n < 16; s++) {
        if (*s == '-') continue;
        unsigned b;
        if (sscanf(s, "%2x", &b) != 1) break;
        out16[n++] = (unsigned char)b;
        s++;
    }
    while (n < 16) out16[n++] = 0;
    return CUDA_SUCCESS;
}
int cuDeviceGetPCIBusId(char *out, int len, int dev) {
    NEED_INIT(); VALID_DEV(dev);
    INJECT("cuDeviceGetPCIBusId");
    if (!out || len < 13) return CUDA_ERROR_INVALID_VALUE;
    unsigned dom = 0, bus = 0, d = 0, fn = 0;
    sscanf(CFG.gpu[dev].bus, "%x:%x:%x.%x", &dom, &bus, &d, &fn);
    snprintf(out, len, "%04X:%02X:%02X.%X", dom, bus, d, fn);
    return CUDA_SUCCESS;
}
/* CU_CTX_SCHED_* and CU_CTX_LMEM_RESIZE_TO_MAX bits are what the driver accepts here (cuda.h) */
static unsigned PRIMARY_FLAGS[MAXGPU];
int cuDevicePrimaryCtxSetFlags_v2(int dev, unsigned flags) {
    NEED_INIT(); VALID_DEV(dev);
    INJECT("cuDevicePrimaryCtxSetFlags_v2");
    if (flags & ~0x1fu) return CUDA_ERROR_INVALID_VALUE;
    PRIMARY_FLAGS[dev] = flags;
    return CUDA_SUCCESS;
}
int cuDevicePrimaryCtxRetain(struct ctx **out, int dev) {
    NEED_INIT(); VALID_DEV(dev);
    INJECT("cuDevicePrimaryCtxRetain");
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    PRIMARY[dev].device = dev;
    PRIMARY[dev].refs++;
    *out = &PRIMARY[dev];
    return CUDA_SUCCESS;
}
int cuDevicePrimaryCtxRelease_v2(int dev) {
    NEED_INIT(); VALID_DEV(dev);
    INJECT("cuDevicePrimaryCtxRelease_v2");
    if (PRIMARY[dev].refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--PRIMARY[dev].refs == 0 && current == &PRIMARY[dev]) current = NULL;
    return CUDA_SUCCESS;
}
int cuCtxSetCurrent(struct ctx *c) {
    NEED_INIT();
    INJECT("cuCtxSetCurrent");
    if (c && (c < PRIMARY || c >= PRIMARY + MAXGPU || c->refs <= 0)) return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}
int cuMemAlloc_v2(uintptr_t *dptr, size_t n) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuMemAlloc_v2");
    if (!dptr || n == 0) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAXOBJ; i++)
        if (!DALLOC[i].p) {
            DALLOC[i].p = malloc(n);
            if (!DALLOC[i].p) return CUDA_ERROR_OUT_OF_MEMORY;
            DALLOC[i].n = n;
            *dptr = (uintptr_t)DALLOC[i].p;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
int cuMemFree_v2(uintptr_t dptr) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuMemFree_v2");
    for (int i = 0; i < MAXOBJ; i++)
        if (DALLOC[i].p && (uintptr_t)DALLOC[i].p == dptr) { free(DALLOC[i].p); DALLOC[i].p = NULL; return CUDA_SUCCESS; }
    return CUDA_ERROR_INVALID_VALUE;
}
int cuMemHostAlloc(void **pp, size_t n, unsigned flags) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuMemHostAlloc");
    if (!pp || n == 0 || flags > 0xF) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAXOBJ; i++)
        if (!HALLOC[i].p) {
            /* pinned memory is faulted in at allocation, under the caller's memory policy */
            HALLOC[i].p = malloc(n);
            if (!HALLOC[i].p) return CUDA_ERROR_OUT_OF_MEMORY;
            memset(HALLOC[i].p, 0, n);
            *pp = HALLOC[i].p;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
int cuMemFreeHost(void *p) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuMemFreeHost");
    for (int i = 0; i < MAXOBJ; i++)
        if (HALLOC[i].p && HALLOC[i].p == p) { free(p); HALLOC[i].p = NULL; return CUDA_SUCCESS; }
    return CUDA_ERROR_INVALID_VALUE;
}
#define SMAGIC 0x5354524dU
#define EMAGIC 0x45564e54U
int cuStreamCreate(struct stream **out, unsigned flags) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuStreamCreate");
    if (!out || flags > 1) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAXOBJ; i++)
        if (!STREAMS[i].live) { STREAMS[i].live = 1; STREAMS[i].magic = SMAGIC; *out = &STREAMS[i]; return CUDA_SUCCESS; }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
static int bad_stream(struct stream *s) { return s && (s < STREAMS || s >= STREAMS + MAXOBJ || !s->live || s->magic != SMAGIC); }
int cuStreamDestroy_v2(struct stream *s) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuStreamDestroy_v2");
    if (!s || bad_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    s->live = 0;
    return CUDA_SUCCESS;
}
int cuStreamSynchronize(struct stream *s) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuStreamSynchronize");
    return bad_stream(s) ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}
int cuEventCreate(struct event **out, unsigned flags) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuEventCreate");
    if (!out || flags > 0xF) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAXOBJ; i++)
        if (!EVENTS[i].live) {
            memset(&EVENTS[i], 0, sizeof EVENTS[i]);
            EVENTS[i].live = 1; EVENTS[i].magic = EMAGIC;
            *out = &EVENTS[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
static int bad_event(struct event *e) { return !e || e < EVENTS || e >= EVENTS + MAXOBJ || !e->live || e->magic != EMAGIC; }
int cuEventDestroy_v2(struct event *e) {
    NEED_INIT();
    INJECT("cuEventDestroy_v2");
    if (bad_event(e)) return CUDA_ERROR_INVALID_HANDLE;
    e->live = 0;
    return CUDA_SUCCESS;
}
int cuEventRecord(struct event *e, struct stream *s) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuEventRecord");
    if (bad_event(e) || bad_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    e->recorded = 1;
    e->ns = now_ns(); /* copies complete before they return, so the stream is idle now */
    return CUDA_SUCCESS;
}
int cuEventSynchronize(struct event *e) {
    NEED_INIT();
    INJECT("cuEventSynchronize");
    return bad_event(e) ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}
int cuEventElapsedTime(float *ms, struct event *a, struct event *b) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuEventElapsedTime");
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (bad_event(a) || bad_event(b)) return CUDA_ERROR_INVALID_HANDLE;
    if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
    *ms = (float)((b->ns - a->ns) / 1e6);
    return CUDA_SUCCESS;
}
int cuMemcpyHtoDAsync_v2(uintptr_t dst, const void *src, size_t n, struct stream *s) {
    NEED_INIT(); NEED_CTX();
    INJECT("cuMemcpyHtoDAsync_v2");
    if (!src || bad_stream(s)) return src ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    int ok = 0;
    for (int i = 0; i < MAXOBJ; i++)
        if (DALLOC[i].p && dst >= (uintptr_t)DALLOC[i].p && dst + n <= (uintptr_t)DALLOC[i].p + DALLOC[i].n) ok = 1;
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    long long start = now_ns();
    memcpy((void *)dst, src, n);
    int cpu = sched_getcpu();
    int node = (cpu >= 0 && cpu < MAXCPU) ? CFG.cpu_node[cpu] : 0;
    double gbps = (node >= 0 && node < MAXNODE) ? CFG.gpu[current->device].bw[node] : 0;
    if (gbps > 0) {
        long long until = start + (long long)(n / gbps); /* bytes / (GB/s) = ns */
        while (now_ns() < until) {
            struct timespec t = {0, 20000};
            nanosleep(&t, NULL);
        }
    }
    return CUDA_SUCCESS;
}
int cuGetErrorName(int r, const char **out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    switch (r) {
    case 0: *out = "CUDA_SUCCESS"; break;
    case 1: *out = "CUDA_ERROR_INVALID_VALUE"; break;
    case 2: *out = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case 3: *out = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case 100: *out = "CUDA_ERROR_NO_DEVICE"; break;
    case 101: *out = "CUDA_ERROR_INVALID_DEVICE"; break;
    case 201: *out = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case 400: *out = "CUDA_ERROR_INVALID_HANDLE"; break;
    case 600: *out = "CUDA_ERROR_NOT_READY"; break;
    case 999: *out = "CUDA_ERROR_UNKNOWN"; break;
    default: *out = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

__attribute__((destructor)) static void report_leaks(void) {
    if (!CFG.leaks[0]) return;
    int ctx = 0, st = 0, ev = 0, d = 0, h = 0;
    for (int i = 0; i < MAXGPU; i++) ctx += PRIMARY[i].refs;
    for (int i = 0; i < MAXOBJ; i++) {
        st += STREAMS[i].live; ev += EVENTS[i].live;
        d += DALLOC[i].p != NULL; h += HALLOC[i].p != NULL;
    }
    FILE *f = fopen(CFG.leaks, "w");
    if (!f) return;
    fprintf(f, "contexts %d\nstreams %d\nevents %d\ndevice_allocs %d\nhost_allocs %d\n", ctx, st, ev, d, h);
    fclose(f);
}
