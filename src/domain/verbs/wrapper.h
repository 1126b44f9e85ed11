/* What fabriclib takes from libibverbs at build time: its types and
 * constants only. build.rs runs bindgen on this file (rdma-core's headers,
 * Debian's libibverbs-dev); every function is resolved at run time from
 * libibverbs.so.1 (lib.rs), so libfabriclib.so has no DT_NEEDED on it, and
 * the inline data-path calls (ibv_post_send, ibv_poll_cq, ...) go through
 * the context's ops table from Rust, as the inline functions do. */
#include <infiniband/verbs.h>
