/* moe_proxy: MoE dispatch and combine between expert-parallel (EP) rank
 * processes through a host proxy, the paper's way.
 *
 *   moe_proxy demo [--ep N] [--tokens T] [--hidden H] [--experts E] [--topk K]
 *                  [--steps S] [--warmup W] [--provider P] [--idle spin|auto|block]
 *                  [--no-raw] [--json FILE]
 *
 * Defaults are DeepSeek-V3's shapes: hidden 7168 (bf16), top-8 of 256
 * experts, 128 tokens per rank (decode; 4096 is prefill). Each rank owns
 * E/EP experts. Every step, every rank:
 *
 *  1. routes its tokens with a seeded router (top-K distinct experts each)
 *     and packs each token once into a send block per destination rank
 *     that owns any of its experts: [header | rows]; a row is the token
 *     (H bf16) after 64 bytes of metadata (its index, its experts). The
 *     header says the step, how many rows follow and when they were sent.
 *  2. The proxy (this thread) submits every peer's block in ONE scatter,
 *     one destination per peer, over a peer set, with the dispatch
 *     immediate (its source's): each destination counts exactly one per
 *     source per step, so it waits for one arrival per source (a mirrored
 *     counter) and then reads the row count from the header, which has
 *     landed with it. No extra round trip carries the counts.
 *  3. The experts' "compute" is a deterministic transform: a row becomes
 *     x * sum(2e + 1) over the token's experts this rank owns (mod 2^16),
 *     after the rank has checked every element of every row it received.
 *  4. Combine: one scatter returns each source its rows' results (a block
 *     per source, same order), with the combine immediate; the source
 *     checks every element of every result.
 *
 * Measured per step (p50/p99 over the steps after --warmup, every rank):
 * dispatch latency (a source's submit to the moment the destination sees
 * its block; the slowest source), combine latency (likewise back), and the
 * proxy's submit cost per peer (the scatter call's time / (EP - 1)). With
 * the raw baseline (default on libfabric providers), every other step moves
 * the same blocks through raw libfabric (raw_fabric.h) between the same
 * processes: the lower bound, in the same run. */
#include <fabriclib.h>
#include "example_util.h"
#include "moe_model.h"
#include "raw_fabric.h"
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static struct {
    moe_shape sh;
    int steps, warmup, raw, idle;
    char provider[32];
} opt = {.sh = {.ep = 4, .experts = 256, .topk = 8, .hidden = 7168, .tokens = 128}, .steps = 1000, .warmup = 20, .raw = 1,
         .idle = FABRICLIB_IDLE_SPIN, .provider = "tcp;ofi_rxm"};
static const char *json_path;
static int yield_waits; /* more spinning threads than CPUs: waits yield the core */

typedef moe_header header;
static uint64_t now_ns(void) { return (uint64_t)(example_now() * 1e9); }

/* Rows of `len` uint16 that should read (seed + i * MOE_STRIDE) * f: returns how many elements differ. */
static uint64_t check_row(const uint16_t *x, int len, uint16_t seed, uint16_t f) {
    uint64_t bad = 0;
    uint16_t v = (uint16_t)(seed * f), dv = (uint16_t)(MOE_STRIDE * f);
    for (int i = 0; i < len; i++, v = (uint16_t)(v + dv)) bad += x[i] != v;
    return bad;
}

/* Block offsets in this rank's region (moe_model.h). */
static size_t RB, OB, BD;
static size_t off_send(int d) { return moe_send(opt.sh, d); }
static size_t off_recv(int s) { return moe_recv(opt.sh, s); }
static size_t off_out(int s) { return moe_out(opt.sh, s); }
static size_t off_ret(int d) { return moe_ret(opt.sh, d); }
static size_t region_len(void) { return moe_region(opt.sh); }

/* Per-step samples, in microseconds. */
typedef struct {
    double dispatch, combine, submit_per_peer;
} sample;

/* What moves a step's blocks: the engine (one scatter over a peer set,
 * mirrored counters) or raw libfabric (one fi_writedata per peer, its own
 * completion queue). */
typedef struct {
    fabriclib_engine *e;
    fabriclib_mr *mr;
    fabriclib_remote_mr *dst[MOE_MAX_EP];
    uint64_t set, mirror[2][MOE_MAX_EP]; /* [dispatch|combine][source] */
    raw_ep *raw;
    fi_addr_t peer[MOE_MAX_EP];
    raw_remote rr[MOE_MAX_EP];
    uint8_t *buf;
    int me;
} transport;

/* Submits, in one go, block `off(d)` of length lens[d] to slot `slot_me` of every peer d. Returns its time (ns). */
static uint64_t submit(transport *x, int raw, uint32_t imm, size_t (*off)(int), size_t (*slot)(int), const size_t *lens,
                       uint32_t *flag) {
    fabriclib_scatter_dst d[MOE_MAX_EP];
    size_t n = 0;
    uint64_t t0 = now_ns();
    if (raw) {
        for (int p = 0; p < opt.sh.ep; p++)
            if (p != x->me) raw_write(x->raw, x->buf + off(p), lens[p], x->peer[p], &x->rr[p], slot(x->me), &imm);
        return now_ns() - t0;
    }
    for (int p = 0; p < opt.sh.ep; p++)
        if (p != x->me) d[n++] = (fabriclib_scatter_dst){lens[p], off(p), x->dst[p], slot(x->me)};
    fabriclib_submit_opts o = {.struct_size = sizeof o, .flag = flag};
    CHECK(fabriclib_submit_scatter(x->e, x->set, &imm, x->mr, d, n, &o, NULL));
    return now_ns() - t0;
}

/* Arrivals of `imm | p` so far. */
static uint64_t arrived(transport *x, int raw, int which, uint32_t imm, int p) {
    if (raw) return raw_count(x->raw, imm | (uint32_t)p);
    return __atomic_load_n(&x->mirror[which][p], __ATOMIC_ACQUIRE);
}

/* Waits for one block from every peer (seen[p] counts them); returns the
 * slowest peer's latency (ns): arrival seen here minus its header's send time. */
static uint64_t wait_blocks(transport *x, int raw, int which, uint32_t imm, uint64_t *seen, size_t (*slot)(int)) {
    uint64_t slowest = 0;
    int left = opt.sh.ep - 1, done[MOE_MAX_EP] = {0};
    double t0 = example_now();
    for (unsigned spins = 0; left; spins++) {
        for (int p = 0; p < opt.sh.ep; p++) {
            if (p == x->me || done[p] || arrived(x, raw, which, imm, p) <= seen[p]) continue;
            uint64_t lat = now_ns() - ((const header *)(x->buf + slot(p)))->sent_ns;
            slowest = lat > slowest ? lat : slowest;
            done[p] = 1, seen[p]++, left--;
        }
        if (yield_waits && spins % 16 == 15) sched_yield();
        if (spins % 4096 == 4095 && example_now() - t0 > 60) {
            fprintf(stderr, "rank %d: no block from %d peer(s) in 60 s\n", x->me, left);
            exit(1);
        }
    }
    return slowest;
}

static int rank_main(int me, int fd) {
    transport x = {.me = me};
    x.e = example_engine(opt.provider, NULL, (fabriclib_idle)opt.idle);
    fabriclib_caps caps = {.struct_size = sizeof caps};
    CHECK(fabriclib_engine_caps(x.e, &caps));
    if (caps.max_msg_size < BD) {
        fprintf(stderr, "a block of %zu bytes is over %s's largest write (%llu): fewer --tokens or a smaller --hidden\n", BD,
                opt.provider, (unsigned long long)caps.max_msg_size);
        return 1;
    }
    x.buf = aligned_alloc(4096, (region_len() + 4095) / 4096 * 4096);
    memset(x.buf, 0, region_len());
    uint8_t blob[FABRICLIB_MAX_DESCRIPTOR_LEN], addr[FABRICLIB_MAX_ADDRESS_LEN];
    size_t n;
    CHECK(fabriclib_mr_register(x.e, x.buf, region_len(), &x.mr));
    CHECK(fabriclib_mr_descriptor(x.mr, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    CHECK(fabriclib_engine_address(x.e, addr, sizeof addr, &n));
    oob_put_blob(fd, addr, n);
    if (opt.raw) {
        x.raw = raw_open(opt.provider, "127.0.0.1");
        raw_register(x.raw, x.buf, region_len());
        oob_put_blob(fd, &x.raw->self, sizeof x.raw->self);
    }
    /* Every peer's descriptor and address (the coordinator relays them), then the peer set. */
    const uint8_t *addrs[MOE_MAX_EP];
    size_t addr_lens[MOE_MAX_EP], np = 0;
    uint8_t (*peer_addr)[FABRICLIB_MAX_ADDRESS_LEN] = malloc(MOE_MAX_EP * sizeof *peer_addr);
    for (int p = 0; p < opt.sh.ep; p++) {
        size_t bl = oob_get_blob(fd, blob, sizeof blob), al = oob_get_blob(fd, peer_addr[p], sizeof peer_addr[p]);
        if (opt.raw) oob_get_blob(fd, &x.rr[p], sizeof x.rr[p]);
        if (p == me) continue;
        CHECK(fabriclib_remote_mr_parse(blob, bl, &x.dst[p]));
        addrs[np] = peer_addr[p], addr_lens[np++] = al;
        if (opt.raw) x.peer[p] = raw_insert(x.raw, &x.rr[p]);
    }
    CHECK(fabriclib_add_peer_set(x.e, (fabriclib_blob_list)addrs, addr_lens, np, &x.set));
    for (int p = 0; p < opt.sh.ep; p++) {
        if (p == me) continue;
        CHECK(fabriclib_imm_mirror(x.e, IMM_DISPATCH | (uint32_t)p, &x.mirror[0][p]));
        CHECK(fabriclib_imm_mirror(x.e, IMM_COMBINE | (uint32_t)p, &x.mirror[1][p]));
    }
    int total = opt.warmup + opt.steps, per_step = opt.raw ? 2 : 1;
    sample *smp = calloc((size_t)total * (size_t)per_step, sizeof *smp);
    uint16_t *ex = malloc((size_t)opt.sh.tokens * (size_t)opt.sh.topk * sizeof *ex);
    int *list = malloc((size_t)opt.sh.ep * (size_t)opt.sh.tokens * sizeof *list); /* [d][k]: the k-th token sent to d */
    size_t rows[MOE_MAX_EP], lens[MOE_MAX_EP];
    uint64_t seen[2][2][MOE_MAX_EP] = {{{0}}}; /* [raw][dispatch|combine][peer] */
    uint64_t bad = 0, bytes = 0; /* elements that differ; bytes the engine's steps sent to peers */
    uint32_t dflag = 0, cflag = 0;
    uint16_t *tok = malloc((size_t)opt.sh.hidden * 2);
    int go = me;
    oob_xfer(fd, &go, sizeof go, 1); /* ready: every peer is known */
    oob_xfer(fd, &go, sizeof go, 0); /* go */
    for (int it = 0; it < total * per_step; it++) {
        int raw = opt.raw && (it & 1);
        uint64_t t = (uint64_t)it + 1;
        /* 1. Route and pack (the dispatch kernel's work). */
        memset(rows, 0, sizeof rows);
        for (int j = 0; j < opt.sh.tokens; j++) {
            uint16_t *e = &ex[j * opt.sh.topk], seed = moe_seed(t, me, j);
            moe_route(opt.sh, t, me, j, e);
            for (int i = 0; i < opt.sh.hidden; i++) tok[i] = (uint16_t)(seed + i * MOE_STRIDE);
            int hit[MOE_MAX_EP] = {0};
            for (int k = 0; k < opt.sh.topk; k++) hit[moe_owner(opt.sh, e[k])] = 1;
            for (int d = 0; d < opt.sh.ep; d++) {
                if (!hit[d]) continue;
                uint8_t *row = x.buf + off_send(d) + MOE_HDR + rows[d] * RB;
                *(uint32_t *)row = (uint32_t)j;
                memcpy(row + 4, e, (size_t)opt.sh.topk * 2);
                memcpy(row + MOE_META, tok, (size_t)opt.sh.hidden * 2);
                list[d * opt.sh.tokens + (int)rows[d]++] = j;
            }
        }
        uint64_t sent = now_ns();
        for (int d = 0; d < opt.sh.ep; d++) {
            *(header *)(x.buf + off_send(d)) = (header){.step = t, .rows = rows[d], .sent_ns = sent};
            lens[d] = MOE_HDR + rows[d] * RB;
        }
        /* 2. Dispatch: one scatter, a block per peer; our own block stays here. */
        dflag = 0;
        for (int d = 0; d < opt.sh.ep && !raw; d++) bytes += d == me ? 0 : lens[d];
        uint64_t sub = submit(&x, raw, IMM_DISPATCH | (uint32_t)me, off_send, off_recv, lens, &dflag);
        uint64_t dlat = wait_blocks(&x, raw, 0, IMM_DISPATCH, seen[raw][0], off_recv);
        /* 3. The experts: check every row received, transform it into the out block of its source. */
        for (int s = 0; s < opt.sh.ep; s++) {
            const uint8_t *blk = x.buf + (s == me ? off_send(me) : off_recv(s));
            const header *h = (const header *)blk;
            if (h->step != t) { fprintf(stderr, "rank %d: step %llu from %d is step %llu\n", me, (unsigned long long)t, s, (unsigned long long)h->step); exit(1); }
            uint8_t *out = x.buf + off_out(s);
            for (uint64_t k = 0; k < h->rows; k++) {
                const uint8_t *row = blk + MOE_HDR + k * RB;
                uint32_t j = *(const uint32_t *)row;
                uint16_t f = moe_factor(opt.sh, (const uint16_t *)(row + 4), me), seed = moe_seed(t, s, (int)j);
                const uint16_t *in = (const uint16_t *)(row + MOE_META);
                bad += check_row(in, opt.sh.hidden, seed, 1);
                uint16_t *y = (uint16_t *)(out + MOE_HDR + k * OB);
                for (int i = 0; i < opt.sh.hidden; i++) y[i] = (uint16_t)(in[i] * f);
            }
            lens[s] = MOE_HDR + h->rows * OB;
        }
        uint64_t back = now_ns();
        for (int s = 0; s < opt.sh.ep; s++) *(header *)(x.buf + off_out(s)) = (header){.step = t, .rows = 0, .sent_ns = back};
        /* 4. Combine: one scatter back, a block per source. */
        cflag = 0;
        for (int d = 0; d < opt.sh.ep && !raw; d++) bytes += d == me ? 0 : lens[d];
        sub += submit(&x, raw, IMM_COMBINE | (uint32_t)me, off_out, off_ret, lens, &cflag);
        uint64_t clat = wait_blocks(&x, raw, 1, IMM_COMBINE, seen[raw][1], off_ret);
        /* The source checks every result. */
        for (int d = 0; d < opt.sh.ep; d++) {
            const uint8_t *blk = x.buf + (d == me ? off_out(me) : off_ret(d));
            for (size_t k = 0; k < rows[d]; k++) {
                int j = list[d * opt.sh.tokens + (int)k];
                bad += check_row((const uint16_t *)(blk + MOE_HDR + k * OB), opt.sh.hidden, moe_seed(t, me, j), moe_factor(opt.sh, &ex[j * opt.sh.topk], d));
            }
        }
        /* Both scatters' sources are free again before the next step packs. */
        if (raw) raw_drain(x.raw);
        else {
            CHECK(fabriclib_engine_flag_await(x.e, &dflag, FABRICLIB_NO_TIMEOUT, NULL));
            CHECK(fabriclib_engine_flag_await(x.e, &cflag, FABRICLIB_NO_TIMEOUT, NULL));
            if ((dflag | cflag) & FABRICLIB_FLAG_STATUS_MASK) { fprintf(stderr, "rank %d: a scatter failed\n", me); exit(1); }
        }
        smp[it] = (sample){dlat / 1e3, clat / 1e3, sub / 2e3 / (opt.sh.ep - 1)};
    }
    oob_xfer(fd, &bad, sizeof bad, 1);
    oob_xfer(fd, &bytes, sizeof bytes, 1);
    oob_xfer(fd, smp, (size_t)total * (size_t)per_step * sizeof *smp, 1);
    if (x.raw) raw_close(x.raw);
    for (int p = 0; p < opt.sh.ep; p++)
        if (p != me) fabriclib_imm_mirror(x.e, IMM_DISPATCH | (uint32_t)p, NULL), fabriclib_imm_mirror(x.e, IMM_COMBINE | (uint32_t)p, NULL);
    fabriclib_mr_deregister(x.mr);
    fabriclib_engine_destroy(x.e);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "demo")) goto usage;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-raw")) { opt.raw = 0; continue; }
        if (!val) goto usage;
        i++;
        if (!strcmp(a, "--ep")) opt.sh.ep = atoi(val);
        else if (!strcmp(a, "--tokens")) opt.sh.tokens = atoi(val);
        else if (!strcmp(a, "--hidden")) opt.sh.hidden = atoi(val);
        else if (!strcmp(a, "--experts")) opt.sh.experts = atoi(val);
        else if (!strcmp(a, "--topk")) opt.sh.topk = atoi(val);
        else if (!strcmp(a, "--steps")) opt.steps = atoi(val);
        else if (!strcmp(a, "--warmup")) opt.warmup = atoi(val);
        else if (!strcmp(a, "--json")) json_path = val;
        else if (!strcmp(a, "--idle")) opt.idle = !strcmp(val, "spin") ? FABRICLIB_IDLE_SPIN : !strcmp(val, "auto") ? FABRICLIB_IDLE_AUTO : FABRICLIB_IDLE_BLOCK;
        else if (!strcmp(a, "--provider")) snprintf(opt.provider, sizeof opt.provider, "%s", !strcmp(val, "tcp") ? "tcp;ofi_rxm" : val);
        else goto usage;
    }
    if (opt.sh.ep < 2 || opt.sh.ep > MOE_MAX_EP || opt.sh.experts < opt.sh.ep || opt.sh.experts % opt.sh.ep || opt.sh.topk < 1 ||
        opt.sh.topk > (MOE_META - 4) / 2 || opt.sh.topk > opt.sh.experts || opt.sh.hidden < 1 || opt.sh.tokens < 1 || opt.steps < 1 || opt.warmup < 0) {
        fprintf(stderr, "bad arguments (EP 2..%d dividing the experts; top-k at most %d)\n", MOE_MAX_EP, (MOE_META - 4) / 2);
        return 2;
    }
    if (!strcmp(opt.provider, "verbs")) opt.raw = 0; /* the baseline is libfabric's */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    yield_waits = cpus < 2L * opt.sh.ep * (opt.idle == FABRICLIB_IDLE_SPIN ? 2 : 1);
    RB = moe_rb(opt.sh), OB = moe_ob(opt.sh), BD = moe_bd(opt.sh);
    printf("moe_proxy: EP %d (%d experts each), %d tokens x %d bf16 per rank, top-%d of %d, %s; %d steps (+%d warm-up)%s\n",
           opt.sh.ep, opt.sh.experts / opt.sh.ep, opt.sh.tokens, opt.sh.hidden, opt.sh.topk, opt.sh.experts, opt.provider, opt.steps, opt.warmup,
           opt.raw ? ", each followed by a raw libfabric step" : "");
    int fd[MOE_MAX_EP];
    pid_t pid[MOE_MAX_EP];
    for (int r = 0; r < opt.sh.ep; r++) pid[r] = example_spawn(rank_main, r, &fd[r]);
    /* Every rank's descriptor, address (and raw endpoint), to every rank. */
    example_relay(fd, opt.sh.ep, opt.raw ? 3 : 2);
    int x;
    for (int r = 0; r < opt.sh.ep; r++) oob_xfer(fd[r], &x, sizeof x, 0);
    for (int r = 0; r < opt.sh.ep; r++) oob_xfer(fd[r], &x, sizeof x, 1);
    /* Every rank's samples: the engine's steps, and the raw ones between them. */
    int per_step = opt.raw ? 2 : 1, total = opt.warmup + opt.steps;
    size_t n = (size_t)opt.steps * (size_t)opt.sh.ep;
    double *v[2][3];
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 3; m++) v[k][m] = malloc(n * sizeof(double));
    sample *smp = malloc((size_t)total * (size_t)per_step * sizeof *smp);
    uint64_t bad = 0, bytes = 0;
    size_t got = 0;
    int failed = 0;
    for (int r = 0; r < opt.sh.ep; r++) {
        uint64_t b, y;
        oob_xfer(fd[r], &b, sizeof b, 0);
        oob_xfer(fd[r], &y, sizeof y, 0);
        oob_xfer(fd[r], smp, (size_t)total * (size_t)per_step * sizeof *smp, 0);
        bad += b, bytes += y;
        for (int s = opt.warmup; s < total; s++, got++)
            for (int k = 0; k < per_step; k++) {
                const sample *q = &smp[s * per_step + k];
                v[k][0][got] = q->dispatch, v[k][1][got] = q->combine, v[k][2][got] = q->submit_per_peer;
            }
    }
    for (int r = 0; r < opt.sh.ep; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    failed |= bad != 0;
    double q[2][3][2]; /* [engine|raw][dispatch|combine|submit][p50|p99] */
    for (int k = 0; k < per_step; k++)
        for (int m = 0; m < 3; m++) q[k][m][0] = example_quantile(v[k][m], got, 0.5), q[k][m][1] = example_quantile(v[k][m], got, 0.99);
    double mb = bytes / (double)opt.sh.ep / (double)total / 1e6;
    printf("per rank and step: %.2f MB to its peers (dispatch and combine); p50 / p99 over %zu rank-steps, microseconds:\n", mb, got);
    printf("  %-14s %20s %20s %22s\n", "", "dispatch", "combine", "proxy submit per peer");
    const char *name[2] = {"engine", "raw libfabric"};
    for (int k = 0; k < per_step; k++)
        printf("  %-14s %9.1f / %-9.1f %9.1f / %-9.1f %10.3f / %-9.3f\n", name[k], q[k][0][0], q[k][0][1], q[k][1][0], q[k][1][1],
               q[k][2][0], q[k][2][1]);
    if (opt.raw) printf("  engine / raw (p50): dispatch %.2fx, combine %.2fx\n", q[0][0][0] / q[1][0][0], q[0][1][0] / q[1][1][0]);
    printf("every element of every row checked at both ends: %s\n", bad ? "ELEMENTS DIFFER" : "ok");
    if (json_path) {
        FILE *js = fopen(json_path, "w");
        if (!js) { perror(json_path); return 2; }
        fprintf(js, "{\"ep\": %d, \"experts\": %d, \"topk\": %d, \"hidden\": %d, \"tokens\": %d, \"steps\": %d, \"warmup\": %d, "
                    "\"provider\": \"%s\", \"mb_per_rank_step\": %.4f, \"samples\": %zu",
                opt.sh.ep, opt.sh.experts, opt.sh.topk, opt.sh.hidden, opt.sh.tokens, opt.steps, opt.warmup, opt.provider, mb, got);
        const char *key[2] = {"engine", "raw"};
        for (int k = 0; k < per_step; k++)
            fprintf(js, ", \"%s\": {\"dispatch_us\": [%.2f, %.2f], \"combine_us\": [%.2f, %.2f], \"submit_per_peer_us\": [%.4f, %.4f]}",
                    key[k], q[k][0][0], q[k][0][1], q[k][1][0], q[k][1][1], q[k][2][0], q[k][2][1]);
        fprintf(js, ", \"mismatched_elements\": %llu, \"ok\": %s}\n", (unsigned long long)bad, failed ? "false" : "true");
        fclose(js);
    }
    printf("%s\n", failed ? "FAILED" : "ok");
    return failed;
usage:
    fprintf(stderr,
            "usage: %s demo [--ep N] [--tokens T] [--hidden H] [--experts E] [--topk K] [--steps S] [--warmup W]\n"
            "               [--provider P] [--idle spin|auto|block] [--no-raw] [--json FILE]\n",
            argv[0]);
    return 2;
}
