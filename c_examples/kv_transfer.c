/* kv_transfer: move a paged KV cache from a "prefill" process to a "decode"
 * process, layer by layer, through the raw fabriclib C ABI.
 *
 *   kv_transfer demo    [opts]   forks decode + prefill on this machine
 *   kv_transfer decode  [opts]   listens on --port, verifies every byte
 *   kv_transfer prefill [opts]   connects to --port, writes the cache
 * opts: --layers N (32) --pages N (64 per layer) --page-kib N (32)
 *       --provider P (tcp;ofi_rxm) --port N (18515)
 *
 * The address and the descriptor go out of band over a TCP socket on
 * 127.0.0.1. Prefill writes each layer with one paged write whose immediate is
 * the layer number; decode waits with fabriclib_expect_imm_count(layer, pages)
 * (one immediate per page), then checks every byte. */
#include <fabriclib.h>
#include "example_util.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int layers = 32, pages = 64, page_kib = 32, port = 18515;
static const char *provider = "tcp;ofi_rxm";

/* Byte i of prefill's page p of layer l: decode recomputes it to verify. */
static uint8_t kv_byte(int l, int p, size_t i) { return (uint8_t)(l * 37 + p * 11 + i * 7 + (i >> 8)); }
/* Decode's page slot for prefill's page p of layer l: a scrambled page table. */
static uint32_t slot_of(int l, int p) { return (uint32_t)(l * pages + (p * 29 + l) % pages); }


/* Decode: one completion time per layer, written by the callback thread. */
static _Atomic(double) *layer_done;
static void on_layer(void *user_data, fabriclib_status st) {
    int l = (int)(intptr_t)user_data;
    if (st) fprintf(stderr, "layer %d: %s\n", l, fabriclib_status_str(st));
    atomic_store(&layer_done[l], st ? -1.0 : example_now());
}

static int decode(void) {
    size_t page = (size_t)page_kib << 10, total = (size_t)layers * pages * page, n;
    uint8_t *kv = calloc(1, total), blob[512];
    fabriclib_engine *e = example_engine(provider, NULL, FABRICLIB_IDLE_SPIN);
    fabriclib_mr *mr;
    CHECK(fabriclib_mr_register(e, kv, total, &mr));
    layer_done = calloc((size_t)layers, sizeof *layer_done);
    for (int l = 0; l < layers; l++) {
        fabriclib_submit_opts d = {.struct_size = sizeof(fabriclib_submit_opts), .callback = on_layer, .user_data = (void *)(intptr_t)l};
        CHECK(fabriclib_expect_imm_count(e, (uint32_t)l, (uint32_t)pages, &d, NULL));
    }
    int ls, fd = oob_accept(port, &ls);
    CHECK(fabriclib_engine_address(e, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    CHECK(fabriclib_mr_descriptor(mr, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    double t0;
    oob_xfer(fd, &t0, sizeof t0, 0); /* prefill's start time (same machine: CLOCK_MONOTONIC) */
    for (int l = 0; l < layers; l++) {
        while (atomic_load(&layer_done[l]) == 0.0) {
            if (example_now() - t0 > 120) { fprintf(stderr, "layer %d never completed\n", l); return 1; }
            usleep(50);
        }
    }
    double end = 0;
    printf("layer  landed_ms  layer_ms\n");
    for (int l = 0; l < layers; l++) {
        double d = atomic_load(&layer_done[l]), prev = l ? atomic_load(&layer_done[l - 1]) : t0;
        if (d < 0) return 1;
        printf("%5d  %9.3f  %8.3f\n", l, (d - t0) * 1e3, (d > prev ? d - prev : 0) * 1e3);
        if (d > end) end = d;
    }
    size_t bad = 0;
    for (int l = 0; l < layers; l++)
        for (int p = 0; p < pages; p++) {
            const uint8_t *got = kv + (size_t)slot_of(l, p) * page;
            for (size_t i = 0; i < page; i++) bad += got[i] != kv_byte(l, p, i);
        }
    printf("decode: %d layers x %d pages x %d KiB = %.1f MiB in %.3f ms: %.2f GB/s; %s (%zu bad bytes)\n", layers,
           pages, page_kib, total / 1048576.0, (end - t0) * 1e3, total / (end - t0) / 1e9,
           bad ? "VERIFY FAILED" : "every byte verified", bad);
    int verdict = bad != 0;
    oob_xfer(fd, &verdict, sizeof verdict, 1);
    close(fd);
    close(ls);
    fabriclib_mr_deregister(mr);
    fabriclib_engine_destroy(e);
    free(kv);
    return verdict;
}

static int prefill(void) {
    size_t page = (size_t)page_kib << 10, total = (size_t)layers * pages * page, n;
    uint8_t *kv = malloc(total), blob[512];
    for (int l = 0; l < layers; l++)
        for (int p = 0; p < pages; p++)
            for (size_t i = 0; i < page; i++) kv[((size_t)l * pages + p) * page + i] = kv_byte(l, p, i);
    fabriclib_engine *e = example_engine(provider, NULL, FABRICLIB_IDLE_SPIN);
    fabriclib_mr *mr;
    fabriclib_remote_mr *dst;
    CHECK(fabriclib_mr_register(e, kv, total, &mr));
    int fd = oob_connect(port);
    oob_get_blob(fd, blob, sizeof blob); /* decode's engine address: not needed for writes */
    n = oob_get_blob(fd, blob, sizeof blob);
    CHECK(fabriclib_remote_mr_parse(blob, n, &dst));
    uint32_t *src_idx = malloc(sizeof(uint32_t) * pages), *dst_idx = malloc(sizeof(uint32_t) * pages);
    _Atomic uint32_t *flags = calloc((size_t)layers, sizeof *flags);
    double t0 = example_now();
    oob_xfer(fd, &t0, sizeof t0, 1);
    for (int l = 0; l < layers; l++) { /* as each layer's KV is ready */
        for (int p = 0; p < pages; p++) { src_idx[p] = (uint32_t)(l * pages + p); dst_idx[p] = slot_of(l, p); }
        fabriclib_pages sp = {src_idx, (size_t)pages, page, 0}, dp = {dst_idx, (size_t)pages, page, 0};
        fabriclib_submit_opts done = {.struct_size = sizeof(fabriclib_submit_opts), .flag = (uint32_t *)&flags[l]};
        uint32_t imm = (uint32_t)l;
        fabriclib_status st;
        while ((st = fabriclib_submit_paged_writes(e, page, &imm, mr, &sp, dst, &dp, &done, NULL)) == FABRICLIB_STATUS_AGAIN) {}
        CHECK(st);
    }
    double submitted = example_now();
    for (int l = 0; l < layers; l++) /* our source buffers are free again */
        while (!(atomic_load(&flags[l]) & FABRICLIB_FLAG_DONE)) usleep(20);
    printf("prefill: submitted %d layers in %.3f ms, source free after %.3f ms\n", layers, (submitted - t0) * 1e3,
           (example_now() - t0) * 1e3);
    int verdict = 1;
    oob_xfer(fd, &verdict, sizeof verdict, 0);
    close(fd);
    fabriclib_remote_mr_free(dst);
    fabriclib_mr_deregister(mr);
    fabriclib_engine_destroy(e);
    free(kv); free(src_idx); free(dst_idx); free((void *)flags);
    return verdict;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s demo|decode|prefill [--layers N --pages N --page-kib N --provider P --port N]\n", argv[0]); return 2; }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pages")) pages = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--page-kib")) page_kib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--provider")) provider = argv[i + 1];
        else if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (layers < 1 || pages < 1 || page_kib < 1) { fprintf(stderr, "sizes must be positive\n"); return 2; }
    printf("fabriclib %s, provider %s\n", fabriclib_version(), provider);
    if (!strcmp(argv[1], "decode")) return decode();
    if (!strcmp(argv[1], "prefill")) return prefill();
    if (strcmp(argv[1], "demo")) { fprintf(stderr, "unknown mode %s\n", argv[1]); return 2; }
    fflush(stdout);
    pid_t pid = fork(); /* before any fabriclib call */
    if (pid == 0) return decode();
    int rc = prefill(), st = 0;
    waitpid(pid, &st, 0);
    return rc || !WIFEXITED(st) || WEXITSTATUS(st);
}
