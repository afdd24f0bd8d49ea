//! The fault harness's parts: the clients' workload and the history they record, with the
//! checks run over it.

pub mod history;
pub mod workload;
