//! The worker's pure tables: plain data structures with their invariants on
//! top and unit tests beside them, that need no provider to change or test.
//! The request table (`slots`), work-request tokens (`token`), the regions
//! and destination descriptors requests name by index (`held`), and
//! deadlines (`timers`).
pub(super) mod held;
pub(super) mod slots;
pub(super) mod timers;
pub(super) mod token;
