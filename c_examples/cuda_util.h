// What the CUDA examples share: CUDA(call) (exit with the runtime's message
// on any failure), the GPU's global clock, pinned host memory mapped into
// the GPU, and a watcher whose word a kernel bumps.
#ifndef FABRICLIB_CUDA_UTIL_H
#define FABRICLIB_CUDA_UTIL_H
#include <fabriclib.h>
#include "example_util.h"
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA(call)                                                                    \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));               \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

// %globaltimer: nanoseconds, one clock for every process on the GPU.
__device__ static inline uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// `bytes` of pinned host memory mapped into the GPU (a kernel's store there
// never page-faults): the host pointer, and the kernels' in *dev.
template <typename T> static T *mapped_host(size_t bytes, T **dev) {
    T *h = NULL;
    CUDA(cudaHostAlloc((void **)&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    memset((void *)h, 0, bytes);
    CUDA(cudaHostGetDevicePointer((void **)dev, (void *)h, 0));
    return h;
}

// A watcher calling cb(user_data, old, new) on the engine's watcher thread;
// *word gets the address a kernel bumps.
static fabriclib_watcher *example_watcher(fabriclib_engine *e, fabriclib_watcher_cb cb, void *user_data, volatile uint64_t **word) {
    fabriclib_watcher_opts o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.callback = cb;
    o.user_data = user_data;
    fabriclib_watcher *w;
    CHECK(fabriclib_watcher_create(e, &o, &w));
    uint64_t dev = 0;
    CHECK(fabriclib_watcher_device_ptr(w, &dev));
    *word = (volatile uint64_t *)dev;
    return w;
}
#endif
