// cuda_kv_proxy: the paper's host-proxy flow on one GPU machine, two
// processes over fabriclib (shm by default), no CUDA-driver code of our own.
//
//   cuda_kv_proxy demo [--layers N (16)] [--pages N (32)] [--page-kib N (16)]
//                      [--compute-us N (400)] [--provider P (shm)] [--port N (18711)]
//
// Prefill: a CUDA graph of per-layer kernels. Each layer's kernel computes
// (spins --compute-us), writes that layer's KV pages, then bumps a fabriclib
// watcher (volatile store + __threadfence_system(): allowed inside a graph).
// The watcher callback, on fabriclib's watcher thread, submits that layer's
// paged write with imm = layer while the GPU computes the next layer.
//
// Decode: fabriclib mirrors each layer's immediate count into a word of
// mapped memory (fabriclib_imm_mirror); one decode kernel waits on each
// layer's word, then checks every byte of the layer on the GPU.
//
// Pages live in device memory where the provider registers it (FI_HMEM:
// EFA), else in pinned host memory mapped into the GPU (tcp, shm).
// Both kernels read %globaltimer, the same clock on one GPU: the output shows
// when each layer was signalled and when it landed, so the overlap of
// transfers with compute is visible. Run it under MPS
// (`nvidia-cuda-mps-control -d`): without MPS the two processes' kernels
// are time-sliced (about 2 ms each), so the decode kernel sees landings only
// in its own slices and the prefill graph pauses during decode's.
#include <fabriclib.h>
#include "example_util.h"
#include "cuda_util.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <vector>

static int layers = 16, pages = 32, page_kib = 16, compute_us = 400, port = 18711;
static const char *provider = "shm";

// Byte i of prefill's page p of layer l, and decode's slot for that page (a scrambled page table).
__host__ __device__ static uint8_t kv_byte(int l, int p, size_t i) { return (uint8_t)(l * 37 + p * 11 + i * 7 + (i >> 8)); }
__host__ __device__ static uint32_t slot_of(int l, int p, int npages) { return (uint32_t)(l * npages + (p * 29 + l) % npages); }

// Blocks of each layer's kernel that have written their share.
__device__ unsigned int layer_blocks_done[1024];

// One layer of prefill: compute (a spin standing in for attention), write the
// layer's pages, then signal the watcher. signalled[l] gets the signal's time.
__global__ void prefill_layer(uint8_t *kv, int l, int npages, size_t page, int spin_us, volatile uint64_t *watcher,
                              uint64_t *signalled) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        uint64_t t0 = globaltimer();
        while (globaltimer() - t0 < (uint64_t)spin_us * 1000) {}
    }
    __syncthreads();
    size_t layer = (size_t)npages * page; // page is a multiple of 1 KiB: whole 8-byte words
    uint64_t *out = (uint64_t *)(kv + (size_t)l * layer);
    for (size_t w = blockIdx.x * blockDim.x + threadIdx.x; w < layer / 8; w += (size_t)gridDim.x * blockDim.x) {
        int p = (int)(w * 8 / page);
        size_t i = w * 8 % page;
        uint64_t v = 0;
        for (int k = 0; k < 8; k++) v |= (uint64_t)kv_byte(l, p, i + k) << (8 * k);
        out[w] = v;
    }
    // Every block's bytes before the signal: the last block to finish signals.
    __threadfence_system();
    __syncthreads();
    __shared__ bool last;
    if (threadIdx.x == 0) {
        last = atomicAdd(&layer_blocks_done[l], 1) == gridDim.x - 1;
        if (last) {
            __threadfence_system();
            signalled[l] = globaltimer();
            *watcher = (uint64_t)l + 1; // the signal: a volatile store the watcher thread sees
            __threadfence_system();
        }
    }
}

// Decode: block l waits for layer l's mirrored counter to reach `npages`
// (each block on its own, so a layer's landing is seen when it happens, not
// after the previous layer's check), then checks the layer, 8 bytes a load.
__global__ void decode_layers(const volatile uint64_t *counters, const uint8_t *kv, int npages, size_t page,
                              unsigned long long *bad, uint64_t *landed, int *timed_out) {
    int l = blockIdx.x;
    __shared__ int gave_up;
    if (threadIdx.x == 0) {
        gave_up = 0;
        uint64_t t0 = globaltimer();
        while (counters[l] < (uint64_t)npages) {
            if (globaltimer() - t0 > 30ull * 1000 * 1000 * 1000) {
                gave_up = 1;
                *timed_out = l + 1;
                break;
            }
        }
        landed[l] = globaltimer();
        __threadfence_system(); // the layer's bytes are read after the counter
    }
    __syncthreads();
    if (gave_up) return;
    unsigned long long b = 0;
    for (int p = 0; p < npages; p++) {
        const volatile uint64_t *got = (const volatile uint64_t *)(kv + (size_t)slot_of(l, p, npages) * page);
        for (size_t w = threadIdx.x; w < page / 8; w += blockDim.x) {
            uint64_t v = got[w];
            for (int k = 0; k < 8; k++) b += (uint8_t)(v >> (8 * k)) != kv_byte(l, p, w * 8 + k);
        }
    }
    if (b) atomicAdd(bad, b);
}

static fabriclib_engine *make_engine(void) {
    fabriclib_config *cfg;
    fabriclib_engine *e;
    CHECK(fabriclib_config_new(&cfg));
    CHECK(fabriclib_config_set_provider(cfg, provider));
    CHECK(fabriclib_config_set_bind_address(cfg, "127.0.0.1"));
    CHECK(fabriclib_config_set_watcher_idle(cfg, UINT64_MAX, 1)); // the watcher thread spins: lowest latency
    CHECK(fabriclib_engine_create(cfg, &e));
    fabriclib_config_free(cfg);
    return e;
}

// Pages for `bytes`: device memory if the engine's provider registers it,
// else pinned host memory mapped into the GPU. Returns the registration and
// sets the pointer kernels use.
static fabriclib_mr *kv_memory(fabriclib_engine *e, size_t bytes, uint8_t **dev, const char **where) {
    fabriclib_mr *mr = NULL;
    void *d = NULL;
    CUDA(cudaMalloc(&d, bytes));
    if (fabriclib_mr_register_device(e, d, bytes, 0, &mr) == FABRICLIB_STATUS_OK) {
        *dev = (uint8_t *)d;
        *where = "device memory (FI_HMEM)";
        return mr;
    }
    printf("  (%s)\n", fabriclib_last_error_message());
    CUDA(cudaFree(d));
    uint8_t *h = mapped_host(bytes, dev);
    CHECK(fabriclib_mr_register(e, h, bytes, &mr));
    *where = "pinned host memory mapped into the GPU";
    return mr;
}

static int decode(void) {
    size_t page = (size_t)page_kib << 10, total = (size_t)layers * pages * page, n;
    uint8_t blob[4096], *kv;
    const char *where;
    fabriclib_engine *e = make_engine();
    fabriclib_mr *mr = kv_memory(e, total, &kv, &where);
    printf("decode: KV pages in %s\n", where);
    uint64_t *counters = NULL, counters_dev = 0;
    CHECK(fabriclib_mapped_alloc(8 * (size_t)layers, FABRICLIB_MEMORY_AUTO, 0, (void **)&counters, &counters_dev));
    if (!counters_dev) { fprintf(stderr, "decode: no CUDA-mapped memory (is there a CUDA driver?)\n"); return 1; }
    for (int l = 0; l < layers; l++) CHECK(fabriclib_imm_mirror(e, (uint32_t)l, &counters[l]));
    // Results in pinned mapped memory (no page faults in the timed kernel).
    unsigned long long *bad_dev, *bad = mapped_host(sizeof *bad, &bad_dev);
    uint64_t *landed_dev, *landed = mapped_host(8 * (size_t)layers, &landed_dev);
    int *timed_out_dev, *timed_out = mapped_host(sizeof *timed_out, &timed_out_dev);
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Waiting on the GPU before anything is sent.
    decode_layers<<<layers, 256, 0, s>>>((const volatile uint64_t *)counters_dev, kv, pages, page, bad_dev, landed_dev, timed_out_dev);
    CUDA(cudaGetLastError());
    int ls, fd = oob_accept(port, &ls);
    CHECK(fabriclib_engine_address(e, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    CHECK(fabriclib_mr_descriptor(mr, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    CUDA(cudaStreamSynchronize(s));
    std::vector<uint64_t> signalled((size_t)layers);
    oob_xfer(fd, signalled.data(), 8 * (size_t)layers, 0);
    if (*timed_out) { fprintf(stderr, "decode: layer %d never landed\n", *timed_out - 1); return 1; }
    printf("layer  signalled_us  landed_us  transfer_us\n");
    for (int l = 0; l < layers; l++)
        printf("%5d  %12.1f  %9.1f  %11.1f\n", l, (signalled[l] - signalled[0]) / 1e3, (landed[l] - signalled[0]) / 1e3,
               ((double)landed[l] - (double)signalled[l]) / 1e3);
    int overlapped = 0, during = 0;
    for (int l = 0; l + 1 < layers; l++) overlapped += landed[l] < signalled[l + 1];
    for (int l = 0; l < layers; l++) during += landed[l] < signalled[layers - 1];
    double per_layer = layers > 1 ? (signalled[layers - 1] - signalled[0]) / 1e3 / (layers - 1) : 0;
    printf("decode: %d layers x %d pages x %d KiB, %.0f us of compute per layer: %d of %d layers landed before the "
           "next layer's compute ended, %d while the GPU still computed; the last landed %.1f us after the compute "
           "ended; %s (%llu bad bytes)\n",
           layers, pages, page_kib, per_layer, overlapped, layers - 1, during,
           ((double)landed[layers - 1] - (double)signalled[layers - 1]) / 1e3,
           *bad ? "VERIFY FAILED" : "every byte verified on the GPU", *bad);
    int verdict = *bad != 0;
    oob_xfer(fd, &verdict, sizeof verdict, 1);
    close(fd);
    close(ls);
    for (int l = 0; l < layers; l++) CHECK(fabriclib_imm_mirror(e, (uint32_t)l, NULL));
    fabriclib_mr_deregister(mr);
    fabriclib_engine_destroy(e);
    fabriclib_mapped_free(counters);
    return verdict;
}

struct Proxy {
    fabriclib_engine *e;
    fabriclib_mr *mr;
    fabriclib_remote_mr *dst;
    size_t page;
    std::vector<uint32_t> src_idx, dst_idx; // per layer, pages entries each
    std::atomic<int> failed{0};
};

// The watcher callback: submits every layer whose signal it sees (values may
// be skipped: old..new are all ready).
static void on_layer_ready(void *user_data, uint64_t old_value, uint64_t new_value) FABRICLIB_NOEXCEPT {
    Proxy *px = (Proxy *)user_data;
    for (uint64_t l = old_value; l < new_value; l++) {
        fabriclib_pages sp = {&px->src_idx[l * pages], (size_t)pages, px->page, 0};
        fabriclib_pages dp = {&px->dst_idx[l * pages], (size_t)pages, px->page, 0};
        uint32_t imm = (uint32_t)l;
        fabriclib_status st;
        while ((st = fabriclib_submit_paged_writes(px->e, px->page, &imm, px->mr, &sp, px->dst, &dp, NULL, NULL)) ==
               FABRICLIB_STATUS_AGAIN) {}
        if (st) px->failed++;
    }
}

static int prefill(void) {
    size_t page = (size_t)page_kib << 10, total = (size_t)layers * pages * page;
    uint8_t blob[4096], *kv;
    const char *where;
    Proxy px;
    px.e = make_engine();
    px.mr = kv_memory(px.e, total, &kv, &where);
    px.page = page;
    printf("prefill: KV pages in %s\n", where);
    for (int l = 0; l < layers; l++)
        for (int p = 0; p < pages; p++) {
            px.src_idx.push_back((uint32_t)(l * pages + p));
            px.dst_idx.push_back(slot_of(l, p, pages));
        }
    int fd = oob_connect(port);
    size_t n = oob_get_blob(fd, blob, sizeof blob);
    // Greet decode now and wait until it answers, not at the first layer.
    uint32_t up = 0;
    fabriclib_submit_opts uo;
    memset(&uo, 0, sizeof uo);
    uo.struct_size = sizeof uo;
    uo.flag = &up;
    CHECK(fabriclib_peer_add(px.e, blob, n, &uo, NULL));
    CHECK(fabriclib_flag_await(&up, 10 * 1000 * 1000, NULL));
    CHECK((fabriclib_status)(up & FABRICLIB_FLAG_STATUS_MASK));
    n = oob_get_blob(fd, blob, sizeof blob);
    CHECK(fabriclib_remote_mr_parse(blob, n, &px.dst));

    volatile uint64_t *watcher;
    fabriclib_watcher *w = example_watcher(px.e, on_layer_ready, &px, &watcher);
    // Timestamps in pinned mapped memory: a kernel's store there never page-faults.
    uint64_t *signalled_dev, *signalled = mapped_host(8 * (size_t)layers, &signalled_dev);

    // The forward pass as one CUDA graph: the watcher signal is a plain store inside it.
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < layers; l++)
        prefill_layer<<<8, 256, 0, s>>>(kv, l, pages, page, compute_us, watcher, signalled_dev);
    CUDA(cudaStreamEndCapture(s, &g));
    CUDA(cudaGraphInstantiate(&ge, g, 0));
    CUDA(cudaGraphLaunch(ge, s));
    CUDA(cudaStreamSynchronize(s));
    oob_xfer(fd, signalled, 8 * (size_t)layers, 1);
    int verdict = 1;
    oob_xfer(fd, &verdict, sizeof verdict, 0);
    printf("prefill: %d layers from one CUDA graph, each sent by the watcher callback; %d submits failed\n", layers,
           px.failed.load());
    close(fd);
    fabriclib_watcher_destroy(w);
    fabriclib_remote_mr_free(px.dst);
    fabriclib_mr_deregister(px.mr);
    fabriclib_engine_destroy(px.e);
    return verdict || px.failed.load();
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s demo|decode|prefill [--layers N --pages N --page-kib N --compute-us N --provider P --port N]\n", argv[0]);
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pages")) pages = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--page-kib")) page_kib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--compute-us")) compute_us = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--provider")) provider = argv[i + 1];
        else if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    // Decode runs one block per layer, all resident at once: keep layers within what one GPU holds.
    if (layers < 1 || layers > 128 || pages < 1 || page_kib < 1) { fprintf(stderr, "bad sizes\n"); return 2; }
    printf("fabriclib %s, provider %s\n", fabriclib_version(), provider);
    if (!strcmp(argv[1], "decode")) return decode();
    if (!strcmp(argv[1], "prefill")) return prefill();
    if (strcmp(argv[1], "demo")) { fprintf(stderr, "unknown mode %s\n", argv[1]); return 2; }
    fflush(stdout);
    pid_t pid = fork(); // before any CUDA or fabriclib call
    if (pid == 0) return decode();
    int rc = prefill(), st = 0;
    waitpid(pid, &st, 0);
    return rc || !WIFEXITED(st) || WEXITSTATUS(st);
}
