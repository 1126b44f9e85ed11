/* Watchers, mapped memory, immediate mirrors and the GPU entry points from C.
 * Without a CUDA driver (CI): watchers and mapped memory are host memory,
 * GPU-only calls say UNSUPPORTED with a message. With one, the same checks
 * run on CUDA-mapped memory. A thread stands in for the kernel. */
#include "fabriclib.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;
#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, " (last error: %s)\n", fabriclib_last_error_message()); \
            failures++;                                                     \
        }                                                                   \
    } while (0)

enum { N = 20000 };

struct seen {
    _Atomic uint64_t calls, last_new, bad_order, first_old;
    fabriclib_watcher **self; /* destroyed from its own callback at value 7 (second watcher) */
};

static void on_change(void *user_data, uint64_t old_value, uint64_t new_value) FABRICLIB_NOEXCEPT {
    struct seen *s = user_data;
    uint64_t calls = atomic_fetch_add(&s->calls, 1);
    if (calls == 0) atomic_store(&s->first_old, old_value);
    if (old_value != atomic_load(&s->last_new) || new_value <= old_value) atomic_fetch_add(&s->bad_order, 1);
    atomic_store(&s->last_new, new_value);
    if (s->self && new_value == 7) {
        fabriclib_watcher_destroy(*s->self);
        *s->self = NULL;
    }
}

static void *bump(void *word) {
    for (uint64_t v = 1; v <= N; v++) atomic_store_explicit((_Atomic uint64_t *)word, v, memory_order_release);
    return NULL;
}

static int wait_for(_Atomic uint64_t *x, uint64_t want) {
    for (int i = 0; i < 10000; i++) {
        if (atomic_load(x) == want) return 1;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* What the log callback saw. */
struct logged {
    int count, level;
    char text[256];
};

static void on_log(void *user_data, fabriclib_log_level level, const char *message) FABRICLIB_NOEXCEPT {
    struct logged *l = (struct logged *)user_data;
    l->count++;
    l->level = (int)level;
    snprintf(l->text, sizeof l->text, "%s", message);
}

struct destroyer {
    fabriclib_engine *e;
    int called;
};

/* Inside fabriclib_engine_progress of the same engine: refused, and logged. */
static void destroy_in_callback(void *user_data, fabriclib_status status) FABRICLIB_NOEXCEPT {
    struct destroyer *d = (struct destroyer *)user_data;
    (void)status;
    d->called++;
    fabriclib_engine_destroy(d->e);
}

int main(void) {
    fabriclib_config *cfg = NULL;
    fabriclib_engine *e = NULL;
    if (fabriclib_config_new(&cfg) || fabriclib_config_set_provider(cfg, "tcp;ofi_rxm") ||
        fabriclib_config_set_bind_address(cfg, "127.0.0.1") || fabriclib_config_set_watcher_idle(cfg, 1000, 20) ||
        fabriclib_engine_create(cfg, &e)) {
        fprintf(stderr, "cannot create an engine: %s\n", fabriclib_last_error_message());
        return 1;
    }
    CHECK(fabriclib_config_set_watcher_idle(cfg, 1, 0) == FABRICLIB_STATUS_INVALID_ARGUMENT, "nap 0 refused");
    CHECK(fabriclib_config_set_watcher_idle(NULL, 1, 1) == FABRICLIB_STATUS_INVALID_ARGUMENT, "NULL config");
    CHECK(fabriclib_config_set_idle_policy(cfg, 7) == FABRICLIB_STATUS_INVALID_ARGUMENT, "unknown idle policy");
    CHECK(fabriclib_config_set_idle_policy(cfg, FABRICLIB_IDLE_AUTO) == FABRICLIB_STATUS_OK, "idle policy auto");
    fabriclib_config_free(cfg);
    int32_t version = 0;
    fabriclib_status cuda = fabriclib_cuda_driver_version(&version);
    if (cuda == FABRICLIB_STATUS_OK) {
        printf("CUDA driver %d: mapped memory is CUDA-mapped\n", version);
    } else {
        CHECK(cuda == FABRICLIB_STATUS_UNSUPPORTED, "no driver must read UNSUPPORTED, got %d", cuda);
        CHECK(strstr(fabriclib_last_error_message(), "CUDA") != NULL, "the message names CUDA");
        printf("no CUDA driver (%s): host memory; GPU-only calls checked for UNSUPPORTED\n",
               fabriclib_last_error_message());
    }

    /* A watcher sees a thread's 20000 stores in order, possibly skipping some, ending at the last. */
    struct seen s;
    memset(&s, 0, sizeof s);
    fabriclib_watcher_opts o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.callback = on_change;
    o.user_data = &s;
    fabriclib_watcher *w = NULL;
    CHECK(fabriclib_watcher_create(e, &o, &w) == FABRICLIB_STATUS_OK, "create");
    uint64_t *word = NULL, dev = 0;
    CHECK(fabriclib_watcher_host_ptr(w, &word) == FABRICLIB_STATUS_OK && word != NULL, "host pointer");
    fabriclib_status d = fabriclib_watcher_device_ptr(w, &dev);
    CHECK(cuda == FABRICLIB_STATUS_OK ? (d == FABRICLIB_STATUS_OK && dev != 0) : d == FABRICLIB_STATUS_UNSUPPORTED,
          "device pointer: %d", d);
    pthread_t t;
    pthread_create(&t, NULL, bump, word);
    pthread_join(t, NULL);
    CHECK(wait_for(&s.last_new, N), "the last value is reported: last %llu", (unsigned long long)s.last_new);
    CHECK(s.bad_order == 0, "%llu callbacks out of order", (unsigned long long)s.bad_order);
    CHECK(s.first_old == 0, "the first old value is 0");
    printf("watcher: %llu callbacks for %d stores, in order\n", (unsigned long long)s.calls, N);
    fabriclib_watcher_destroy(w);

    /* Destroyed from its own callback: no call after that. */
    struct seen s2;
    memset(&s2, 0, sizeof s2);
    fabriclib_watcher *w2 = NULL;
    s2.self = &w2;
    o.user_data = &s2;
    CHECK(fabriclib_watcher_create(e, &o, &w2) == FABRICLIB_STATUS_OK, "create");
    uint64_t *word2 = NULL;
    fabriclib_watcher_host_ptr(w2, &word2);
    _Atomic uint64_t *aw2 = (_Atomic uint64_t *)word2;
    for (uint64_t v = 1; v <= 7; v++) {
        atomic_store(aw2, v);
        CHECK(wait_for(&s2.last_new, v), "value %llu seen", (unsigned long long)v);
    }
    CHECK(wait_for(&s2.calls, 7), "7 calls");
    /* word2's memory went with the watcher: nothing to store to any more; the count stays. */
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    CHECK(s2.calls == 7 && w2 == NULL, "no call after destroy from a callback");

    /* Bad input. */
    o.callback = NULL;
    CHECK(fabriclib_watcher_create(e, &o, &w) == FABRICLIB_STATUS_INVALID_ARGUMENT, "NULL callback");
    o.callback = on_change;
    o.memory = 9;
    CHECK(fabriclib_watcher_create(e, &o, &w) == FABRICLIB_STATUS_INVALID_ARGUMENT, "unknown memory kind");
    o.memory = FABRICLIB_MEMORY_HOST;
    o.struct_size = 0;
    CHECK(fabriclib_watcher_create(e, &o, &w) == FABRICLIB_STATUS_INVALID_ARGUMENT, "struct_size 0");
    o.struct_size = sizeof o;
    CHECK(fabriclib_watcher_create(e, NULL, &w) == FABRICLIB_STATUS_INVALID_ARGUMENT, "NULL opts");
    CHECK(fabriclib_watcher_create(e, &o, NULL) == FABRICLIB_STATUS_INVALID_ARGUMENT, "NULL out");
    fabriclib_watcher_destroy(NULL);

    /* Mapped memory: zeroed, aligned; host-only has no device address. */
    void *host = NULL;
    uint64_t devp = 1;
    CHECK(fabriclib_mapped_alloc(256, FABRICLIB_MEMORY_HOST, 0, &host, &devp) == FABRICLIB_STATUS_OK, "host alloc");
    CHECK(host && ((uintptr_t)host % 64) == 0 && devp == 0 && ((uint8_t *)host)[255] == 0, "zeroed, aligned, no device");
    CHECK(fabriclib_mapped_free(host) == FABRICLIB_STATUS_OK, "free");
    CHECK(fabriclib_mapped_free(&devp) == FABRICLIB_STATUS_INVALID_ARGUMENT, "free of a foreign pointer");
    CHECK(fabriclib_mapped_free(NULL) == FABRICLIB_STATUS_OK, "free NULL");
    fabriclib_status m = fabriclib_mapped_alloc(64, FABRICLIB_MEMORY_CUDA_MAPPED, 0, &host, &devp);
    if (cuda == FABRICLIB_STATUS_OK) {
        CHECK(m == FABRICLIB_STATUS_OK && devp != 0, "CUDA-mapped alloc");
        fabriclib_mapped_free(host);
    } else {
        CHECK(m == FABRICLIB_STATUS_UNSUPPORTED, "CUDA-mapped without a driver: %d", m);
    }

    /* An immediate mirror starts at the current count; stop with NULL; unaligned refused. */
    uint64_t *mw = NULL;
    CHECK(fabriclib_mapped_alloc(16, FABRICLIB_MEMORY_AUTO, 0, (void **)&mw, NULL) == FABRICLIB_STATUS_OK, "alloc");
    mw[0] = 99;
    CHECK(fabriclib_imm_mirror(e, 3, mw) == FABRICLIB_STATUS_OK && mw[0] == 0, "mirror set to the count (0)");
    CHECK(fabriclib_imm_mirror(e, 3, (uint64_t *)((char *)mw + 4)) == FABRICLIB_STATUS_INVALID_ARGUMENT, "unaligned");
    CHECK(fabriclib_imm_mirror(e, 3, NULL) == FABRICLIB_STATUS_OK, "stop");
    fabriclib_mapped_free(mw);

    /* Device-memory registration: no driver -> UNSUPPORTED; a host pointer is not device memory. */
    fabriclib_mr *mr = NULL;
    char buf[64];
    fabriclib_status r = fabriclib_mr_register_device(e, buf, sizeof buf, 0, &mr);
    CHECK(r == (cuda == FABRICLIB_STATUS_OK ? FABRICLIB_STATUS_INVALID_ARGUMENT : FABRICLIB_STATUS_UNSUPPORTED),
          "register_device of a host buffer: %d", r);

    fabriclib_engine_destroy(e);

    /* Manual progress: no worker thread; a waiting call progresses the engine. */
    fabriclib_engine *me = NULL;
    if (fabriclib_config_new(&cfg) || fabriclib_config_set_provider(cfg, "tcp;ofi_rxm") ||
        fabriclib_config_set_bind_address(cfg, "127.0.0.1") || fabriclib_config_set_manual_progress(cfg, true) ||
        fabriclib_engine_create(cfg, &me)) {
        fprintf(stderr, "cannot create a manual engine: %s\n", fabriclib_last_error_message());
        return 1;
    }
    fabriclib_config_free(cfg);
    bool progressed = true;
    CHECK(fabriclib_engine_progress(me, &progressed) == FABRICLIB_STATUS_OK, "progress");
    CHECK(fabriclib_engine_progress(me, NULL) == FABRICLIB_STATUS_OK, "progress, NULL out");
    uint32_t flag = 0, value = 0;
    fabriclib_submit_opts so;
    memset(&so, 0, sizeof so);
    so.struct_size = sizeof so;
    so.flag = &flag;
    so.timeout_us = 50000;
    CHECK(fabriclib_expect_imm_count(me, 9, 1, &so, NULL) == FABRICLIB_STATUS_OK, "expect (progresses until armed)");
    struct timespec pause = {0, 100000000};
    nanosleep(&pause, NULL);
    CHECK(flag == 0, "a deadline fired without progress");
    CHECK(fabriclib_engine_flag_await(me, &flag, 5000000, &value) == FABRICLIB_STATUS_OK, "flag wait progresses");
    CHECK((value & FABRICLIB_FLAG_DONE) && (value & FABRICLIB_FLAG_STATUS_MASK) == FABRICLIB_STATUS_TIMED_OUT,
          "the expectation timed out once progressed: %#x", value);
    CHECK(fabriclib_engine_flag_await(me, NULL, 1, NULL) == FABRICLIB_STATUS_INVALID_ARGUMENT, "NULL flag");
    /* The log callback: destroying the engine from a callback inside its own
     * progress call is refused, and that says so through the callback, not
     * on stderr. Then back to stderr. */
    struct logged seen = {0};
    CHECK(fabriclib_set_log_callback(on_log, &seen) == FABRICLIB_STATUS_OK, "set the log callback");
    struct destroyer killer = {me, 0};
    memset(&so, 0, sizeof so);
    so.struct_size = sizeof so;
    so.callback = destroy_in_callback;
    so.user_data = &killer;
    so.timeout_us = 1000;
    CHECK(fabriclib_expect_imm_count(me, 10, 1, &so, NULL) == FABRICLIB_STATUS_OK, "expect with a callback");
    for (int i = 0; i < 200000 && !killer.called; i++) fabriclib_engine_progress(me, NULL);
    CHECK(killer.called == 1, "the expectation's callback ran inside progress");
    CHECK(seen.count == 1 && seen.level == FABRICLIB_LOG_LEVEL_ERROR && strstr(seen.text, "refused") != NULL,
          "the refusal went to the log callback: %d message(s), level %d, \"%s\"", seen.count, seen.level, seen.text);
    CHECK(fabriclib_set_log_callback(NULL, NULL) == FABRICLIB_STATUS_OK, "back to stderr");
    fabriclib_engine_destroy(me);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("capi_watchers: ok\n");
    return 0;
}
