/* moe_model.h: what moe_proxy.c (CPU) and moe_proxy_gpu.cu (CUDA kernels)
 * share: the shape, the seeded router, the token values, the experts'
 * transform, and the layout of a rank's region. C and CUDA alike (MOE_HD
 * marks functions a kernel calls too). */
#ifndef FABRICLIB_MOE_MODEL_H
#define FABRICLIB_MOE_MODEL_H
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MOE_HD __host__ __device__ static inline
#else
#define MOE_HD static inline
#endif

#define MOE_MAX_EP 64
#define MOE_META 64 /* a row's metadata: uint32 token index, uint16 experts[topk] */
#define MOE_HDR 64  /* a block's header */
#define MOE_STRIDE 0x9E37u
#define IMM_DISPATCH 0x4D440000u /* | source rank */
#define IMM_COMBINE 0x4D430000u  /* | expert rank */

/* DeepSeek-V3's by default: hidden 7168 (bf16), top-8 of 256 experts, 128 tokens per rank. */
typedef struct {
    int ep, experts, topk, hidden, tokens;
} moe_shape;

/* A block's header: the step, how many rows follow, when it was sent (ns:
 * CLOCK_MONOTONIC on the CPU, %globaltimer on the GPU). */
typedef struct {
    uint64_t step, rows, sent_ns, pad[5];
} moe_header;

MOE_HD uint64_t moe_mix(uint64_t x) {
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29, x *= 0x94D049BB133111EBull;
    return x ^ (x >> 32);
}

/* Token j of rank s at step t: element i is seed + i * MOE_STRIDE (mod 2^16). */
MOE_HD uint16_t moe_seed(uint64_t t, int s, int j) { return (uint16_t)moe_mix(t << 40 ^ (uint64_t)s << 24 ^ (uint64_t)j); }

/* The router: token j's top-k distinct experts (seeded by step, rank, token). */
MOE_HD void moe_route(moe_shape sh, uint64_t t, int s, int j, uint16_t *ex) {
    uint64_t h = moe_mix(t * 0x100000001B3ull ^ (uint64_t)s << 32 ^ (uint64_t)j ^ 0xABCDEFull);
    for (int k = 0; k < sh.topk;) {
        h = moe_mix(h + (uint64_t)k + 1);
        uint16_t e = (uint16_t)(h % (uint64_t)sh.experts);
        int dup = 0;
        for (int q = 0; q < k; q++) dup |= ex[q] == e;
        if (!dup) ex[k++] = e;
    }
}

MOE_HD int moe_owner(moe_shape sh, int e) { return e / (sh.experts / sh.ep); }

/* The factor rank d applies to a token with experts ex: the sum of 2e + 1
 * over those it owns (0: none). The experts' "compute" is x * factor. */
MOE_HD uint16_t moe_factor(moe_shape sh, const uint16_t *ex, int d) {
    uint16_t f = 0;
    for (int k = 0; k < sh.topk; k++)
        if (moe_owner(sh, ex[k]) == d) f = (uint16_t)(f + 2 * ex[k] + 1);
    return f;
}

/* The region of a rank: send blocks (one per destination, [header | rows
 * of meta + token]), receive slots (one per source), out blocks (results
 * per source, [header | rows]) and return slots (one per expert rank). */
MOE_HD size_t moe_rb(moe_shape sh) { return MOE_META + (size_t)sh.hidden * 2; }
MOE_HD size_t moe_ob(moe_shape sh) { return (size_t)sh.hidden * 2; }
MOE_HD size_t moe_bd(moe_shape sh) { return MOE_HDR + (size_t)sh.tokens * moe_rb(sh); }
MOE_HD size_t moe_bc(moe_shape sh) { return MOE_HDR + (size_t)sh.tokens * moe_ob(sh); }
MOE_HD size_t moe_send(moe_shape sh, int d) { return (size_t)d * moe_bd(sh); }
MOE_HD size_t moe_recv(moe_shape sh, int s) { return ((size_t)sh.ep + (size_t)s) * moe_bd(sh); }
MOE_HD size_t moe_out(moe_shape sh, int s) { return 2 * (size_t)sh.ep * moe_bd(sh) + (size_t)s * moe_bc(sh); }
MOE_HD size_t moe_ret(moe_shape sh, int d) { return 2 * (size_t)sh.ep * moe_bd(sh) + ((size_t)sh.ep + (size_t)d) * moe_bc(sh); }
MOE_HD size_t moe_region(moe_shape sh) { return 2 * (size_t)sh.ep * (moe_bd(sh) + moe_bc(sh)); }
#endif
