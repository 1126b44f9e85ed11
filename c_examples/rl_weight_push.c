/* rl_weight_push: push a model's weights from T trainer processes to R
 * inference processes after every training step, the paper's way: each
 * trainer writes its own shard straight into every inference rank's
 * parameter buffers (no gather, no broadcast tree), and one barrier per
 * trainer marks the version complete.
 *
 *   rl_weight_push demo [--trainers T] [--ranks R] [--model dense|moe]
 *                       [--scale D] [--versions V] [--provider P] [--elastic V]
 *                       [--json FILE]
 *
 * The parameter list is a real architecture's (dense: Llama-3-8B's shapes;
 * moe: Qwen1.5-MoE-A2.7B's, 60 experts), every dimension but the counts
 * divided by D (default 16) so that it fits the machine. Trainers hold it
 * sharded the FSDP way (every tensor's rows split over T); inference ranks
 * need it tensor-parallel over R (q, k, v, gate, up, embeddings and the
 * head split by rows — column-parallel; o and down split by columns —
 * row-parallel; norms and routers replicated). A routing table computed
 * once from both layouts turns each trainer's shard into, per rank, one
 * scatter of contiguous ranges and one paged write per row-parallel tensor
 * (a row's slice is a page: source stride = the row, destination stride =
 * the rank's slice). Every version fills the shards with f(version, tensor,
 * element); every rank checks every byte of every version.
 *
 * A coordinator (this process) forks the ranks and trainers and passes
 * addresses, descriptors and the lockstep of versions over socketpairs.
 *
 * --elastic V: once every write of version V is submitted, the last rank is
 * killed (SIGKILL). Only the writes to it may fail (PEER_DOWN); every other
 * rank still checks every byte. For version V + 1 a new rank starts in its
 * slot, and the trainers write to it after parsing its descriptor: nothing
 * else is exchanged. */
#include <fabriclib.h>
#include "example_util.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum split { COL, ROW, REP }; /* tensor-parallel: by rows, by columns, replicated */
typedef struct {
    char name[96];
    uint64_t rows, cols;
    enum split split;
} tensor;

static int trainers = 2, ranks = 2, versions = 3, scale = 16;
/* --elastic V: the last rank is killed once version V is submitted; a new
 * one joins in its slot for version V + 1 (0: never). */
static int kill_version = 0, first_version = 1;
static const char *json_path; /* --json FILE: what is printed, as JSON */
static const char *provider = "tcp;ofi_rxm", *model = "dense";
static tensor *ts;
static size_t nts;


static void add(const char *name, int layer, uint64_t rows, uint64_t cols, enum split s) {
    ts = realloc(ts, (nts + 1) * sizeof *ts);
    tensor *t = &ts[nts++];
    if (layer >= 0) snprintf(t->name, sizeof t->name, "layers.%d.%s", layer, name);
    else snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows, t->cols = cols, t->split = s;
}

/* A layer's attention: its norms replicated, q/k/v column-parallel, o row-parallel. */
static void add_attention(int l, uint64_t h, uint64_t kv) {
    add("input_layernorm", l, h, 1, REP);
    add("self_attn.q_proj", l, h, h, COL);
    add("self_attn.k_proj", l, kv, h, COL);
    add("self_attn.v_proj", l, kv, h, COL);
    add("self_attn.o_proj", l, h, h, ROW);
    add("post_attention_layernorm", l, h, 1, REP);
}

/* An MLP (or an expert) at `prefix`: gate and up column-parallel, down row-parallel. */
static void add_mlp(const char *prefix, int l, uint64_t inter, uint64_t h) {
    char n[64];
    snprintf(n, sizeof n, "%s.gate_proj", prefix), add(n, l, inter, h, COL);
    snprintf(n, sizeof n, "%s.up_proj", prefix), add(n, l, inter, h, COL);
    snprintf(n, sizeof n, "%s.down_proj", prefix), add(n, l, h, inter, ROW);
}

/* The parameter list: a weight [out, in] row-major, bf16 (2 bytes).
 * dense: Llama-3-8B; moe: Qwen1.5-MoE-A2.7B (60 routed experts, a shared
 * expert, a router). */
static void build_model(void) {
    uint64_t d = (uint64_t)scale;
    int dense = !strcmp(model, "dense");
    uint64_t h = (dense ? 4096 : 2048) / d, vocab = (dense ? 128256 : 151936) / d;
    add("embed_tokens", -1, vocab, h, COL);
    for (int l = 0; l < (dense ? 32 : 24); l++) {
        add_attention(l, h, dense ? 1024 / d : h);
        if (dense) {
            add_mlp("mlp", l, 14336 / d, h);
            continue;
        }
        add("mlp.gate", l, 60, h, REP);
        for (int e = 0; e < 60; e++) {
            char n[48];
            snprintf(n, sizeof n, "mlp.experts.%d", e);
            add_mlp(n, l, 1408 / d, h);
        }
        add_mlp("mlp.shared_expert", l, 5632 / d, h);
        add("mlp.shared_expert_gate", l, 1, h, REP);
    }
    add("norm", -1, h, 1, REP);
    add("lm_head", -1, vocab, h, COL);
}

/* Part k of n of [0, len): [lo, hi). */
static void part(uint64_t len, int k, int n, uint64_t *lo, uint64_t *hi) {
    *lo = len * (uint64_t)k / (uint64_t)n;
    *hi = len * (uint64_t)(k + 1) / (uint64_t)n;
}

/* Element `i` (row-major index in the whole tensor) of tensor `t` in version `v`. */
static uint16_t value(int v, size_t t, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)t << 32 | (uint64_t)v);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return (uint16_t)(x ^ (x >> 29));
}

/* Bytes of tensor t that trainer k holds (rows lo..hi), and rank r (its TP slice). */
static uint64_t trainer_bytes(const tensor *t, int k) {
    uint64_t lo, hi;
    part(t->rows, k, trainers, &lo, &hi);
    return (hi - lo) * t->cols * 2;
}
static uint64_t rank_bytes(const tensor *t, int r) {
    uint64_t lo, hi;
    if (t->split == REP) return t->rows * t->cols * 2;
    part(t->split == COL ? t->rows : t->cols, r, ranks, &lo, &hi);
    return (hi - lo) * (t->split == COL ? t->cols : t->rows) * 2;
}

/* Where each tensor starts in a trainer's and in each rank's buffer. */
static uint64_t *toff, *roff; /* [nts], [ranks * nts] */
static uint64_t tlen, *rlen;
static void layout(int k) {
    toff = calloc(nts, 8), roff = calloc((size_t)ranks * nts, 8), rlen = calloc((size_t)ranks, 8), tlen = 0;
    for (size_t i = 0; i < nts; i++) toff[i] = tlen, tlen += trainer_bytes(&ts[i], k);
    for (int r = 0; r < ranks; r++)
        for (size_t i = 0; i < nts; i++) roff[r * nts + i] = rlen[r], rlen[r] += rank_bytes(&ts[i], r);
}

/* One routing entry: a contiguous range (rows == 0), or `rows` pages of
 * `len` bytes: source stride `sstride`, destination stride `dstride`. */
typedef struct {
    int rank;
    uint64_t src, dst, len, rows, sstride, dstride;
} route;

/* Trainer k's routing table: its shard of every tensor, onto every rank. */
static route *routes(int k, size_t *n) {
    route *rt = NULL;
    size_t cap = 0;
    *n = 0;
#define PUSH(...)                                                                    \
    do {                                                                             \
        if (*n == cap) rt = realloc(rt, (cap = cap ? 2 * cap : 256) * sizeof *rt);   \
        rt[(*n)++] = (route){__VA_ARGS__};                                           \
    } while (0)
    for (size_t i = 0; i < nts; i++) {
        const tensor *t = &ts[i];
        uint64_t a, b, row = t->cols * 2;
        part(t->rows, k, trainers, &a, &b);
        for (int r = 0; r < ranks && b > a; r++) {
            uint64_t src = toff[i], dst = roff[r * nts + i], lo, hi;
            if (t->split == REP) {
                PUSH(.rank = r, .src = src, .dst = dst + a * row, .len = (b - a) * row);
            } else if (t->split == COL) {
                part(t->rows, r, ranks, &lo, &hi);
                uint64_t s = a > lo ? a : lo, e = b < hi ? b : hi;
                if (e > s) PUSH(.rank = r, .src = src + (s - a) * row, .dst = dst + (s - lo) * row, .len = (e - s) * row);
            } else { /* ROW: rows a..b, columns lo..hi of each */
                part(t->cols, r, ranks, &lo, &hi);
                uint64_t slice = (hi - lo) * 2;
                PUSH(.rank = r, .src = src + lo * 2, .dst = dst + a * slice, .len = slice, .rows = b - a,
                     .sstride = row, .dstride = slice);
            }
        }
    }
#undef PUSH
    return rt;
}

/* Coordinator <-> child messages. */
typedef struct {
    /* 'R' ready, 'V' verified (rank); 'J' join (a rank's descriptor
     * follows; `version` is its slot), 'G' go, 'P' proceed (`mask`: the
     * ranks killed since go) to a trainer; 'S' submitted, 'D' done from it. */
    int kind;
    int version;
    double secs;
    uint64_t bad;  /* bytes that differ (rank); writes to live ranks that failed (trainer) */
    uint64_t mask; /* 'P': dead ranks; 'D': writes to dead ranks that failed */
} msg;
static void put_msg(int fd, msg m) { oob_xfer(fd, &m, sizeof m, 1); }
static msg get_msg(int fd) {
    msg m;
    oob_xfer(fd, &m, sizeof m, 0);
    return m;
}

/* T + R engines share this machine's cores with the fills and checks:
 * their workers sleep when idle rather than spin (the default spins a core
 * each, and an engine starved of CPU for the peer timeout is taken for dead
 * by its peers). */
#define IDLE FABRICLIB_IDLE_BLOCK

static uint32_t imm_of(int v) { return 0x52000000u | (uint32_t)v; }

/* Inference rank r: its tensor-parallel buffers; checks every version. */
static int rank_main(int r, int fd) {
    fabriclib_engine *e = example_engine(provider, IDLE);
    layout(0);
    uint8_t *buf = calloc(1, rlen[r]), blob[FABRICLIB_MAX_DESCRIPTOR_LEN];
    fabriclib_mr *mr;
    size_t n;
    CHECK(fabriclib_mr_register(e, buf, rlen[r], &mr));
    CHECK(fabriclib_mr_descriptor(mr, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    for (int v = first_version; v <= versions; v++) {
        uint32_t flag = 0;
        fabriclib_submit_opts o = {.struct_size = sizeof o, .flag = &flag};
        CHECK(fabriclib_expect_imm_count(e, imm_of(v), (uint32_t)trainers, &o, NULL));
        put_msg(fd, (msg){.kind = 'R', .version = v});
        CHECK(fabriclib_engine_flag_await(e, &flag, FABRICLIB_NO_TIMEOUT, NULL));
        uint64_t bad = (flag & FABRICLIB_FLAG_STATUS_MASK) ? rlen[r] : 0;
        for (size_t i = 0; i < nts && !bad; i++) {
            const tensor *t = &ts[i];
            const uint16_t *p = (const uint16_t *)(buf + roff[r * nts + i]);
            uint64_t lo = 0, hi = 0, r0 = 0, r1 = t->rows, c0 = 0, c1 = t->cols;
            if (t->split == COL) part(t->rows, r, ranks, &lo, &hi), r0 = lo, r1 = hi;
            if (t->split == ROW) part(t->cols, r, ranks, &lo, &hi), c0 = lo, c1 = hi;
            for (uint64_t y = r0; y < r1; y++)
                for (uint64_t x = c0; x < c1; x++) bad += *p++ != value(v, i, y * t->cols + x);
        }
        put_msg(fd, (msg){.kind = 'V', .version = v, .bad = bad});
    }
    fabriclib_mr_deregister(mr);
    fabriclib_engine_destroy(e);
    free(buf);
    return 0;
}

/* Trainer k: its FSDP shard, pushed to every rank each version. */
static int trainer_main(int k, int fd) {
    fabriclib_engine *e = example_engine(provider, IDLE);
    layout(k);
    uint8_t *buf = malloc(tlen ? tlen : 1), blob[FABRICLIB_MAX_DESCRIPTOR_LEN];
    fabriclib_mr *mr;
    fabriclib_remote_mr **dst = calloc((size_t)ranks, sizeof *dst);
    CHECK(fabriclib_mr_register(e, buf, tlen, &mr));
    for (int r = 0; r < ranks; r++) CHECK(fabriclib_remote_mr_parse(blob, oob_get_blob(fd, blob, sizeof blob), &dst[r]));
    fabriclib_caps caps = {.struct_size = sizeof caps};
    CHECK(fabriclib_engine_caps(e, &caps));
    double t0 = example_now();
    size_t nr;
    route *rt = routes(k, &nr);
    double built = example_now() - t0;
    if (k == 0) printf("trainer 0: routing table of %zu entries (%zu bytes) built in %.2f ms\n", nr, nr * sizeof *rt, built * 1e3);
    /* Per rank: one scatter of every contiguous range (cut to the largest
     * work request), and the paged writes of the row-parallel slices. */
    fabriclib_scatter_dst *sc = malloc((nr + tlen / caps.max_msg_size + 1) * sizeof *sc);
    uint32_t *idx = NULL;
    uint64_t most_rows = 0;
    for (size_t i = 0; i < nr; i++) most_rows = rt[i].rows > most_rows ? rt[i].rows : most_rows;
    idx = malloc((most_rows + 1) * sizeof *idx);
    for (uint64_t i = 0; i < most_rows; i++) idx[i] = (uint32_t)i;
    uint32_t *flags = calloc(nr + (size_t)ranks + 1, sizeof *flags);
    int *flag_rank = calloc(nr + (size_t)ranks + 1, sizeof *flag_rank);
    for (int v = 1; v <= versions; v++) {
        msg go = get_msg(fd);
        for (; go.kind == 'J'; go = get_msg(fd)) { /* a new rank in slot go.version: its descriptor is all it takes */
            fabriclib_remote_mr_free(dst[go.version]);
            CHECK(fabriclib_remote_mr_parse(blob, oob_get_blob(fd, blob, sizeof blob), &dst[go.version]));
        }
        if (go.kind != 'G' || go.version != v) { fprintf(stderr, "trainer %d: out of step\n", k); return 1; }
        for (size_t i = 0; i < nts; i++) { /* this version's shard */
            uint64_t a, b;
            part(ts[i].rows, k, trainers, &a, &b);
            uint16_t *p = (uint16_t *)(buf + toff[i]);
            for (uint64_t j = a * ts[i].cols; j < b * ts[i].cols; j++) *p++ = value(v, i, j);
        }
        double t = example_now();
        size_t nf = 0;
        memset(flags, 0, (nr + (size_t)ranks + 1) * sizeof *flags);
        for (int r = 0; r < ranks; r++) {
            size_t ns = 0;
            for (size_t i = 0; i < nr; i++) {
                const route *x = &rt[i];
                if (x->rank != r) continue;
                fabriclib_submit_opts o = {.struct_size = sizeof o, .flag = &flags[nf], .flags = FABRICLIB_SUBMIT_DELIVERED};
                if (x->rows) {
                    fabriclib_pages sp = {idx, x->rows, x->sstride, x->src}, dp = {idx, x->rows, x->dstride, x->dst};
                    CHECK(fabriclib_submit_paged_writes(e, x->len, NULL, mr, &sp, dst[r], &dp, &o, NULL));
                    flag_rank[nf++] = r;
                    continue;
                }
                for (uint64_t off = 0; off < x->len; off += caps.max_msg_size) {
                    uint64_t len = x->len - off < caps.max_msg_size ? x->len - off : caps.max_msg_size;
                    sc[ns++] = (fabriclib_scatter_dst){len, x->src + off, dst[r], x->dst + off};
                }
            }
            if (ns) {
                fabriclib_submit_opts o = {.struct_size = sizeof o, .flag = &flags[nf], .flags = FABRICLIB_SUBMIT_DELIVERED};
                CHECK(fabriclib_submit_scatter(e, 0, NULL, mr, sc, ns, &o, NULL));
                flag_rank[nf++] = r;
            }
        }
        /* Everything is on its way; the coordinator may kill a rank now. */
        put_msg(fd, (msg){.kind = 'S', .version = v});
        msg go_on = get_msg(fd);
        uint64_t dead = go_on.mask, live_failed = 0, dead_failed = 0;
        for (size_t i = 0; i < nf; i++) {
            CHECK(fabriclib_engine_flag_await(e, &flags[i], FABRICLIB_NO_TIMEOUT, NULL));
            fabriclib_status st = (fabriclib_status)(flags[i] & FABRICLIB_FLAG_STATUS_MASK);
            if (st && (dead >> flag_rank[i] & 1) && st == FABRICLIB_STATUS_PEER_DOWN) dead_failed++;
            else if (st) {
                fprintf(stderr, "trainer %d: a write to rank %d ended %s\n", k, flag_rank[i], fabriclib_status_str(st));
                live_failed++;
            }
        }
        /* Every byte to a live rank delivered: one barrier tells each. */
        for (int r = 0; r < ranks; r++) {
            if (dead >> r & 1) continue;
            uint32_t bar = 0;
            fabriclib_submit_opts o = {.struct_size = sizeof o, .flag = &bar};
            CHECK(fabriclib_submit_barrier(e, 0, imm_of(v), (fabriclib_remote_mr_list)&dst[r], 1, &o, NULL));
            CHECK(fabriclib_engine_flag_await(e, &bar, FABRICLIB_NO_TIMEOUT, NULL));
            live_failed += (bar & FABRICLIB_FLAG_STATUS_MASK) != 0;
        }
        put_msg(fd, (msg){.kind = 'D', .version = v, .secs = example_now() - t, .bad = live_failed, .mask = dead_failed});
    }
    for (int r = 0; r < ranks; r++) fabriclib_remote_mr_free(dst[r]);
    fabriclib_mr_deregister(mr);
    fabriclib_engine_destroy(e);
    return 0;
}

/* libfabric's shm provider leaves a killed process's region in /dev/shm
 * ("<pid>:..."); the coordinator that killed it removes it. */
static void remove_shm_leftovers(pid_t pid) {
    char prefix[32], path[300];
    snprintf(prefix, sizeof prefix, "%d:", (int)pid);
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
}

static pid_t spawn(int (*fn)(int, int), int who, int *fd) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) { perror("socketpair"); exit(1); }
    fflush(NULL); /* else the child writes what is buffered (stdout, --json) again */
    pid_t pid = fork(); /* before any fabriclib call in this process */
    if (pid == 0) {
        close(sv[0]);
        exit(fn(who, sv[1]));
    }
    close(sv[1]);
    *fd = sv[0];
    return pid;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "demo")) {
        fprintf(stderr, "usage: %s demo [--trainers T] [--ranks R] [--model dense|moe] [--scale D] [--versions V] [--provider P] [--elastic V] [--json FILE]\n", argv[0]);
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--trainers")) trainers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--versions")) versions = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--scale")) scale = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--elastic")) kill_version = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--json")) json_path = argv[i + 1];
        else if (!strcmp(argv[i], "--provider")) provider = !strcmp(argv[i + 1], "tcp") ? "tcp;ofi_rxm" : argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (trainers < 1 || ranks < 1 || ranks > 64 || versions < 1 || scale < 1 || kill_version < 0 ||
        (kill_version && (ranks < 2 || kill_version >= versions)) || (strcmp(model, "dense") && strcmp(model, "moe"))) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    build_model();
    uint64_t total = 0;
    for (size_t i = 0; i < nts; i++) total += ts[i].rows * ts[i].cols * 2;
    printf("%s model / %d: %zu tensors, %.1f MiB; %d trainers (FSDP) -> %d inference ranks (TP), %s\n", model, scale,
           nts, total / 1048576.0, trainers, ranks, provider);
    int *rfd = calloc((size_t)ranks, sizeof *rfd), *tfd = calloc((size_t)trainers, sizeof *tfd);
    pid_t *pids = calloc((size_t)(ranks + trainers), sizeof *pids);
    for (int r = 0; r < ranks; r++) pids[r] = spawn(rank_main, r, &rfd[r]);
    for (int k = 0; k < trainers; k++) pids[ranks + k] = spawn(trainer_main, k, &tfd[k]);
    uint8_t blob[FABRICLIB_MAX_DESCRIPTOR_LEN];
    for (int r = 0; r < ranks; r++) {
        size_t n = oob_get_blob(rfd[r], blob, sizeof blob);
        for (int k = 0; k < trainers; k++) oob_put_blob(tfd[k], blob, n);
    }
    /* The routing tables, as each trainer builds them (for the report). */
    size_t entries = 0;
    double table_ms = 0;
    for (int k = 0; k < trainers; k++) {
        size_t nr;
        layout(k);
        double t0 = example_now();
        free(routes(k, &nr));
        double ms = (example_now() - t0) * 1e3;
        entries += nr, table_ms = ms > table_ms ? ms : table_ms;
    }
    FILE *js = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !js) { perror(json_path); return 2; }
    if (js)
        fprintf(js, "{\"model\": \"%s\", \"scale\": %d, \"bytes\": %llu, \"tensors\": %zu, \"trainers\": %d, \"ranks\": %d, "
                    "\"provider\": \"%s\", \"routing_entries\": %zu, \"routing_bytes\": %zu, \"routing_build_ms\": %.3f, \"versions\": [",
                model, scale, (unsigned long long)total, nts, trainers, ranks, provider, entries, entries * sizeof(route), table_ms);
    int failed = 0, last = ranks - 1;
    uint64_t dead = 0;
    for (int v = 1; v <= versions; v++) {
        if (dead) { /* a new rank takes the killed one's slot: its descriptor is all the trainers need */
            first_version = v;
            close(rfd[last]);
            pids[last] = spawn(rank_main, last, &rfd[last]);
            size_t n = oob_get_blob(rfd[last], blob, sizeof blob);
            for (int k = 0; k < trainers; k++) put_msg(tfd[k], (msg){.kind = 'J', .version = last}), oob_put_blob(tfd[k], blob, n);
            dead = 0;
        }
        for (int r = 0; r < ranks; r++) failed |= get_msg(rfd[r]).kind != 'R';
        for (int k = 0; k < trainers; k++) put_msg(tfd[k], (msg){.kind = 'G', .version = v});
        for (int k = 0; k < trainers; k++) failed |= get_msg(tfd[k]).kind != 'S';
        if (v == kill_version) { /* mid-push: every write is submitted, some are on the wire */
            int st;
            kill(pids[last], SIGKILL);
            waitpid(pids[last], &st, 0);
            remove_shm_leftovers(pids[last]);
            dead = 1ull << last;
        }
        for (int k = 0; k < trainers; k++) put_msg(tfd[k], (msg){.kind = 'P', .version = v, .mask = dead});
        double slowest = 0;
        uint64_t dead_failed = 0;
        for (int k = 0; k < trainers; k++) {
            msg m = get_msg(tfd[k]);
            failed |= m.kind != 'D' || m.bad;
            slowest = m.secs > slowest ? m.secs : slowest;
            dead_failed += m.mask;
        }
        uint64_t bad = 0;
        for (int r = 0; r < ranks; r++) {
            if (dead >> r & 1) continue;
            msg m = get_msg(rfd[r]);
            failed |= m.kind != 'V';
            bad += m.bad;
        }
        failed |= bad != 0;
        printf("version %d: pushed in %.1f ms (%.2f GB/s per trainer), %s", v, slowest * 1e3,
               total / (double)trainers / slowest / 1e9, bad ? "BYTES DIFFER" : "every byte verified on every live rank");
        if (dead) printf("; rank %d killed mid-push: %llu of its writes ended PEER_DOWN, none to another rank failed", last,
                         (unsigned long long)dead_failed);
        if (v > 1 && v == kill_version + 1) printf("; a new rank %d joined by its descriptor", last);
        printf("\n");
        if (js)
            fprintf(js, "%s{\"version\": %d, \"push_ms\": %.3f, \"gbps_per_trainer\": %.4f, \"verified\": %s, \"killed_rank\": %d, "
                        "\"dead_rank_writes_failed\": %llu}", v > 1 ? ", " : "", v, slowest * 1e3,
                    total / (double)trainers / slowest / 1e9, bad ? "false" : "true", dead ? last : -1,
                    (unsigned long long)dead_failed);
    }
    for (int i = 0; i < ranks + trainers; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    if (js) fprintf(js, "], \"ok\": %s}\n", failed ? "false" : "true"), fclose(js);
    printf("%s\n", failed ? "FAILED" : "ok");
    return failed;
}
