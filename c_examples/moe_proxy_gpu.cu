// moe_proxy_gpu: moe_proxy's dispatch and combine with the GPU doing the
// work and the host only proxying, the paper's flow: EP rank processes
// sharing one GPU (run it under MPS), fabriclib between them (shm by default).
//
//   moe_proxy_gpu demo [--ep N (4)] [--tokens T (128)] [--hidden H (7168)]
//                      [--experts E (256)] [--topk K (8)] [--steps S (1000)]
//                      [--warmup W (20)] [--provider P (shm)] [--json FILE]
//
// Per step, in each rank's stream:
//  1. route_pack: the router (moe_model.h's, seeded) and the packing of each
//     token into a send block per destination rank, [header | rows]; the
//     last block writes the headers and bumps the rank's watcher (odd value).
//  2. The watcher callback (fabriclib's watcher thread, the proxy) submits
//     every peer's block in one scatter over a peer set with the dispatch
//     immediate.
//  3. experts: a block per source waits on that source's mirrored counter
//     (fabriclib_imm_mirror into mapped memory), checks every element it
//     received, transforms the rows (x * sum(2e + 1) over its experts) into
//     an out block, and the last block bumps the watcher (even value): the
//     callback submits the combine scatter.
//  4. check: a block per expert rank waits on its combine counter and checks
//     every element returned.
// Dispatch latency: %globaltimer (one clock for every process on the GPU)
// from the source's route_pack signal to the destination's experts kernel
// seeing the block (the slowest source per step); combine likewise. Blocks
// live in pinned host memory mapped into the GPU: the machine's libfabric
// providers do not register device memory (FI_HMEM).
#include <fabriclib.h>
#include "example_util.h"
#include "cuda_util.h"
#include "moe_model.h"
#include <atomic>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vector>

static moe_shape sh = {4, 256, 8, 7168, 128};
static int steps = 1000, warmup = 20;
static const char *provider = "shm", *json_path;

// Device-memory state of a rank's kernels.
struct Ctl {
    unsigned int rows[MOE_MAX_EP]; // route_pack: rows packed per destination this step
    unsigned int packed, experted; // blocks of route_pack / experts done this step
    unsigned long long bad;        // elements that differ
    int timed_out;                 // 1 + the peer a kernel gave up on
};

// Waits (thread 0) until the mirrored counter reaches `want`: its time, or 0 after 30 s.
__device__ static uint64_t wait_counter(const volatile uint64_t *c, uint64_t want) {
    uint64_t t0 = globaltimer(), now = t0;
    while (*c < want) {
        now = globaltimer();
        if (now - t0 > 30ull * 1000 * 1000 * 1000) return 0;
    }
    now = globaltimer();
    __threadfence_system(); // the block's bytes are read after the counter
    return now;
}

__device__ static void signal(volatile uint64_t *watcher, uint64_t v) {
    __threadfence_system();
    *watcher = v;
    __threadfence_system();
}

// 1. One block per token: route it, pack it into each destination's send block.
__global__ void route_pack(moe_shape sh, uint64_t t, int me, uint8_t *region, Ctl *ctl, volatile uint64_t *watcher) {
    __shared__ uint16_t ex[32];
    __shared__ int slot[MOE_MAX_EP];
    int j = blockIdx.x;
    if (threadIdx.x == 0) {
        moe_route(sh, t, me, j, ex);
        for (int d = 0; d < sh.ep; d++) slot[d] = -1;
        for (int k = 0; k < sh.topk; k++) slot[moe_owner(sh, ex[k])] = 0;
        for (int d = 0; d < sh.ep; d++)
            if (slot[d] == 0) slot[d] = (int)atomicAdd(&ctl->rows[d], 1u);
    }
    __syncthreads();
    uint16_t seed = moe_seed(t, me, j);
    for (int d = 0; d < sh.ep; d++) {
        if (slot[d] < 0) continue;
        uint8_t *row = region + moe_send(sh, d) + MOE_HDR + (size_t)slot[d] * moe_rb(sh);
        if (threadIdx.x == 0) *(uint32_t *)row = (uint32_t)j;
        if (threadIdx.x < sh.topk) ((uint16_t *)(row + 4))[threadIdx.x] = ex[threadIdx.x];
        uint16_t *x = (uint16_t *)(row + MOE_META);
        for (int i = threadIdx.x; i < sh.hidden; i += blockDim.x) x[i] = (uint16_t)(seed + i * MOE_STRIDE);
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(&ctl->packed, 1u) == gridDim.x - 1) { // the last block: headers, then the signal
        __threadfence();
        uint64_t now = globaltimer();
        for (int d = 0; d < sh.ep; d++) {
            volatile moe_header *h = (volatile moe_header *)(region + moe_send(sh, d));
            h->step = t, h->rows = atomicExch(&ctl->rows[d], 0u), h->sent_ns = now;
        }
        ctl->packed = 0;
        signal(watcher, 2 * t - 1);
    }
}

// 3. One block per source: wait for its block, check every row, transform it.
__global__ void experts(moe_shape sh, uint64_t t, int me, uint8_t *region, Ctl *ctl, const volatile uint64_t *counters,
                        uint64_t *latency, volatile uint64_t *watcher) {
    __shared__ int gave_up;
    __shared__ unsigned long long bad;
    int s = blockIdx.x;
    const uint8_t *blk = region + (s == me ? moe_send(sh, me) : moe_recv(sh, s));
    volatile const moe_header *h = (volatile const moe_header *)blk;
    if (threadIdx.x == 0) {
        gave_up = 0, bad = 0;
        if (s != me) {
            uint64_t seen = wait_counter(&counters[s], t);
            if (!seen) gave_up = 1, ctl->timed_out = s + 1;
            else latency[s] = seen - h->sent_ns;
        }
        if (!gave_up && h->step != t) bad = 1ull << 40; // a block of another step: fail loudly
    }
    __syncthreads();
    if (gave_up) return;
    uint64_t rows = h->rows;
    uint8_t *out = region + moe_out(sh, s);
    unsigned long long b = 0;
    for (uint64_t k = 0; k < rows; k++) {
        const uint8_t *row = blk + MOE_HDR + k * moe_rb(sh);
        uint16_t f = moe_factor(sh, (const uint16_t *)(row + 4), me), seed = moe_seed(t, s, (int)*(const uint32_t *)row);
        const uint16_t *x = (const uint16_t *)(row + MOE_META);
        uint16_t *y = (uint16_t *)(out + MOE_HDR + k * moe_ob(sh));
        for (int i = threadIdx.x; i < sh.hidden; i += blockDim.x) {
            uint16_t v = x[i];
            b += v != (uint16_t)(seed + i * MOE_STRIDE);
            y[i] = (uint16_t)(v * f);
        }
    }
    if (b) atomicAdd(&bad, b);
    __syncthreads();
    if (threadIdx.x == 0) {
        if (bad) atomicAdd(&ctl->bad, bad);
        volatile moe_header *o = (volatile moe_header *)out;
        o->step = t, o->rows = rows;
        __threadfence_system();
        if (atomicAdd(&ctl->experted, 1u) == gridDim.x - 1) { // the last block: send times, then the signal
            uint64_t now = globaltimer();
            for (int p = 0; p < sh.ep; p++) ((volatile moe_header *)(region + moe_out(sh, p)))->sent_ns = now;
            ctl->experted = 0;
            signal(watcher, 2 * t);
        }
    }
}

// 4. One block per expert rank: wait for its results, check every element.
__global__ void check(moe_shape sh, uint64_t t, int me, const uint8_t *region, Ctl *ctl, const volatile uint64_t *counters,
                      uint64_t *latency) {
    __shared__ int gave_up;
    int d = blockIdx.x;
    const uint8_t *blk = region + (d == me ? moe_out(sh, me) : moe_ret(sh, d));
    if (threadIdx.x == 0) {
        gave_up = 0;
        if (d != me) {
            uint64_t seen = wait_counter(&counters[d], t);
            if (!seen) gave_up = 1, ctl->timed_out = d + 1;
            else latency[d] = seen - ((volatile const moe_header *)blk)->sent_ns;
        }
    }
    __syncthreads();
    if (gave_up) return;
    const uint8_t *sent = region + moe_send(sh, d);
    uint64_t rows = ((const moe_header *)sent)->rows;
    unsigned long long b = 0;
    for (uint64_t k = 0; k < rows; k++) {
        const uint8_t *row = sent + MOE_HDR + k * moe_rb(sh);
        uint16_t f = moe_factor(sh, (const uint16_t *)(row + 4), d), seed = moe_seed(t, me, (int)*(const uint32_t *)row);
        const volatile uint16_t *y = (const volatile uint16_t *)(blk + MOE_HDR + k * moe_ob(sh));
        for (int i = threadIdx.x; i < sh.hidden; i += blockDim.x) b += y[i] != (uint16_t)((uint16_t)(seed + i * MOE_STRIDE) * f);
    }
    if (b) atomicAdd(&ctl->bad, b);
}

// The proxy: the rank's engine, its blocks and what the watcher callback needs.
struct Proxy {
    fabriclib_engine *e;
    fabriclib_mr *mr;
    fabriclib_remote_mr *dst[MOE_MAX_EP];
    uint64_t set;
    uint8_t *region; // host view
    int me;
    std::vector<uint32_t> flags;   // [step][dispatch|combine]
    std::vector<double> submit_us; // [step]: both scatters' submit time
    std::atomic<int> failed{0};
};

static void scatter(Proxy *px, uint64_t t, int combine) {
    fabriclib_scatter_dst d[MOE_MAX_EP];
    size_t n = 0;
    for (int p = 0; p < sh.ep; p++) {
        if (p == px->me) continue;
        size_t off = combine ? moe_out(sh, p) : moe_send(sh, p);
        uint64_t rows = ((volatile moe_header *)(px->region + off))->rows;
        size_t len = MOE_HDR + rows * (combine ? moe_ob(sh) : moe_rb(sh));
        d[n++] = {len, off, px->dst[p], combine ? moe_ret(sh, px->me) : moe_recv(sh, px->me)};
    }
    uint32_t imm = (combine ? IMM_COMBINE : IMM_DISPATCH) | (uint32_t)px->me;
    fabriclib_submit_opts o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.flag = &px->flags[2 * (t - 1) + (size_t)combine];
    double t0 = example_now();
    fabriclib_status st;
    while ((st = fabriclib_submit_scatter(px->e, px->set, &imm, px->mr, d, n, &o, NULL)) == FABRICLIB_STATUS_AGAIN) {}
    px->submit_us[t - 1] += (example_now() - t0) * 1e6;
    if (st) px->failed++;
}

// The watcher callback: event 2t - 1 is step t's dispatch, 2t its combine.
static void on_signal(void *user_data, uint64_t old_value, uint64_t new_value) FABRICLIB_NOEXCEPT {
    for (uint64_t ev = old_value + 1; ev <= new_value; ev++) scatter((Proxy *)user_data, (ev + 1) / 2, ev % 2 == 0);
}

static int rank_main(int me, int fd) {
    Proxy px;
    px.me = me;
    fabriclib_config *cfg;
    CHECK(fabriclib_config_new(&cfg));
    CHECK(fabriclib_config_set_provider(cfg, provider));
    CHECK(fabriclib_config_set_bind_address(cfg, "127.0.0.1"));
    CHECK(fabriclib_config_set_watcher_idle(cfg, UINT64_MAX, 1)); // the watcher thread spins: the proxy's latency
    CHECK(fabriclib_engine_create(cfg, &px.e));
    fabriclib_config_free(cfg);
    size_t bytes = moe_region(sh), n;
    uint8_t *dev;
    px.region = mapped_host(bytes, &dev);
    CHECK(fabriclib_mr_register(px.e, px.region, bytes, &px.mr));
    uint8_t blob[EXAMPLE_BLOB_MAX];
    CHECK(fabriclib_mr_descriptor(px.mr, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    CHECK(fabriclib_engine_address(px.e, blob, sizeof blob, &n));
    oob_put_blob(fd, blob, n);
    std::vector<std::vector<uint8_t>> addrs;
    std::vector<const uint8_t *> addr_ptrs;
    std::vector<size_t> addr_lens;
    for (int p = 0; p < sh.ep; p++) {
        n = oob_get_blob(fd, blob, sizeof blob);
        if (p != me) CHECK(fabriclib_remote_mr_parse(blob, n, &px.dst[p]));
        n = oob_get_blob(fd, blob, sizeof blob);
        if (p != me) addrs.emplace_back(blob, blob + n);
    }
    for (auto &a : addrs) addr_ptrs.push_back(a.data()), addr_lens.push_back(a.size());
    CHECK(fabriclib_add_peer_set(px.e, (fabriclib_blob_list)addr_ptrs.data(), addr_lens.data(), addr_ptrs.size(), &px.set));
    // Mirrored counters, per source: [0..ep) dispatch, [ep..2ep) combine.
    uint64_t *counters = NULL, counters_dev = 0;
    CHECK(fabriclib_mapped_alloc(16 * (size_t)sh.ep, FABRICLIB_MEMORY_AUTO, 0, (void **)&counters, &counters_dev));
    if (!counters_dev) { fprintf(stderr, "rank %d: no CUDA-mapped memory (is there a CUDA driver?)\n", me); return 1; }
    for (int p = 0; p < sh.ep; p++) {
        if (p == me) continue;
        CHECK(fabriclib_imm_mirror(px.e, IMM_DISPATCH | (uint32_t)p, &counters[p]));
        CHECK(fabriclib_imm_mirror(px.e, IMM_COMBINE | (uint32_t)p, &counters[sh.ep + p]));
    }
    int total = warmup + steps;
    px.flags.assign(2 * (size_t)total, 0);
    px.submit_us.assign((size_t)total, 0);
    volatile uint64_t *watcher;
    fabriclib_watcher *w = example_watcher(px.e, on_signal, &px, &watcher);
    Ctl *ctl;
    CUDA(cudaMalloc((void **)&ctl, sizeof *ctl));
    CUDA(cudaMemset(ctl, 0, sizeof *ctl));
    uint64_t *lat_dev, *lat = mapped_host(16 * (size_t)sh.ep * (size_t)total, &lat_dev); // [step][dispatch source | combine rank], ns
    cudaStream_t st;
    CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int go = me;
    oob_xfer(fd, &go, sizeof go, 1); // ready
    oob_xfer(fd, &go, sizeof go, 0); // every rank is
    Ctl host_ctl;
    for (int it = 0; it < total; it++) {
        uint64_t t = (uint64_t)it + 1, *l = lat_dev + 2 * (size_t)sh.ep * (size_t)it;
        route_pack<<<sh.tokens, 256, 0, st>>>(sh, t, me, dev, ctl, watcher);
        experts<<<sh.ep, 256, 0, st>>>(sh, t, me, dev, ctl, (const volatile uint64_t *)counters_dev, l, watcher);
        check<<<sh.ep, 256, 0, st>>>(sh, t, me, dev, ctl, (const volatile uint64_t *)counters_dev + sh.ep, l + sh.ep);
        CUDA(cudaGetLastError());
        CUDA(cudaStreamSynchronize(st));
        CUDA(cudaMemcpy(&host_ctl, ctl, sizeof host_ctl, cudaMemcpyDeviceToHost));
        if (host_ctl.timed_out) { fprintf(stderr, "rank %d: step %d: nothing from rank %d in 30 s\n", me, (int)t, host_ctl.timed_out - 1); return 1; }
        // Both scatters' sources are free again before the next step packs.
        for (int k = 0; k < 2; k++) {
            uint32_t *f = &px.flags[2 * (size_t)it + (size_t)k];
            CHECK(fabriclib_flag_await(f, 60 * 1000 * 1000, NULL));
            if (*f & FABRICLIB_FLAG_STATUS_MASK) { fprintf(stderr, "rank %d: a scatter ended %s\n", me, fabriclib_status_str((fabriclib_status)(*f & FABRICLIB_FLAG_STATUS_MASK))); return 1; }
        }
    }
    // Per step: the slowest source (dispatch) and expert rank (combine), and the submit cost per peer.
    std::vector<double> out(3 * (size_t)total);
    for (int it = 0; it < total; it++) {
        uint64_t dmax = 0, cmax = 0;
        for (int p = 0; p < sh.ep; p++) {
            if (p == me) continue;
            uint64_t dl = lat[2 * (size_t)sh.ep * it + p], cl = lat[2 * (size_t)sh.ep * it + sh.ep + p];
            dmax = dl > dmax ? dl : dmax, cmax = cl > cmax ? cl : cmax;
        }
        out[3 * it] = dmax / 1e3, out[3 * it + 1] = cmax / 1e3, out[3 * it + 2] = px.submit_us[it] / 2 / (sh.ep - 1);
    }
    uint64_t bad = host_ctl.bad + (uint64_t)px.failed.load();
    oob_xfer(fd, &bad, sizeof bad, 1);
    oob_xfer(fd, out.data(), out.size() * sizeof(double), 1);
    fabriclib_watcher_destroy(w);
    for (int p = 0; p < sh.ep; p++)
        if (p != me) fabriclib_imm_mirror(px.e, IMM_DISPATCH | (uint32_t)p, NULL), fabriclib_imm_mirror(px.e, IMM_COMBINE | (uint32_t)p, NULL);
    fabriclib_mr_deregister(px.mr);
    fabriclib_engine_destroy(px.e);
    fabriclib_mapped_free(counters);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "demo")) goto usage;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--ep")) sh.ep = atoi(v);
        else if (!strcmp(a, "--tokens")) sh.tokens = atoi(v);
        else if (!strcmp(a, "--hidden")) sh.hidden = atoi(v);
        else if (!strcmp(a, "--experts")) sh.experts = atoi(v);
        else if (!strcmp(a, "--topk")) sh.topk = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--provider")) provider = !strcmp(v, "tcp") ? "tcp;ofi_rxm" : v;
        else if (!strcmp(a, "--json")) json_path = v;
        else goto usage;
    }
    if (sh.ep < 2 || sh.ep > MOE_MAX_EP || sh.experts % sh.ep || sh.topk < 1 || sh.topk > 30 || sh.topk > sh.experts ||
        sh.hidden < 1 || sh.tokens < 1 || steps < 1 || warmup < 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    {
        printf("moe_proxy_gpu: EP %d on one GPU, %d tokens x %d bf16 per rank, top-%d of %d, %s; %d steps (+%d warm-up)\n",
               sh.ep, sh.tokens, sh.hidden, sh.topk, sh.experts, provider, steps, warmup);
        int fd[MOE_MAX_EP], failed = 0;
        pid_t pid[MOE_MAX_EP];
        for (int r = 0; r < sh.ep; r++) pid[r] = example_spawn(rank_main, r, &fd[r]); // before any CUDA call here
        example_relay(fd, sh.ep, 2);
        int x;
        for (int r = 0; r < sh.ep; r++) oob_xfer(fd[r], &x, sizeof x, 0);
        for (int r = 0; r < sh.ep; r++) oob_xfer(fd[r], &x, sizeof x, 1);
        int total = warmup + steps;
        size_t got = 0;
        std::vector<double> v[3], smp(3 * (size_t)total);
        uint64_t bad = 0;
        for (int r = 0; r < sh.ep; r++) {
            uint64_t b;
            oob_xfer(fd[r], &b, sizeof b, 0);
            oob_xfer(fd[r], smp.data(), smp.size() * sizeof(double), 0);
            bad += b;
            for (int it = warmup; it < total; it++, got++)
                for (int m = 0; m < 3; m++) v[m].push_back(smp[3 * (size_t)it + m]);
        }
        for (int r = 0; r < sh.ep; r++) {
            int st;
            waitpid(pid[r], &st, 0);
            failed |= !WIFEXITED(st) || WEXITSTATUS(st);
        }
        failed |= bad != 0;
        double q[3][2];
        for (int m = 0; m < 3; m++) q[m][0] = example_quantile(v[m].data(), got, 0.5), q[m][1] = example_quantile(v[m].data(), got, 0.99);
        printf("p50 / p99 over %zu rank-steps, microseconds:\n", got);
        printf("  dispatch (route kernel's signal -> experts kernel sees the block) %8.1f / %-8.1f\n", q[0][0], q[0][1]);
        printf("  combine  (experts kernel's signal -> check kernel sees the block) %8.1f / %-8.1f\n", q[1][0], q[1][1]);
        printf("  proxy submit per peer (watcher callback's scatter call)           %8.3f / %-8.3f\n", q[2][0], q[2][1]);
        printf("every element checked on the GPU at both ends: %s\n", bad ? "ELEMENTS DIFFER" : "ok");
        if (json_path) {
            FILE *js = fopen(json_path, "w");
            if (!js) { perror(json_path); return 2; }
            fprintf(js, "{\"ep\": %d, \"experts\": %d, \"topk\": %d, \"hidden\": %d, \"tokens\": %d, \"steps\": %d, \"warmup\": %d, "
                        "\"provider\": \"%s\", \"samples\": %zu, \"gpu\": {\"dispatch_us\": [%.2f, %.2f], \"combine_us\": [%.2f, %.2f], "
                        "\"submit_per_peer_us\": [%.4f, %.4f]}, \"mismatched\": %llu, \"ok\": %s}\n",
                    sh.ep, sh.experts, sh.topk, sh.hidden, sh.tokens, steps, warmup, provider, got, q[0][0], q[0][1], q[1][0],
                    q[1][1], q[2][0], q[2][1], (unsigned long long)bad, failed ? "false" : "true");
            fclose(js);
        }
        printf("%s\n", failed ? "FAILED" : "ok");
        return failed;
    }
usage:
    fprintf(stderr, "usage: %s demo [--ep N] [--tokens T] [--hidden H] [--experts E] [--topk K] [--steps S] [--warmup W] [--provider P] [--json FILE]\n", argv[0]);
    return 2;
}
