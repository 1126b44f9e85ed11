//! How the engine tells the application that something finished, shared by
//! the API (`engine`) and the worker (`group`), and depending on neither:
//! request notification (a callback on the callback thread, or a store into
//! a flag word, with the error kept by id: `notify`), the futex flag words
//! themselves (`flag`), the immediate counters (`imm`), and peer state per
//! peer engine (`peer_state`).
pub mod flag;
pub mod imm;
pub mod notify;
pub mod peer_state;
