//! The verbs backend (ConnectX and other RDMA NICs through libibverbs, RC
//! queue pairs): the bindings, loaded at run time (lib.rs, sys.rs), what
//! the machine's devices are (device.rs), how RC queue pairs are
//! connected (rc.rs), and the `Domain` over them (domain.rs), chosen by
//! naming the provider `verbs`; tested on Soft-RoCE in a VM
//! (scripts/rxe-vm.sh, scripts/test-verbs.sh, tests/verbs.rs).
pub mod device;
mod domain;
pub mod lib;
pub mod rc;
pub mod sys;

pub use domain::VerbsDomain;
