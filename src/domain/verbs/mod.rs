//! The verbs backend (ConnectX and other RDMA NICs through libibverbs, RC
//! queue pairs): being built (issue 21). So far: the bindings, loaded at
//! run time (lib.rs, sys.rs), what the machine's devices are (device.rs),
//! and how two RC queue pairs are connected (rc.rs), tested on Soft-RoCE in
//! a VM (scripts/rxe-vm.sh, tests/verbs.rs), and the `Domain` over them
//! (domain.rs), chosen by naming the provider `verbs`.
pub mod device;
mod domain;
pub mod lib;
pub mod rc;
pub mod sys;

pub use domain::VerbsDomain;
