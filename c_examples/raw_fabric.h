/* raw_fabric.h: the examples' raw baseline. The same libfabric provider
 * opened as fabriclib opens it (bench/src/raw.rs's hints: FI_EP_RDM,
 * FI_MSG|FI_RMA, the same mr_mode bits, FI_THREAD_DOMAIN), and the same
 * writes posted straight from the caller's loop: a window of operations in
 * flight, -FI_EAGAIN retried after reading the completion queue, the core
 * yielded every 16 empty polls (as the engine's worker and the bench's raw
 * baseline do). No engine, no request ids, no failure handling: any error
 * exits. rl_weight_push and moe_proxy move the same bytes through it in the
 * same run to measure the engine against the wire. */
#ifndef FABRICLIB_RAW_FABRIC_H
#define FABRICLIB_RAW_FABRIC_H
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RAW_CK(what, ret)                                                                           \
    do {                                                                                            \
        long r_ = (long)(ret);                                                                      \
        if (r_ < 0) { fprintf(stderr, "raw %s: %s (%ld)\n", what, fi_strerror((int)-r_), r_); exit(1); } \
    } while (0)

#define RAW_MAX_IMMS 64

/* What a peer needs to write into a region: the endpoint's name, the
 * region's base (0 unless FI_MR_VIRT_ADDR) and key. Plain bytes: it travels
 * over the examples' out-of-band sockets as it is. */
typedef struct {
    uint8_t name[256];
    uint64_t name_len, base, key;
} raw_remote;

typedef struct {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_mr *mr; /* the one region an endpoint registers here */
    void *desc;
    raw_remote self; /* this endpoint's name, and its region once registered */
    struct fi_context2 *ctx;
    size_t *free_ctx, nfree, window;
    unsigned empty_polls;
    uint32_t imm[RAW_MAX_IMMS]; /* remote CQ data seen, counted per value */
    uint64_t count[RAW_MAX_IMMS];
    size_t nimm;
} raw_ep;

/* An endpoint on `provider` ("tcp;ofi_rxm", "shm"); socket providers bind to `bind`. */
static inline raw_ep *raw_open(const char *provider, const char *bind) {
    raw_ep *r = calloc(1, sizeof *r);
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(provider);
    int sockets = strncmp(provider, "shm", 3) != 0; /* shm names itself; tcp binds an address */
    RAW_CK("fi_getinfo", fi_getinfo(FI_VERSION(1, 14), sockets ? bind : NULL, NULL, sockets ? FI_SOURCE : 0, hints, &r->info));
    fi_freeinfo(hints);
    RAW_CK("fi_fabric", fi_fabric(r->info->fabric_attr, &r->fabric, NULL));
    RAW_CK("fi_domain", fi_domain(r->fabric, r->info, &r->domain, NULL));
    r->window = r->info->tx_attr->size < 16 ? 16 : r->info->tx_attr->size > 1024 ? 1024 : r->info->tx_attr->size;
    struct fi_cq_attr cq = {.size = 4 * r->window, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr av = {.type = FI_AV_TABLE, .count = 64};
    RAW_CK("fi_cq_open", fi_cq_open(r->domain, &cq, &r->cq, NULL));
    RAW_CK("fi_av_open", fi_av_open(r->domain, &av, &r->av, NULL));
    RAW_CK("fi_endpoint", fi_endpoint(r->domain, r->info, &r->ep, NULL));
    RAW_CK("fi_ep_bind(av)", fi_ep_bind(r->ep, &r->av->fid, 0));
    RAW_CK("fi_ep_bind(cq)", fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV));
    RAW_CK("fi_enable", fi_enable(r->ep));
    size_t len = sizeof r->self.name;
    RAW_CK("fi_getname", fi_getname(&r->ep->fid, r->self.name, &len));
    r->self.name_len = len;
    r->ctx = calloc(r->window, sizeof *r->ctx);
    r->free_ctx = malloc(r->window * sizeof *r->free_ctx);
    for (size_t i = 0; i < r->window; i++) r->free_ctx[r->nfree++] = i;
    return r;
}

/* Registers [p, p + len) (one region per endpoint); r->self describes it to peers. */
static inline void raw_register(raw_ep *r, void *p, size_t len) {
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
    RAW_CK("fi_mr_reg", fi_mr_reg(r->domain, p, len ? len : 1, access, 0, 1, 0, &r->mr, NULL));
    if (r->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        RAW_CK("fi_mr_bind", fi_mr_bind(r->mr, &r->ep->fid, 0));
        RAW_CK("fi_mr_enable", fi_mr_enable(r->mr));
    }
    r->desc = fi_mr_desc(r->mr);
    r->self.key = fi_mr_key(r->mr);
    r->self.base = (r->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)p : 0;
}

static inline fi_addr_t raw_insert(raw_ep *r, const raw_remote *peer) {
    fi_addr_t a;
    if (fi_av_insert(r->av, peer->name, 1, &a, 0, NULL) != 1) { fprintf(stderr, "raw fi_av_insert failed\n"); exit(1); }
    return a;
}

/* Reads completions: local ones free their context, remote CQ data is counted. */
static inline void raw_poll(raw_ep *r) {
    struct fi_cq_data_entry e[64];
    ssize_t n = fi_cq_read(r->cq, e, 64);
    if (n == -FI_EAGAIN) {
        if (++r->empty_polls % 16 == 0) sched_yield();
        return;
    }
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {0};
        fi_cq_readerr(r->cq, &err, 0);
        fprintf(stderr, "raw completion error: %s\n", fi_strerror(err.err));
        exit(1);
    }
    RAW_CK("fi_cq_read", n);
    for (ssize_t i = 0; i < n; i++) {
        if (!(e[i].flags & FI_REMOTE_CQ_DATA)) {
            r->free_ctx[r->nfree++] = (size_t)((struct fi_context2 *)e[i].op_context - r->ctx);
            continue;
        }
        size_t k = 0;
        while (k < r->nimm && r->imm[k] != (uint32_t)e[i].data) k++;
        if (k == r->nimm) {
            if (r->nimm == RAW_MAX_IMMS) { fprintf(stderr, "raw: too many immediates\n"); exit(1); }
            r->imm[r->nimm] = (uint32_t)e[i].data, r->count[r->nimm++] = 0;
        }
        r->count[k]++;
    }
}

/* Writes `len` bytes at `src` (inside the registered region) into `dst`'s
 * region at offset `roff`; with `imm`, as fi_writedata. At most `window`
 * operations are in flight: past that it reads completions first. */
static inline void raw_write(raw_ep *r, const void *src, size_t len, fi_addr_t peer, const raw_remote *dst, uint64_t roff,
                             const uint32_t *imm) {
    for (;;) {
        while (!r->nfree) raw_poll(r);
        size_t c = r->free_ctx[--r->nfree];
        void *p = (void *)(uintptr_t)src;
        ssize_t ret = imm ? fi_writedata(r->ep, p, len, r->desc, *imm, peer, dst->base + roff, dst->key, &r->ctx[c])
                          : fi_write(r->ep, p, len, r->desc, peer, dst->base + roff, dst->key, &r->ctx[c]);
        if (ret == 0) return;
        r->free_ctx[r->nfree++] = c;
        if (ret != -FI_EAGAIN) RAW_CK(imm ? "fi_writedata" : "fi_write", ret);
        raw_poll(r);
    }
}

/* Waits until everything posted has completed locally. */
static inline void raw_drain(raw_ep *r) {
    while (r->nfree < r->window) raw_poll(r);
}

/* Waits until `n` writes carrying `imm` have landed here, and takes them off the count. */
static inline void raw_wait_imm(raw_ep *r, uint32_t imm, uint64_t n) {
    for (;;) {
        for (size_t k = 0; k < r->nimm; k++)
            if (r->imm[k] == imm && r->count[k] >= n) {
                r->count[k] -= n;
                return;
            }
        raw_poll(r);
    }
}

/* How many writes carrying `imm` have landed here so far (reads the queue once first). */
static inline uint64_t raw_count(raw_ep *r, uint32_t imm) {
    raw_poll(r);
    for (size_t k = 0; k < r->nimm; k++)
        if (r->imm[k] == imm) return r->count[k];
    return 0;
}

static inline void raw_close(raw_ep *r) {
    if (r->mr) fi_close(&r->mr->fid);
    fi_close(&r->ep->fid), fi_close(&r->av->fid), fi_close(&r->cq->fid);
    fi_close(&r->domain->fid), fi_close(&r->fabric->fid);
    fi_freeinfo(r->info);
    free(r->ctx), free(r->free_ctx), free(r);
}
#endif
