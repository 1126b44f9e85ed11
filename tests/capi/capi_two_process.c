/* Two processes over a real provider, through the C API only: single write,
 * paged writes (1000 random pages), a batch of single writes, barrier,
 * send/recv round trips; bytes
 * compared, immediates counted, both completion styles (flag, callback).
 * Usage: capi_two_process PROVIDER */
#include "fabriclib.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LEN (1 << 20)
#define PAGE 512
#define PAGES 1000
/* The batch: write k is BATCH_LEN + k bytes from BATCH_SRC + k * BATCH_STEP
 * to BATCH_DST + k * BATCH_STEP, each with immediate 4. */
#define BATCH 8
#define BATCH_LEN 4096
#define BATCH_STEP 8192
#define BATCH_SRC 3
#define BATCH_DST (LEN - BATCH * BATCH_STEP)
#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (%s)\n", fabriclib_last_error_message()); exit(1); } while (0)
/* Every wait loop naps: under valgrind, whose threads take turns on one
 * lock, a loop that spins without a system call starves the engine's own
 * threads (seen: a 40-second run took 4 to 9 minutes on a quiet machine). */
static void nap(void) { struct timespec t = {0, 50000}; nanosleep(&t, NULL); }
#define CHECK(call) do { fabriclib_status s_ = (call); if (s_) DIE("%s -> %s", #call, fabriclib_status_str(s_)); } while (0)

static void put_blob(int fd, const void *p, size_t n) {
    if (write(fd, &n, sizeof n) != sizeof n || write(fd, p, n) != (ssize_t)n) DIE("oob write");
}
static size_t get_blob(int fd, void *p, size_t cap) {
    size_t n = 0, got = 0;
    if (read(fd, &n, sizeof n) != sizeof n || n > cap) DIE("oob read");
    while (got < n) { ssize_t r = read(fd, (char *)p + got, n - got); if (r <= 0) DIE("oob read"); got += (size_t)r; }
    return n;
}
static uint8_t pattern(size_t i) { return (uint8_t)(i * 131 + 7 + (i >> 9)); }
static void perms(uint32_t *src, uint32_t *dst) { /* deterministic: both sides compute them */
    uint32_t slots = LEN / PAGE;
    for (uint32_t i = 0; i < slots; i++) src[i] = dst[i] = i;
    srand(42);
    for (uint32_t i = slots - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rand() % (i + 1), t = src[i]; src[i] = src[j]; src[j] = t;
        j = (uint32_t)rand() % (i + 1); t = dst[i]; dst[i] = dst[j]; dst[j] = t;
    }
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
/* Sleeps until the request behind flag word f has ended (a C11 atomic, as
 * the header allows), then checks it succeeded. */
static void wait_flag(_Atomic uint32_t *f, const char *what) {
    uint32_t v = 0;
    fabriclib_status s = fabriclib_flag_await((const uint32_t *)f, 30 * 1000000, &v);
    if (s == FABRICLIB_STATUS_TIMED_OUT) DIE("%s: timed out", what);
    if (s) DIE("%s: fabriclib_flag_await -> %s", what, fabriclib_status_str(s));
    if (!(v & FABRICLIB_FLAG_DONE) || v != atomic_load_explicit(f, memory_order_acquire)) DIE("%s: flag word %#x", what, v);
    uint32_t st = v & FABRICLIB_FLAG_STATUS_MASK;
    if (st) DIE("%s: ended with %s", what, fabriclib_status_str((fabriclib_status)st));
}

static _Atomic int peers_up = 0;
static void on_peer(void *ud, const uint8_t *addr, size_t len, int32_t state, fabriclib_status why) {
    (void)ud; (void)addr; (void)why;
    if (state == FABRICLIB_PEER_UP && len > 0) atomic_fetch_add(&peers_up, 1);
}

static char used_provider[64] = "?";
static fabriclib_engine *engine(const char *prov) {
    fabriclib_config *c;
    fabriclib_engine *e;
    CHECK(fabriclib_config_new(&c));
    CHECK(fabriclib_config_set_provider(c, prov));
    CHECK(fabriclib_config_set_bind_address(c, "127.0.0.1"));
    CHECK(fabriclib_config_set_peer_callback(c, on_peer, NULL));
    /* Under valgrind both processes crawl: allow a peer a minute between keepalive answers. */
    if (getenv("FABRICLIB_TEST_SLOW")) CHECK(fabriclib_config_set_keepalive_us(c, 1000000, 60000000));
    CHECK(fabriclib_engine_create(c, &e));
    const char *name;
    CHECK(fabriclib_engine_provider(e, &name));
    snprintf(used_provider, sizeof used_provider, "%s", name);
    fabriclib_config_free(c);
    return e;
}

/* Target side: echoes every message, prefixed with "pong:". */
struct echo { fabriclib_engine *e; uint8_t addr[256]; size_t addr_len; };
static void echo_cb(void *ud, fabriclib_status st, const uint8_t *data, size_t len) {
    struct echo *x = ud;
    if (st) return;
    char buf[300];
    memcpy(buf, "pong:", 5);
    memcpy(buf + 5, data, len);
    while (fabriclib_submit_send(x->e, x->addr, x->addr_len, buf, len + 5, NULL, NULL) == FABRICLIB_STATUS_AGAIN) nap();
}

static int target(const char *prov, int fd) {
    fabriclib_engine *e = engine(prov);
    uint8_t *mem = calloc(1, LEN), blob[512];
    fabriclib_mr *mr;
    size_t n;
    static struct echo x;
    _Atomic uint32_t f1 = 0, f2 = 0, f3 = 0, f4 = 0;
    fabriclib_submit_opts d1 = {.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&f1}, d2 = {.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&f2}, d3 = {.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&f3};
    CHECK(fabriclib_mr_register(e, mem, LEN, &mr));
    CHECK(fabriclib_expect_imm_count(e, 1, 1, &d1, NULL));
    CHECK(fabriclib_expect_imm_count(e, 2, PAGES, &d2, NULL));
    CHECK(fabriclib_expect_imm_count(e, 3, 1, &d3, NULL));
    fabriclib_submit_opts d4 = {.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&f4};
    /* One per write of the batch, and the zero-byte write before it. */
    CHECK(fabriclib_expect_imm_count(e, 4, BATCH + 1, &d4, NULL));
    x.e = e;
    x.addr_len = get_blob(fd, x.addr, sizeof x.addr); /* the initiator's address */
    CHECK(fabriclib_submit_recvs(e, 256, 8, echo_cb, &x));
    CHECK(fabriclib_engine_address(e, blob, sizeof blob, &n));
    put_blob(fd, blob, n);
    CHECK(fabriclib_mr_descriptor(mr, blob, sizeof blob, &n));
    put_blob(fd, blob, n);
    wait_flag(&f1, "imm 1");
    wait_flag(&f2, "imm 2 x1000");
    wait_flag(&f3, "barrier imm 3");
    wait_flag(&f4, "imm 4: one per write of the batch");
    /* Exactly as many immediates arrived as were expected: none is left over. */
    for (uint32_t i = 1; i <= 4; i++) {
        uint64_t left = 99;
        CHECK(fabriclib_imm_count_get(e, i, &left));
        if (left != 0) DIE("immediate %u: %llu left over", i, (unsigned long long)left);
    }
    /* Verify every byte: the single write, then the pages. */
    uint8_t *want = calloc(1, LEN);
    uint32_t *src = malloc(sizeof(uint32_t) * (LEN / PAGE)), *dst = malloc(sizeof(uint32_t) * (LEN / PAGE));
    perms(src, dst);
    for (size_t i = 0; i < 100000; i++) want[300000 + i] = pattern(1000 + i);
    for (size_t p = 0; p < PAGES; p++)
        for (size_t i = 0; i < PAGE; i++) want[dst[p] * PAGE + i] = pattern(src[p] * PAGE + i);
    for (size_t k = 0; k < BATCH; k++) /* after the pages: the initiator waited for them */
        for (size_t i = 0; i < BATCH_LEN + k; i++) want[BATCH_DST + k * BATCH_STEP + i] = pattern(BATCH_SRC + k * BATCH_STEP + i);
    int bad = memcmp(want, mem, LEN) != 0;
    if (write(fd, &bad, sizeof bad) != sizeof bad) DIE("oob");
    get_blob(fd, blob, sizeof blob); /* wait until the initiator is done */
    fabriclib_mr_deregister(mr);
    fabriclib_engine_destroy(e);
    free(mem); free(want); free(src); free(dst);
    return bad;
}

static _Atomic int got_pongs;
static void pong_cb(void *ud, fabriclib_status st, const uint8_t *data, size_t len) {
    (void)ud;
    if (st == 0 && len > 5 && memcmp(data, "pong:ping ", 10) == 0) atomic_fetch_add(&got_pongs, 1);
}
/* A request's end with its last-error message, as the done callback sees them. */
struct ended { _Atomic int status; char why[200]; };
static void ended_cb(void *ud, fabriclib_status st) {
    struct ended *x = ud;
    snprintf(x->why, sizeof x->why, "%s", fabriclib_last_error_message());
    atomic_store(&x->status, st);
}
static void wait_ended(struct ended *x, fabriclib_status want, const char *what) {
    double t0 = now();
    while (atomic_load(&x->status) < 0) {
        if (now() - t0 > 30) DIE("%s: never ended", what);
        nap();
    }
    if (atomic_load(&x->status) != want || (want && !x->why[0]))
        DIE("%s: ended %s (%s), expected %s with a message", what, fabriclib_status_str(atomic_load(&x->status)), x->why,
            fabriclib_status_str(want));
}

static _Atomic int paged_done = -1;
static void paged_cb(void *ud, fabriclib_status st) { (void)ud; atomic_store(&paged_done, st); }

static int initiator(const char *prov, int fd) {
    fabriclib_engine *e = engine(prov);
    uint8_t *mem = malloc(LEN), addr[256], blob[512], peer[256];
    size_t n;
    fabriclib_mr *mr;
    fabriclib_remote_mr *rmr;
    for (size_t i = 0; i < LEN; i++) mem[i] = pattern(i);
    CHECK(fabriclib_mr_register(e, mem, LEN, &mr));
    CHECK(fabriclib_submit_recvs(e, 256, 8, pong_cb, NULL));
    /* Deadlines and cancel: an expectation that times out, one that is canceled. */
    static struct ended late = {-1, ""}, gone = {-1, ""};
    fabriclib_submit_opts in_1ms = {.struct_size = sizeof(fabriclib_submit_opts), .callback = ended_cb, .user_data = &late, .timeout_us = 1000};
    fabriclib_submit_opts no_deadline = {.struct_size = sizeof(fabriclib_submit_opts), .callback = ended_cb, .user_data = &gone, .timeout_us = FABRICLIB_NO_TIMEOUT};
    uint64_t id = 0;
    CHECK(fabriclib_expect_imm_count(e, 900, 1, &in_1ms, NULL));
    CHECK(fabriclib_expect_imm_count(e, 901, 1, &no_deadline, &id));
    CHECK(fabriclib_cancel(e, id));
    wait_ended(&late, FABRICLIB_STATUS_TIMED_OUT, "expectation with a 1 ms deadline");
    wait_ended(&gone, FABRICLIB_STATUS_CANCELED, "canceled expectation");
    if (fabriclib_cancel(e, id) != FABRICLIB_STATUS_NOT_FOUND) DIE("a second cancel was not NOT_FOUND");
    /* A flag user reads why its request failed. */
    _Atomic uint32_t late_flag = 0;
    fabriclib_submit_opts flag_1ms = {.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&late_flag, .timeout_us = 1000};
    CHECK(fabriclib_expect_imm_count(e, 902, 1, &flag_1ms, &id));
    uint32_t word = 0;
    CHECK(fabriclib_flag_await((const uint32_t *)&late_flag, 10 * 1000000, &word));
    fabriclib_status why = 0;
    char msg[256];
    size_t msg_len = 0;
    CHECK(fabriclib_request_error(e, id, &why, msg, sizeof msg, &msg_len));
    if ((word & FABRICLIB_FLAG_STATUS_MASK) != FABRICLIB_STATUS_TIMED_OUT || why != FABRICLIB_STATUS_TIMED_OUT ||
        msg_len < 2 || strlen(msg) + 1 != msg_len)
        DIE("request_error: flag %#x, status %d, message '%s'", word, why, msg);
    if (fabriclib_request_error(e, id, &why, msg, 1, &msg_len) != FABRICLIB_STATUS_BUFFER_TOO_SMALL) DIE("small buffer");
    CHECK(fabriclib_engine_address(e, addr, sizeof addr, &n));
    put_blob(fd, addr, n);
    size_t peer_len = get_blob(fd, peer, sizeof peer);
    /* Warm the peer up and learn when it is ready. */
    _Atomic uint32_t up = 0;
    fabriclib_submit_opts when_up = {.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&up};
    CHECK(fabriclib_peer_add(e, peer, peer_len, &when_up, NULL));
    wait_flag(&up, "peer_add: the peer is up");
    int32_t peer_st = -1;
    CHECK(fabriclib_peer_state(e, peer, peer_len, &peer_st));
    if (peer_st != FABRICLIB_PEER_UP) DIE("peer_add reported OK, but the peer's state is %d", (int)peer_st);
    n = get_blob(fd, blob, sizeof blob);
    CHECK(fabriclib_remote_mr_parse(blob, n, &rmr));

    uint32_t imm = 1;
    _Atomic uint32_t f = 0;
    fabriclib_submit_opts by_flag = {.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&f};
    CHECK(fabriclib_submit_single_write(e, 100000, &imm, mr, 1000, rmr, 300000, &by_flag, NULL));
    wait_flag(&f, "single write");

    uint32_t *src = malloc(sizeof(uint32_t) * (LEN / PAGE)), *dst = malloc(sizeof(uint32_t) * (LEN / PAGE));
    perms(src, dst);
    imm = 2;
    fabriclib_pages sp = {src, PAGES, PAGE, 0}, dp = {dst, PAGES, PAGE, 0};
    fabriclib_submit_opts by_cb = {.struct_size = sizeof(fabriclib_submit_opts), .callback = paged_cb};
    CHECK(fabriclib_submit_paged_writes(e, PAGE, &imm, mr, &sp, rmr, &dp, &by_cb, NULL));
    fabriclib_remote_mr *dsts[1] = {rmr};
    CHECK(fabriclib_submit_barrier(e, 0, 3, dsts, 1, NULL, NULL));
    for (int i = 0; i < 50; i++) {
        char msg[32];
        int len = snprintf(msg, sizeof msg, "ping %d", i);
        CHECK(fabriclib_submit_send(e, peer, peer_len, msg, (size_t)len, NULL, NULL));
        double t0 = now();
        while (atomic_load(&got_pongs) <= i) {
            if (now() - t0 > 30) DIE("round trip %d timed out", i);
            nap();
        }
    }
    double t0 = now();
    while (atomic_load(&paged_done) < 0) {
        if (now() - t0 > 30) DIE("paged write callback never came");
        nap();
    }
    /* A batch of single writes, each its own request: consecutive ids, one
     * flag each. A batch with a bad write submits none of its writes. */
    static _Atomic uint32_t bf[BATCH], never[3];
    fabriclib_submit_opts bo[BATCH], no[3];
    fabriclib_single_write bw[BATCH];
    imm = 4;
    for (int k = 0; k < BATCH; k++) {
        bo[k] = (fabriclib_submit_opts){.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&bf[k]};
        bw[k] = (fabriclib_single_write){BATCH_LEN + k, &imm, BATCH_SRC + k * BATCH_STEP, rmr, BATCH_DST + k * BATCH_STEP, &bo[k]};
    }
    fabriclib_single_write badw[3] = {bw[0], bw[1], bw[2]};
    for (int k = 0; k < 3; k++) {
        no[k] = (fabriclib_submit_opts){.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&never[k]};
        badw[k].opts = &no[k];
    }
    badw[2].dst_offset = LEN - 100; /* past the destination's end */
    if (fabriclib_submit_single_writes(e, mr, badw, 3, &id) != FABRICLIB_STATUS_OUT_OF_BOUNDS ||
        !strstr(fabriclib_last_error_message(), "write 2 of the batch"))
        DIE("a batch with a bad third write was not refused as OUT_OF_BOUNDS naming it");
    if (fabriclib_submit_single_writes(e, mr, bw, 0, &id) != FABRICLIB_STATUS_INVALID_ARGUMENT) DIE("empty batch accepted");
    uint64_t first = 0, before = 0;
    CHECK(fabriclib_submit_single_write(e, 0, &imm, mr, 0, rmr, 0, NULL, &before)); /* the target counts it too */
    CHECK(fabriclib_submit_single_writes(e, mr, bw, BATCH, &first));
    if (first != before + 1) DIE("batch ids start at %llu, after %llu", (unsigned long long)first, (unsigned long long)before);
    for (int k = 0; k < BATCH; k++) wait_flag(&bf[k], "a write of the batch");
    for (int k = 0; k < 3; k++)
        if (atomic_load(&never[k])) DIE("a write of the refused batch reported");
    int bad = 1;
    if (read(fd, &bad, sizeof bad) != sizeof bad) DIE("oob");
    /* The counters of the one NIC: every byte written went out and completed,
     * all of it for the one peer. */
    fabriclib_counters all = {.struct_size = sizeof all}, to_peer = {.struct_size = sizeof to_peer};
    CHECK(fabriclib_engine_counters(e, 0, NULL, 0, &all));
    CHECK(fabriclib_engine_counters(e, 0, peer, peer_len, &to_peer));
    uint64_t written = 100000 + (uint64_t)PAGES * PAGE;
    if (all.bytes_completed < written || all.wrs_completed != all.wrs_posted || all.errors != 0 ||
        all.wrs_completed < 1 + PAGES + 1 + 50 + 1 + BATCH || to_peer.bytes_completed != all.bytes_completed ||
        to_peer.wrs_posted != all.wrs_posted)
        DIE("counters: %llu/%llu WRs, %llu/%llu bytes (want >= %llu), %llu errors; peer %llu bytes",
            (unsigned long long)all.wrs_completed, (unsigned long long)all.wrs_posted,
            (unsigned long long)all.bytes_completed, (unsigned long long)all.bytes_posted,
            (unsigned long long)written, (unsigned long long)all.errors, (unsigned long long)to_peer.bytes_completed);
    put_blob(fd, "done", 4);
    fabriclib_remote_mr_free(rmr);
    fabriclib_mr_deregister(mr);
    fabriclib_engine_destroy(e);
    free(mem); free(src); free(dst);
    if (bad) fprintf(stderr, "target saw wrong bytes\n");
    if (atomic_load(&peers_up) < 1) fprintf(stderr, "the peer callback never reported the target up\n");
    return bad || atomic_load(&paged_done) != 0 || atomic_load(&peers_up) < 1;
}

int main(int argc, char **argv) {
    const char *prov = argc > 1 ? argv[1] : "tcp;ofi_rxm";
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) DIE("socketpair");
    pid_t pid = fork(); /* before any libfabric call */
    if (pid == 0) { close(sv[0]); exit(target(prov, sv[1])); }
    close(sv[1]);
    int rc = initiator(prov, sv[0]), st = 0;
    waitpid(pid, &st, 0);
    int ok = rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("capi_two_process[%s, provider %s]: %d passed, %d failed\n", prov, used_provider, ok, !ok);
    return ok ? 0 : 1;
}
