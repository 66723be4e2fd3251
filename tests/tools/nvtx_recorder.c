/* An NVTX injection library that writes every range an engine process emits to a log.
 *
 * What Nsight Systems does when it loads into a process, minus the GPU: NVTX v3's
 * header-only API (compiled into the `nvtx` package, torch, ...) reads
 * NVTX_INJECTION64_PATH on its first call, loads this library and calls
 * InitializeInjectionNvtx2, which fills NVTX's function tables with the recorders
 * below. Built by the tests with `cc` from NVTX's public headers (the `nvtx` sdist's
 * include/), so nothing here is NVIDIA's code.
 *
 * Each process appends to RLPROF_NVTX_LOG/nvtx.<pid>.log, one line an event, written
 * with one write(2):  <ns> <pid> <tid> <op> <domain> <id> <message>
 * op: push, pop, start (id: the range id), end (id), mark; domain: the name given to
 * nvtxDomainCreateA, "-" for the default domain. tests/helpers/nvtx_log.py reads it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

struct nvtxDomainRegistration_st { char name[128]; };
struct nvtxStringRegistration_st { char *text; };

static int log_fd = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static atomic_ullong next_range = 1;

static void open_log(void) {
    const char *dir = getenv("RLPROF_NVTX_LOG");
    if (!dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/nvtx.%d.log", dir, (int)getpid());
    log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static const char *domain_name(nvtxDomainHandle_t d) { return d ? d->name : "-"; }

static const char *message_of(const nvtxEventAttributes_t *a) {
    if (!a) return "";
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_REGISTERED:
        return a->message.registered ? a->message.registered->text : "";
    default: return "";
    }
}

static void emit(const char *op, const char *domain, unsigned long long id, const char *message) {
    pthread_once(&log_once, open_log);
    if (log_fd < 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[1024];
    int n = snprintf(line, sizeof line, "%lld %d %ld %s %s %llu %s\n",
                     (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, (int)getpid(), (long)syscall(SYS_gettid),
                     op, domain, id, message);
    if (n > (int)sizeof line - 1) { n = sizeof line - 1; line[n - 1] = '\n'; }
    if (write(log_fd, line, n) < 0) { /* a lost line shows as a test failure, nothing else to do */ }
}

/* ---- the default domain (torch.cuda.nvtx, nvtx's default "NVTX" is a domain of its own) ---- */
static int push_a(const char *m) { emit("push", "-", 0, m ? m : ""); return 0; }
static int push_ex(const nvtxEventAttributes_t *a) { emit("push", "-", 0, message_of(a)); return 0; }
static int pop(void) { emit("pop", "-", 0, ""); return 0; }
static nvtxRangeId_t start_a(const char *m) { nvtxRangeId_t id = next_range++; emit("start", "-", id, m ? m : ""); return id; }
static nvtxRangeId_t start_ex(const nvtxEventAttributes_t *a) { nvtxRangeId_t id = next_range++; emit("start", "-", id, message_of(a)); return id; }
static void end(nvtxRangeId_t id) { emit("end", "-", id, ""); }
static void mark_a(const char *m) { emit("mark", "-", 0, m ? m : ""); }

/* ---- named domains ---- */
static nvtxDomainHandle_t domain_create(const char *name) {
    nvtxDomainHandle_t d = calloc(1, sizeof *d);
    if (d) snprintf(d->name, sizeof d->name, "%s", name ? name : "");
    return d;
}
static void domain_destroy(nvtxDomainHandle_t d) { (void)d; /* handles may still be referenced by events in flight */ }
static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char *s) {
    (void)d;
    nvtxStringHandle_t h = calloc(1, sizeof *h);
    if (h) h->text = strdup(s ? s : "");
    return h;
}
static int d_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { emit("push", domain_name(d), 0, message_of(a)); return 0; }
static int d_pop(nvtxDomainHandle_t d) { emit("pop", domain_name(d), 0, ""); return 0; }
static nvtxRangeId_t d_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    nvtxRangeId_t id = next_range++;
    emit("start", domain_name(d), id, message_of(a));
    return id;
}
static void d_end(nvtxDomainHandle_t d, nvtxRangeId_t id) { emit("end", domain_name(d), id, ""); }
static void d_mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { emit("mark", domain_name(d), 0, message_of(a)); }
static void d_name_category(nvtxDomainHandle_t d, uint32_t c, const char *n) { (void)d; (void)c; (void)n; }

static void set(NvtxFunctionTable table, unsigned int size, unsigned int id, NvtxFunctionPointer fn) {
    if (id <= size && table[id]) *table[id] = fn;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    const NvtxExportTableCallbacks *callbacks = (const NvtxExportTableCallbacks *)get_export_table(NVTX_ETID_CALLBACKS);
    if (!callbacks) return 0;
    NvtxFunctionTable core = 0, core2 = 0;
    unsigned int core_size = 0, core2_size = 0;
    if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size)) return 0;
    if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) return 0;
    set(core, core_size, NVTX_CBID_CORE_MarkA, (NvtxFunctionPointer)mark_a);
    set(core, core_size, NVTX_CBID_CORE_RangeStartA, (NvtxFunctionPointer)start_a);
    set(core, core_size, NVTX_CBID_CORE_RangeStartEx, (NvtxFunctionPointer)start_ex);
    set(core, core_size, NVTX_CBID_CORE_RangeEnd, (NvtxFunctionPointer)end);
    set(core, core_size, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)push_a);
    set(core, core_size, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)push_ex);
    set(core, core_size, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)pop);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)domain_create);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, (NvtxFunctionPointer)domain_destroy);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, (NvtxFunctionPointer)register_string);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainNameCategoryA, (NvtxFunctionPointer)d_name_category);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)d_push);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)d_pop);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRangeStartEx, (NvtxFunctionPointer)d_start);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRangeEnd, (NvtxFunctionPointer)d_end);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, (NvtxFunctionPointer)d_mark);
    return 1;
}
