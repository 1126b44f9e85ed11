//! The verbs backend (ConnectX and other RDMA NICs through libibverbs, RC
//! queue pairs): being built (issue 21). So far: the bindings, loaded at
//! run time (lib.rs, sys.rs), what the machine's devices are (device.rs),
//! and how two RC queue pairs are connected (rc.rs), tested on Soft-RoCE in
//! a VM (scripts/rxe-vm.sh, tests/verbs.rs). The `Domain` over them comes
//! next.
pub mod device;
pub mod lib;
pub mod rc;
pub mod sys;
