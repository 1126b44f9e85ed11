/* rl_weight_push: push a model's weights from T trainer processes to R
 * inference processes after every training step, the paper's way: each
 * trainer writes its own shard straight into every inference rank's
 * parameter buffers (no gather, no broadcast tree), and one barrier per
 * trainer marks the version complete.
 *
 *   rl_weight_push demo [--trainers T] [--ranks R] [--model dense|moe]
 *                       [--scale D] [--versions V] [--provider P] [--elastic V]
 *                       [--no-raw] [--json FILE] [--bind ADDR] [--connect ADDR:PORT]
 *   rl_weight_push ranks --listen ADDR:PORT [--bind ADDR]
 *
 * The model and the two layouts are in rl_model.h. A routing table computed
 * once from both layouts turns each trainer's shard into, per rank, one
 * scatter of contiguous ranges and one paged write per row-parallel slice
 * length. Every version fills the shards with f(version, tensor, element);
 * every rank checks every byte of every version.
 *
 * After each version the same writes go again through raw libfabric
 * (raw_fabric.h: no engine, the same processes, buffers and provider) into
 * zeroed buffers, checked again: the baseline the push is measured against,
 * in the same run (--no-raw: skip it; never with --elastic or verbs).
 *
 * A coordinator (this process) forks the trainers and, unless --connect
 * names a `ranks` process on another host, the ranks; it passes addresses,
 * descriptors and the lockstep of versions over sockets.
 *
 * --elastic V: once every write of version V is submitted, the last rank is
 * killed (SIGKILL). Only the writes to it may fail (PEER_DOWN); every other
 * rank still checks every byte. For version V + 1 a new rank starts in its
 * slot, and the trainers write to it after parsing its descriptor: nothing
 * else is exchanged. */
#include <fabriclib.h>
#include "example_util.h"
#include "raw_fabric.h"
#include "rl_model.h"
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *json_path; /* --json FILE: what is printed, as JSON */
static const char *bind_addr; /* --bind ADDR: this host's address for the engines (default 127.0.0.1) */
static int first_version = 1; /* a rank that joins later starts there */

/* Coordinator <-> child messages. */
typedef struct {
    /* 'R' ready, 'V' verified (rank); 'J' join (a rank's descriptor
     * follows; `version` is its slot), 'G' go, 'P' proceed (`mask`: the
     * ranks killed since go) to a trainer; 'S' submitted, 'D' done from it.
     * The raw pass: 'Z' zero your buffer (rank; it answers 'R'), 'X' push
     * (trainer; it answers 'D'). */
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

static uint32_t imm_of(int v) { return 0x52000000u | (uint32_t)v; }

/* Bytes of rank r's buffer that differ from version v. */
static uint64_t check(int r, int v, const uint8_t *buf) {
    uint64_t bad = 0;
    for (size_t i = 0; i < nts; i++) {
        const tensor *t = &ts[i];
        const uint16_t *p = (const uint16_t *)(buf + roff[r * nts + i]);
        uint64_t lo = 0, hi = 0, r0 = 0, r1 = t->rows, c0 = 0, c1 = t->cols;
        if (t->split == COL) part(t->rows, r, opt.ranks, &lo, &hi), r0 = lo, r1 = hi;
        if (t->split == ROW) part(t->cols, r, opt.ranks, &lo, &hi), c0 = lo, c1 = hi;
        for (uint64_t y = r0; y < r1; y++)
            for (uint64_t x = c0; x < c1; x++) bad += *p++ != value(v, i, y * t->cols + x);
    }
    return bad;
}

/* Inference rank r: its tensor-parallel buffers; checks every version. */
static int rank_main(int r, int fd) {
    fabriclib_engine *e = example_engine(opt.provider, bind_addr, (fabriclib_idle)opt.idle);
    layout(0);
    uint8_t *buf = calloc(1, rlen[r]), blob[FABRICLIB_MAX_DESCRIPTOR_LEN];
    fabriclib_mr *mr;
    size_t n;
    CHECK(fabriclib_mr_register(e, buf, rlen[r], &mr));
    CHECK(fabriclib_mr_descriptor(mr, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    raw_ep *raw = NULL;
    if (opt.raw) { /* the baseline's endpoint on the same buffer */
        raw = raw_open(opt.provider, bind_addr ? bind_addr : "127.0.0.1");
        raw_register(raw, buf, rlen[r]);
        oob_xfer(fd, &raw->self, sizeof raw->self, 1);
    }
    for (int v = first_version; v <= opt.versions; v++) {
        uint32_t flag = 0;
        fabriclib_submit_opts o = {.struct_size = sizeof o, .flag = &flag};
        CHECK(fabriclib_expect_imm_count(e, imm_of(v), (uint32_t)opt.trainers, &o, NULL));
        put_msg(fd, (msg){.kind = 'R', .version = v});
        CHECK(fabriclib_engine_flag_await(e, &flag, FABRICLIB_NO_TIMEOUT, NULL));
        uint64_t bad = (flag & FABRICLIB_FLAG_STATUS_MASK) ? rlen[r] : check(r, v, buf);
        put_msg(fd, (msg){.kind = 'V', .version = v, .bad = bad});
        if (!raw) continue;
        msg z = get_msg(fd); /* the raw pass: the same bytes again, into a zeroed buffer */
        if (z.kind != 'Z' || z.version != v) { fprintf(stderr, "rank %d: out of step\n", r); return 1; }
        memset(buf, 0, rlen[r]);
        put_msg(fd, (msg){.kind = 'R', .version = v});
        raw_wait_imm(raw, imm_of(v), (uint64_t)opt.trainers);
        put_msg(fd, (msg){.kind = 'V', .version = v, .bad = check(r, v, buf)});
    }
    if (raw) raw_close(raw);
    fabriclib_mr_deregister(mr);
    fabriclib_engine_destroy(e);
    free(buf);
    return 0;
}

/* The raw pass of trainer k: every write of its plan straight through
 * libfabric, then one zero-byte write with the version's immediate to each
 * rank once all have completed. Returns the seconds it took. */
static double raw_push(raw_ep *raw, const uint8_t *buf, const rank_plan *p, const fi_addr_t *peer, const raw_remote *rr,
                       int v) {
    double t = example_now();
    uint32_t imm = imm_of(v);
    for (int r = 0; r < opt.ranks; r++) {
        for (size_t i = 0; i < p[r].nranges; i++) {
            const fabriclib_scatter_dst *d = &p[r].ranges[i];
            raw_write(raw, buf + d->src_offset, d->len, peer[r], &rr[r], d->dst_offset, NULL);
        }
        for (size_t j = 0; j < p[r].nruns; j++)
            for (size_t i = 0; i < p[r].runs[j].n; i++)
                raw_write(raw, buf + 2 * (uint64_t)p[r].runs[j].src[i], p[r].runs[j].len, peer[r], &rr[r],
                          2 * (uint64_t)p[r].runs[j].dst[i], NULL);
    }
    raw_drain(raw);
    for (int r = 0; r < opt.ranks; r++) raw_write(raw, buf, 0, peer[r], &rr[r], 0, &imm);
    raw_drain(raw);
    return example_now() - t;
}

/* Trainer k: its FSDP shard, pushed to every rank each version. */
static int trainer_main(int k, int fd) {
    fabriclib_engine *e = example_engine(opt.provider, bind_addr, (fabriclib_idle)opt.idle);
    layout(k);
    uint8_t *buf = malloc(tlen ? tlen : 1), blob[FABRICLIB_MAX_DESCRIPTOR_LEN];
    fabriclib_mr *mr;
    fabriclib_remote_mr **dst = calloc((size_t)opt.ranks, sizeof *dst);
    CHECK(fabriclib_mr_register(e, buf, tlen, &mr));
    fabriclib_caps caps = {.struct_size = sizeof caps};
    CHECK(fabriclib_engine_caps(e, &caps));
    size_t nr;
    route *rt = routes(k, &nr);
    rank_plan *p = plan(rt, nr, caps.max_msg_size);
    for (int r = 0; r < opt.ranks; r++) {
        CHECK(fabriclib_remote_mr_parse(blob, oob_get_blob(fd, blob, sizeof blob), &dst[r]));
        for (size_t i = 0; i < p[r].nranges; i++) p[r].ranges[i].dst = dst[r];
    }
    raw_ep *raw = NULL;
    raw_remote rr[64]; /* (at most 64 ranks) */
    fi_addr_t peer[64];
    if (opt.raw) {
        raw = raw_open(opt.provider, bind_addr ? bind_addr : "127.0.0.1");
        raw_register(raw, buf, tlen);
        for (int r = 0; r < opt.ranks; r++) oob_xfer(fd, &rr[r], sizeof rr[r], 0), peer[r] = raw_insert(raw, &rr[r]);
    }
    size_t most = 0;
    for (int r = 0; r < opt.ranks; r++) most += 1 + p[r].nruns;
    uint32_t *flags = calloc(most, sizeof *flags);
    int *flag_rank = calloc(most, sizeof *flag_rank);
    for (int v = 1; v <= opt.versions; v++) {
        msg go = get_msg(fd);
        for (; go.kind == 'J'; go = get_msg(fd)) { /* a new rank in slot go.version: its descriptor is all it takes */
            int r = go.version;
            fabriclib_remote_mr_free(dst[r]);
            CHECK(fabriclib_remote_mr_parse(blob, oob_get_blob(fd, blob, sizeof blob), &dst[r]));
            for (size_t i = 0; i < p[r].nranges; i++) p[r].ranges[i].dst = dst[r];
        }
        if (go.kind != 'G' || go.version != v) { fprintf(stderr, "trainer %d: out of step\n", k); return 1; }
        for (size_t i = 0; i < nts; i++) { /* this version's shard */
            uint64_t a, b;
            part(ts[i].rows, k, opt.trainers, &a, &b);
            uint16_t *q = (uint16_t *)(buf + toff[i]);
            for (uint64_t j = a * ts[i].cols; j < b * ts[i].cols; j++) *q++ = value(v, i, j);
        }
        double t = example_now();
        size_t nf = 0;
        memset(flags, 0, most * sizeof *flags);
        for (int r = 0; r < opt.ranks; r++) { /* every request DELIVERED: the barrier may follow them */
            fabriclib_submit_opts o = {.struct_size = sizeof o, .flags = FABRICLIB_SUBMIT_DELIVERED};
            for (size_t j = 0; j < p[r].nruns; j++) {
                const page_run *u = &p[r].runs[j];
                fabriclib_pages sp = {u->src, u->n, 2, 0}, dp = {u->dst, u->n, 2, 0};
                o.flag = &flags[nf], flag_rank[nf++] = r;
                CHECK(fabriclib_submit_paged_writes(e, u->len, NULL, mr, &sp, dst[r], &dp, &o, NULL));
            }
            if (p[r].nranges) {
                o.flag = &flags[nf], flag_rank[nf++] = r;
                CHECK(fabriclib_submit_scatter(e, 0, NULL, mr, p[r].ranges, p[r].nranges, &o, NULL));
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
        for (int r = 0; r < opt.ranks; r++) {
            if (dead >> r & 1) continue;
            uint32_t bar = 0;
            fabriclib_submit_opts o = {.struct_size = sizeof o, .flag = &bar};
            CHECK(fabriclib_submit_barrier(e, 0, imm_of(v), (fabriclib_remote_mr_list)&dst[r], 1, &o, NULL));
            CHECK(fabriclib_engine_flag_await(e, &bar, FABRICLIB_NO_TIMEOUT, NULL));
            live_failed += (bar & FABRICLIB_FLAG_STATUS_MASK) != 0;
        }
        put_msg(fd, (msg){.kind = 'D', .version = v, .secs = example_now() - t, .bad = live_failed, .mask = dead_failed});
        if (!raw) continue;
        msg x = get_msg(fd);
        if (x.kind != 'X' || x.version != v) { fprintf(stderr, "trainer %d: out of step\n", k); return 1; }
        put_msg(fd, (msg){.kind = 'D', .version = v, .secs = raw_push(raw, buf, p, peer, rr, v)});
    }
    if (raw) raw_close(raw);
    plan_free(p), free(rt);
    for (int r = 0; r < opt.ranks; r++) fabriclib_remote_mr_free(dst[r]);
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

/* `ranks --listen ADDR:PORT`: the inference ranks of a run whose
 * coordinator is on another host. Each connection names its rank and
 * carries the run's options; the rank runs as in a local run. */
static int ranks_main(const char *listen_at) {
    int ls = oob_listen(listen_at, 0), started = 0, failed = 0;
    printf("ranks: listening on %s\n", listen_at);
    fflush(stdout);
    pid_t *pids = NULL;
    do {
        int c = accept(ls, NULL, NULL), r;
        if (c < 0) { perror("accept"); return 1; }
        oob_xfer(c, &opt, sizeof opt, 0);
        oob_xfer(c, &r, sizeof r, 0);
        if (!started) build_model();
        pids = realloc(pids, (size_t)(started + 1) * sizeof *pids);
        pids[started++] = example_spawn_on(rank_main, r, c, NULL);
    } while (started < opt.ranks);
    for (int i = 0; i < started; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    printf("ranks: %s\n", failed ? "FAILED" : "ok");
    return failed;
}

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s demo [--trainers T] [--ranks R] [--model dense|moe] [--scale D] [--versions V] [--provider P]\n"
            "               [--elastic V] [--no-raw] [--json FILE] [--bind ADDR] [--connect ADDR:PORT]\n"
            "       %s ranks --listen ADDR:PORT [--bind ADDR]\n",
            argv0, argv0);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "demo") && strcmp(argv[1], "ranks"))) return usage(argv[0]);
    const char *connect_to = NULL, *listen_at = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-raw")) { opt.raw = 0; continue; }
        if (!val) return usage(argv[0]);
        i++;
        if (!strcmp(a, "--trainers")) opt.trainers = atoi(val);
        else if (!strcmp(a, "--ranks")) opt.ranks = atoi(val);
        else if (!strcmp(a, "--versions")) opt.versions = atoi(val);
        else if (!strcmp(a, "--scale")) opt.scale = atoi(val);
        else if (!strcmp(a, "--model")) snprintf(opt.model, sizeof opt.model, "%s", val);
        else if (!strcmp(a, "--idle")) opt.idle = !strcmp(val, "spin") ? FABRICLIB_IDLE_SPIN : !strcmp(val, "auto") ? FABRICLIB_IDLE_AUTO : FABRICLIB_IDLE_BLOCK;
        else if (!strcmp(a, "--elastic")) opt.kill_version = atoi(val);
        else if (!strcmp(a, "--json")) json_path = val;
        else if (!strcmp(a, "--bind")) bind_addr = val;
        else if (!strcmp(a, "--connect")) connect_to = val;
        else if (!strcmp(a, "--listen")) listen_at = val;
        else if (!strcmp(a, "--provider")) snprintf(opt.provider, sizeof opt.provider, "%s", !strcmp(val, "tcp") ? "tcp;ofi_rxm" : val);
        else { fprintf(stderr, "unknown option %s\n", a); return 2; }
    }
    if (!strcmp(argv[1], "ranks")) return listen_at ? ranks_main(listen_at) : usage(argv[0]);
    int kv = opt.kill_version;
    if (opt.trainers < 1 || opt.ranks < 1 || opt.ranks > 64 || opt.versions < 1 || opt.scale < 1 || kv < 0 ||
        (kv && (opt.ranks < 2 || kv >= opt.versions || connect_to)) || (strcmp(opt.model, "dense") && strcmp(opt.model, "moe"))) {
        fprintf(stderr, "bad arguments (--elastic needs 2 ranks, a later version, and local ranks)\n");
        return 2;
    }
    if (kv || !strcmp(opt.provider, "verbs")) opt.raw = 0; /* the baseline is libfabric's, and needs every rank alive */
    build_model();
    uint64_t total = 0;
    for (size_t i = 0; i < nts; i++) total += ts[i].rows * ts[i].cols * 2;
    printf("%s model / %d: %zu tensors, %.1f MiB; %d trainers (FSDP) -> %d inference ranks (TP)%s, %s\n", opt.model, opt.scale,
           nts, total / 1048576.0, opt.trainers, opt.ranks, connect_to ? " on another host" : "", opt.provider);
    int R = opt.ranks, T = opt.trainers;
    int *rfd = calloc((size_t)R, sizeof *rfd), *tfd = calloc((size_t)T, sizeof *tfd);
    pid_t *pids = calloc((size_t)(R + T), sizeof *pids);
    for (int r = 0; r < R; r++) {
        if (!connect_to) {
            pids[r] = example_spawn(rank_main, r, &rfd[r]);
            continue;
        }
        rfd[r] = oob_connect_to(connect_to, 0);
        oob_xfer(rfd[r], &opt, sizeof opt, 1);
        oob_xfer(rfd[r], &r, sizeof r, 1);
        pids[r] = -1;
    }
    for (int k = 0; k < T; k++) pids[R + k] = example_spawn(trainer_main, k, &tfd[k]);
    uint8_t blob[FABRICLIB_MAX_DESCRIPTOR_LEN];
    raw_remote *rr = calloc((size_t)R, sizeof *rr);
    for (int r = 0; r < R; r++) {
        size_t n = oob_get_blob(rfd[r], blob, sizeof blob);
        if (opt.raw) oob_xfer(rfd[r], &rr[r], sizeof rr[r], 0);
        for (int k = 0; k < T; k++) oob_put_blob(tfd[k], blob, n);
    }
    for (int k = 0; k < T && opt.raw; k++) oob_xfer(tfd[k], rr, (size_t)R * sizeof *rr, 1);
    /* The routing tables, as each trainer builds them (for the report). */
    size_t entries = 0;
    uint64_t table_bytes = 0;
    double table_ms = 0;
    for (int k = 0; k < T; k++) {
        size_t nr;
        layout(k);
        double t0 = example_now();
        route *rt = routes(k, &nr);
        rank_plan *p = plan(rt, nr, 1ull << 30);
        double ms = (example_now() - t0) * 1e3;
        for (int r = 0; r < R; r++) table_bytes += p[r].bytes;
        plan_free(p), free(rt);
        entries += nr, table_ms = ms > table_ms ? ms : table_ms;
    }
    printf("routing tables: %zu entries, %.1f KiB of requests (ranges and page indices), built in %.2f ms per trainer\n",
           entries, table_bytes / 1024.0, table_ms);
    FILE *js = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !js) { perror(json_path); return 2; }
    if (js)
        fprintf(js, "{\"model\": \"%s\", \"scale\": %d, \"bytes\": %llu, \"tensors\": %zu, \"trainers\": %d, \"ranks\": %d, "
                    "\"provider\": \"%s\", \"routing_entries\": %zu, \"routing_bytes\": %llu, \"routing_build_ms\": %.3f, \"versions\": [",
                opt.model, opt.scale, (unsigned long long)total, nts, T, R, opt.provider, entries,
                (unsigned long long)table_bytes, table_ms);
    int failed = 0, last = R - 1;
    uint64_t dead = 0;
    double gbps = total / (double)T / 1e9, sum_engine = 0, sum_raw = 0;
    for (int v = 1; v <= opt.versions; v++) {
        if (dead) { /* a new rank takes the killed one's slot: its descriptor is all the trainers need */
            first_version = v;
            close(rfd[last]);
            pids[last] = example_spawn(rank_main, last, &rfd[last]);
            size_t n = oob_get_blob(rfd[last], blob, sizeof blob);
            for (int k = 0; k < T; k++) put_msg(tfd[k], (msg){.kind = 'J', .version = last}), oob_put_blob(tfd[k], blob, n);
            dead = 0;
        }
        for (int r = 0; r < R; r++) failed |= get_msg(rfd[r]).kind != 'R';
        for (int k = 0; k < T; k++) put_msg(tfd[k], (msg){.kind = 'G', .version = v});
        for (int k = 0; k < T; k++) failed |= get_msg(tfd[k]).kind != 'S';
        if (v == opt.kill_version) { /* mid-push: every write is submitted, some are on the wire */
            int st;
            kill(pids[last], SIGKILL);
            waitpid(pids[last], &st, 0);
            remove_shm_leftovers(pids[last]);
            dead = 1ull << last;
        }
        for (int k = 0; k < T; k++) put_msg(tfd[k], (msg){.kind = 'P', .version = v, .mask = dead});
        double slowest = 0, raw_slowest = 0;
        uint64_t dead_failed = 0, bad = 0, raw_bad = 0;
        for (int k = 0; k < T; k++) {
            msg m = get_msg(tfd[k]);
            failed |= m.kind != 'D' || m.bad;
            slowest = m.secs > slowest ? m.secs : slowest;
            dead_failed += m.mask;
        }
        for (int r = 0; r < R; r++) {
            if (dead >> r & 1) continue;
            msg m = get_msg(rfd[r]);
            failed |= m.kind != 'V';
            bad += m.bad;
        }
        if (opt.raw) { /* the same writes through raw libfabric, into zeroed buffers */
            for (int r = 0; r < R; r++) put_msg(rfd[r], (msg){.kind = 'Z', .version = v});
            for (int r = 0; r < R; r++) failed |= get_msg(rfd[r]).kind != 'R';
            for (int k = 0; k < T; k++) put_msg(tfd[k], (msg){.kind = 'X', .version = v});
            for (int k = 0; k < T; k++) {
                msg m = get_msg(tfd[k]);
                failed |= m.kind != 'D';
                raw_slowest = m.secs > raw_slowest ? m.secs : raw_slowest;
            }
            for (int r = 0; r < R; r++) {
                msg m = get_msg(rfd[r]);
                failed |= m.kind != 'V';
                raw_bad += m.bad;
            }
            if (v > 1 || opt.versions == 1) sum_engine += slowest, sum_raw += raw_slowest; /* version 1 also connects */
        }
        failed |= bad != 0 || raw_bad != 0;
        printf("version %d: pushed in %.1f ms (%.2f GB/s per trainer), %s", v, slowest * 1e3, gbps / slowest,
               bad ? "BYTES DIFFER" : "every byte verified on every live rank");
        if (opt.raw)
            printf("; raw libfabric %.1f ms (%.2f GB/s)%s: %.2fx raw", raw_slowest * 1e3, gbps / raw_slowest,
                   raw_bad ? " BYTES DIFFER" : ", verified", raw_slowest / slowest);
        if (dead) printf("; rank %d killed mid-push: %llu of its writes ended PEER_DOWN, none to another rank failed", last,
                         (unsigned long long)dead_failed);
        if (v > 1 && v == opt.kill_version + 1) printf("; a new rank %d joined by its descriptor", last);
        printf("\n");
        if (js) {
            fprintf(js, "%s{\"version\": %d, \"push_ms\": %.3f, \"gbps_per_trainer\": %.4f, \"verified\": %s, \"killed_rank\": %d, "
                        "\"dead_rank_writes_failed\": %llu", v > 1 ? ", " : "", v, slowest * 1e3, gbps / slowest,
                    bad ? "false" : "true", dead ? last : -1, (unsigned long long)dead_failed);
            if (opt.raw)
                fprintf(js, ", \"raw_ms\": %.3f, \"raw_gbps_per_trainer\": %.4f, \"raw_verified\": %s, \"vs_raw\": %.4f",
                        raw_slowest * 1e3, gbps / raw_slowest, raw_bad ? "false" : "true", raw_slowest / slowest);
            fprintf(js, "}");
        }
    }
    if (opt.raw)
        printf("versions %d..%d: the engine's push at %.2fx raw libfabric's (total time, same bytes, same run)\n",
               opt.versions > 1 ? 2 : 1, opt.versions, sum_raw / sum_engine);
    for (int i = 0; i < R + T; i++) {
        int st;
        if (pids[i] < 0) continue; /* a rank on another host */
        waitpid(pids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    if (js) {
        if (opt.raw) fprintf(js, "], \"vs_raw\": %.4f, \"ok\": %s}\n", sum_raw / sum_engine, failed ? "false" : "true");
        else fprintf(js, "], \"ok\": %s}\n", failed ? "false" : "true");
        fclose(js);
    }
    printf("%s\n", failed ? "FAILED" : "ok");
    return failed;
}
