/* rl_model.h: rl_weight_push's model, its two layouts and the routing
 * table between them (one translation unit includes it).
 *
 * The parameter list is a real architecture's (dense: Llama-3-8B's shapes;
 * moe: Qwen1.5-MoE-A2.7B's, 60 experts), every dimension but the counts
 * divided by the scale so that it fits the machine; weights are [out, in]
 * row-major bf16. Trainers hold it sharded the FSDP way (every tensor's
 * rows split over T); inference ranks need it tensor-parallel over R (q, k,
 * v, gate, up, embeddings and the head split by rows — column-parallel; o
 * and down split by columns — row-parallel; norms and routers replicated). */
#ifndef FABRICLIB_RL_MODEL_H
#define FABRICLIB_RL_MODEL_H
#include <fabriclib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What every process of a run agrees on (sent to ranks on other hosts as it is). */
typedef struct {
    int trainers, ranks, versions, scale;
    int kill_version; /* --elastic V: the last rank is killed once version V is submitted (0: never) */
    int raw;          /* the raw baseline pass after every version */
    int idle;         /* the engines' idle policy (FABRICLIB_IDLE_*) */
    char model[8], provider[32];
} options;
static options opt = {.trainers = 2, .ranks = 2, .versions = 3, .scale = 16, .raw = 1, .idle = FABRICLIB_IDLE_BLOCK, .model = "dense", .provider = "tcp;ofi_rxm"};

enum split { COL, ROW, REP }; /* tensor-parallel: by rows, by columns, replicated */
typedef struct {
    char name[96];
    uint64_t rows, cols;
    enum split split;
} tensor;
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

/* The parameter list. dense: Llama-3-8B; moe: Qwen1.5-MoE-A2.7B (60 routed
 * experts, a shared expert, a router). */
static void build_model(void) {
    uint64_t d = (uint64_t)opt.scale;
    int dense = !strcmp(opt.model, "dense");
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
    part(t->rows, k, opt.trainers, &lo, &hi);
    return (hi - lo) * t->cols * 2;
}
static uint64_t rank_bytes(const tensor *t, int r) {
    uint64_t lo, hi;
    if (t->split == REP) return t->rows * t->cols * 2;
    part(t->split == COL ? t->rows : t->cols, r, opt.ranks, &lo, &hi);
    return (hi - lo) * (t->split == COL ? t->cols : t->rows) * 2;
}

/* Where each tensor starts in a trainer's and in each rank's buffer. */
static uint64_t *toff, *roff; /* [nts], [ranks * nts] */
static uint64_t tlen, *rlen;
static void layout(int k) {
    free(toff), free(roff), free(rlen);
    toff = calloc(nts, 8), roff = calloc((size_t)opt.ranks * nts, 8), rlen = calloc((size_t)opt.ranks, 8), tlen = 0;
    for (size_t i = 0; i < nts; i++) toff[i] = tlen, tlen += trainer_bytes(&ts[i], k);
    for (int r = 0; r < opt.ranks; r++)
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
        part(t->rows, k, opt.trainers, &a, &b);
        for (int r = 0; r < opt.ranks && b > a; r++) {
            uint64_t src = toff[i], dst = roff[r * nts + i], lo, hi;
            if (t->split == REP) {
                PUSH(.rank = r, .src = src, .dst = dst + a * row, .len = (b - a) * row);
            } else if (t->split == COL) {
                part(t->rows, r, opt.ranks, &lo, &hi);
                uint64_t s = a > lo ? a : lo, e = b < hi ? b : hi;
                if (e > s) PUSH(.rank = r, .src = src + (s - a) * row, .dst = dst + (s - lo) * row, .len = (e - s) * row);
            } else { /* ROW: rows a..b, columns lo..hi of each */
                part(t->cols, r, opt.ranks, &lo, &hi);
                uint64_t slice = (hi - lo) * 2;
                PUSH(.rank = r, .src = src + lo * 2, .dst = dst + a * slice, .len = slice, .rows = b - a,
                     .sstride = row, .dstride = slice);
            }
        }
    }
#undef PUSH
    return rt;
}

/* What a trainer sends one rank each version, as requests: the contiguous
 * ranges as one scatter (cut to the largest work request), and the pages
 * of the row-parallel slices as one paged write per page length (a row's
 * slice is a page; every tensor's pages of that length in one request:
 * page offsets count 2-byte elements, stride 2, so any offset fits). */
typedef struct {
    uint64_t len;
    size_t n;
    uint32_t *src, *dst;
} page_run;
typedef struct {
    fabriclib_scatter_dst *ranges; /* .dst is set when the rank's descriptor is parsed */
    size_t nranges;
    page_run *runs;
    size_t nruns;
    uint64_t bytes; /* the plan's size: ranges and page indices */
} rank_plan;

static rank_plan *plan(const route *rt, size_t nr, uint64_t max_msg) {
    rank_plan *p = calloc((size_t)opt.ranks, sizeof *p);
    uint64_t most = tlen;
    for (int r = 0; r < opt.ranks; r++) most = rlen[r] > most ? rlen[r] : most;
    if (most / 2 > UINT32_MAX) {
        fprintf(stderr, "a buffer over 8 GiB: page offsets do not fit 32 bits (raise --scale)\n");
        exit(2);
    }
    for (size_t i = 0; i < nr; i++) {
        const route *x = &rt[i];
        rank_plan *q = &p[x->rank];
        if (!x->rows) {
            for (uint64_t off = 0; off < x->len; off += max_msg) {
                q->ranges = realloc(q->ranges, (q->nranges + 1) * sizeof *q->ranges);
                uint64_t len = x->len - off < max_msg ? x->len - off : max_msg;
                q->ranges[q->nranges++] = (fabriclib_scatter_dst){len, x->src + off, NULL, x->dst + off};
            }
            continue;
        }
        size_t j = 0;
        while (j < q->nruns && q->runs[j].len != x->len) j++;
        if (j == q->nruns) {
            q->runs = realloc(q->runs, (q->nruns + 1) * sizeof *q->runs);
            q->runs[q->nruns++] = (page_run){.len = x->len};
        }
        page_run *u = &q->runs[j];
        u->src = realloc(u->src, (u->n + x->rows) * 4), u->dst = realloc(u->dst, (u->n + x->rows) * 4);
        for (uint64_t y = 0; y < x->rows; y++, u->n++) {
            u->src[u->n] = (uint32_t)((x->src + y * x->sstride) / 2);
            u->dst[u->n] = (uint32_t)((x->dst + y * x->dstride) / 2);
        }
    }
    for (int r = 0; r < opt.ranks; r++) {
        p[r].bytes = p[r].nranges * sizeof *p[r].ranges;
        for (size_t j = 0; j < p[r].nruns; j++) p[r].bytes += p[r].runs[j].n * 8 + sizeof(page_run);
    }
    return p;
}

static void plan_free(rank_plan *p) {
    for (int r = 0; r < opt.ranks; r++) {
        for (size_t j = 0; j < p[r].nruns; j++) free(p[r].runs[j].src), free(p[r].runs[j].dst);
        free(p[r].runs), free(p[r].ranges);
    }
    free(p);
}
#endif
