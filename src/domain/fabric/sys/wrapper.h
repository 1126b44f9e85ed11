/* Everything fabriclib uses from libfabric. bindgen reads this file; the
 * static-inline calls (fi_writemsg, fi_cq_read, ...) get C wrappers that
 * build.rs compiles with cc (bindgen's wrap_static_fns). */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
