/* Configuration shared by the stand-ins for libnvidia-ml.so.1 and libcuda.so.1 (test doubles of the
 * NVIDIA driver's libraries, built by the tests). One file describes a node's GPUs, read from
 * $GNC_FAKE_GPU_CONFIG or /run/nvidia/driver/fake-gpus.conf. Lines, fields separated by tabs:
 *   gpu  uuid=GPU-... name=... bus=00000000:18:00.0 minor=0 gen=5 width=16 maxgen=5 maxwidth=16
 *        gpumaxgen=5 replay=0 replay_step=0 mig=0 cpumask=0x1 nodemask=0x1 procs=12,34
 *        computemode=0 memfree=81920 (MiB) procs_if=PATH (the processes exist only while PATH does)
 *        health (defaults: a healthy GPU without NVLink):
 *        ecc=1 (0 off, na: not supported) ecc_pending=1  ecc_vol=CORR,UNC ecc_agg=CORR,UNC (device memory)
 *        ecc_sram_unc=N (aggregate, SRAM)  remap=CORR,UNC,PENDING,FAILURE (na: not supported)
 *        retired=SBE,DBE,PENDING (default na: row-remapping GPUs report no page retirement)
 *        nvlinks=N (links the GPU has; 0: NVLink not supported)  nvlink_down=MASK
 *        nvlink_na=MASK (links that answer NOT_SUPPORTED)  nvlink_cnt_fail=MASK (links whose counters fail)
 *        nvlink_err=LINK:COUNTER:VALUE,...  fabric=STATE,STATUS (default 0,0: not supported)
 *        c2c=0|1|2 (not supported, enabled, disabled)  fabric_health=MASK (nvmlGpuFabricInfo_v3 healthMask)
 *        persistence=1  clocks=0x1 (clock event reasons bitmask: idle)
 *        recovery=N (the GPU recovery action field, nvmlDeviceGpuRecoveryAction_t; default na: not supported)
 *   bw   GPU NODE GBPS        host-to-device copy rate for a calling thread on NUMA node NODE
 *   cpu  CPU NODE             NUMA node of a CPU, as the stand-in's view of the machine
 *   fail SYMBOL CODE [NTH]    the symbol returns CODE on its NTH call (default 1st), once; CODE -1: that
 *                             call never returns (a GPU that fell off the bus)
 *   leaks PATH                at exit, write the handles still alive to PATH
 *   driver VERSION
 */
#ifndef GNC_STANDIN_CONFIG_H
#define GNC_STANDIN_CONFIG_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXGPU 16
#define MAXNODE 8
#define MAXCPU 1024
#define MAXFAIL 16

struct fake_gpu {
    char uuid[96], name[96], bus[32];
    unsigned minor, gen, width, maxgen, maxwidth, gpumaxgen, replay, replay_step, mig, nprocs;
    unsigned long long cpumask, nodemask;
    unsigned procs[8];
    unsigned computemode;
    unsigned long long memfree_mib;
    char procs_if[256];
    double bw[MAXNODE];
    int ecc, ecc_pending;  /* -1: not supported */
    unsigned long long ecc_vol[2], ecc_agg[2], ecc_sram_unc;  /* [0] corrected, [1] uncorrected */
    int remap_na, retired_na;
    unsigned remap[4], retired[3];
    unsigned nvlinks, nvlink_down, nvlink_na, nvlink_cnt_fail;
    unsigned long long nvlink_err[18][5];
    unsigned fabric_state, fabric_status, persistence;
    unsigned c2c;            /* 0: not supported (a PCIe GPU), 1: NVLink-C2C enabled, 2: disabled */
    unsigned fabric_health;  /* nvmlGpuFabricInfo_v3 healthMask */
    int recovery;  /* -1: the field answers NOT_SUPPORTED */
    unsigned long long clocks;
};
struct fake_fail { char symbol[64]; int code; int nth; int calls; };
struct fake_config {
    int loaded, ngpu;
    struct fake_gpu gpu[MAXGPU];
    int cpu_node[MAXCPU];
    struct fake_fail fail[MAXFAIL];
    int nfail;
    char leaks[512], driver[64];
};
static struct fake_config CFG;

static void cfg_gpu(char *rest) {
    struct fake_gpu *g = &CFG.gpu[CFG.ngpu++];
    memset(g, 0, sizeof *g);
    g->width = g->maxwidth = 16;
    g->memfree_mib = 81920;
    g->ecc = g->ecc_pending = 1;
    g->retired_na = 1;
    g->persistence = 1;
    g->recovery = -1;
    g->clocks = 0x1;
    int pending_set = 0;
    char *save = NULL;
    for (char *kv = strtok_r(rest, "\t\n", &save); kv; kv = strtok_r(NULL, "\t\n", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        if (!strcmp(k, "uuid")) snprintf(g->uuid, sizeof g->uuid, "%s", v);
        else if (!strcmp(k, "name")) snprintf(g->name, sizeof g->name, "%s", v);
        else if (!strcmp(k, "bus")) snprintf(g->bus, sizeof g->bus, "%s", v);
        else if (!strcmp(k, "minor")) g->minor = strtoul(v, NULL, 0);
        else if (!strcmp(k, "gen")) g->gen = strtoul(v, NULL, 0);
        else if (!strcmp(k, "width")) g->width = strtoul(v, NULL, 0);
        else if (!strcmp(k, "maxgen")) g->maxgen = strtoul(v, NULL, 0);
        else if (!strcmp(k, "maxwidth")) g->maxwidth = strtoul(v, NULL, 0);
        else if (!strcmp(k, "gpumaxgen")) g->gpumaxgen = strtoul(v, NULL, 0);
        else if (!strcmp(k, "replay")) g->replay = strtoul(v, NULL, 0);
        else if (!strcmp(k, "replay_step")) g->replay_step = strtoul(v, NULL, 0);
        else if (!strcmp(k, "mig")) g->mig = strtoul(v, NULL, 0);
        else if (!strcmp(k, "cpumask")) g->cpumask = strtoull(v, NULL, 0);
        else if (!strcmp(k, "nodemask")) g->nodemask = strtoull(v, NULL, 0);
        else if (!strcmp(k, "computemode")) g->computemode = strtoul(v, NULL, 0);
        else if (!strcmp(k, "memfree")) g->memfree_mib = strtoull(v, NULL, 0);
        else if (!strcmp(k, "procs_if")) snprintf(g->procs_if, sizeof g->procs_if, "%s", v);
        else if (!strcmp(k, "ecc")) g->ecc = !strcmp(v, "na") ? -1 : (int)strtol(v, NULL, 0);
        else if (!strcmp(k, "ecc_pending")) { g->ecc_pending = (int)strtol(v, NULL, 0); pending_set = 1; }
        else if (!strcmp(k, "ecc_vol")) sscanf(v, "%llu,%llu", &g->ecc_vol[0], &g->ecc_vol[1]);
        else if (!strcmp(k, "ecc_agg")) sscanf(v, "%llu,%llu", &g->ecc_agg[0], &g->ecc_agg[1]);
        else if (!strcmp(k, "ecc_sram_unc")) g->ecc_sram_unc = strtoull(v, NULL, 0);
        else if (!strcmp(k, "remap")) g->remap_na = !strcmp(v, "na") || sscanf(v, "%u,%u,%u,%u", &g->remap[0], &g->remap[1], &g->remap[2], &g->remap[3]) != 4;
        else if (!strcmp(k, "retired")) g->retired_na = !strcmp(v, "na") || sscanf(v, "%u,%u,%u", &g->retired[0], &g->retired[1], &g->retired[2]) != 3;
        else if (!strcmp(k, "nvlinks")) g->nvlinks = strtoul(v, NULL, 0) > 18 ? 18 : strtoul(v, NULL, 0);
        else if (!strcmp(k, "nvlink_down")) g->nvlink_down = strtoul(v, NULL, 0);
        else if (!strcmp(k, "nvlink_na")) g->nvlink_na = strtoul(v, NULL, 0);
        else if (!strcmp(k, "nvlink_cnt_fail")) g->nvlink_cnt_fail = strtoul(v, NULL, 0);
        else if (!strcmp(k, "nvlink_err")) {
            char buf[256], *s3 = NULL;
            snprintf(buf, sizeof buf, "%s", v);
            for (char *p = strtok_r(buf, ",", &s3); p; p = strtok_r(NULL, ",", &s3)) {
                unsigned link = 0, counter = 0;
                unsigned long long value = 0;
                if (sscanf(p, "%u:%u:%llu", &link, &counter, &value) == 3 && link < 18 && counter < 5) g->nvlink_err[link][counter] = value;
            }
        }
        else if (!strcmp(k, "fabric")) sscanf(v, "%u,%u", &g->fabric_state, &g->fabric_status);
        else if (!strcmp(k, "c2c")) g->c2c = strtoul(v, NULL, 0);
        else if (!strcmp(k, "fabric_health")) g->fabric_health = strtoul(v, NULL, 0);
        else if (!strcmp(k, "persistence")) g->persistence = strtoul(v, NULL, 0);
        else if (!strcmp(k, "recovery")) g->recovery = !strcmp(v, "na") ? -1 : (int)strtol(v, NULL, 0);
        else if (!strcmp(k, "clocks")) g->clocks = strtoull(v, NULL, 0);
        else if (!strcmp(k, "procs")) {
            char *s2 = NULL;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *p = strtok_r(buf, ",", &s2); p && g->nprocs < 8; p = strtok_r(NULL, ",", &s2))
                g->procs[g->nprocs++] = strtoul(p, NULL, 0);
        }
    }
    if (!pending_set) g->ecc_pending = g->ecc;
}

static void cfg_load(void) {
    if (CFG.loaded) return;
    CFG.loaded = 1;
    for (int i = 0; i < MAXCPU; i++) CFG.cpu_node[i] = 0;
    snprintf(CFG.driver, sizeof CFG.driver, "550.0-standin");
    const char *path = getenv("GNC_FAKE_GPU_CONFIG");
    FILE *f = fopen(path && *path ? path : "/run/nvidia/driver/fake-gpus.conf", "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        *tab = 0;
        char *rest = tab + 1;
        if (!strcmp(line, "gpu") && CFG.ngpu < MAXGPU) cfg_gpu(rest);
        else if (!strcmp(line, "bw")) {
            int gi = 0, node = 0;
            double gbps = 0;
            if (sscanf(rest, "%d\t%d\t%lf", &gi, &node, &gbps) == 3 && gi >= 0 && gi < MAXGPU && node >= 0 && node < MAXNODE)
                CFG.gpu[gi].bw[node] = gbps;
        } else if (!strcmp(line, "cpu")) {
            int cpu = 0, node = 0;
            if (sscanf(rest, "%d\t%d", &cpu, &node) == 2 && cpu >= 0 && cpu < MAXCPU) CFG.cpu_node[cpu] = node;
        } else if (!strcmp(line, "fail") && CFG.nfail < MAXFAIL) {
            struct fake_fail *x = &CFG.fail[CFG.nfail++];
            x->nth = 1;
            if (sscanf(rest, "%63s\t%d\t%d", x->symbol, &x->code, &x->nth) < 2) CFG.nfail--;
        } else if (!strcmp(line, "leaks")) {
            snprintf(CFG.leaks, sizeof CFG.leaks, "%s", rest);
            CFG.leaks[strcspn(CFG.leaks, "\n")] = 0;
        } else if (!strcmp(line, "driver")) {
            snprintf(CFG.driver, sizeof CFG.driver, "%s", rest);
            CFG.driver[strcspn(CFG.driver, "\n")] = 0;
        }
    }
    fclose(f);
}

/* The injected failure code for this call of `symbol`, or 0. */
static int cfg_injected(const char *symbol) {
    cfg_load();
    for (int i = 0; i < CFG.nfail; i++) {
        struct fake_fail *x = &CFG.fail[i];
        if (!strcmp(x->symbol, symbol) && ++x->calls == x->nth) {
            if (x->code == -1) for (;;) pause();
            return x->code;
        }
    }
    return 0;
}
#endif
