//! # wakterm-sim
//!
//! Deterministic simulation of the PRODUCTION driver (`wakterm_runtime::driver::run_driver`)
//! under madsim, on simulated ports with seeded faults, checked by an oracle that knows the
//! ground truth. Build with `--cfg madsim` (see `sim/run.sh`). Without it only the store model
//! and its contract suite (also run against real SQLite) are compiled.

pub mod contract;
pub mod store_model;

#[cfg(madsim)]
pub mod app_server;
#[cfg(madsim)]
pub mod mutant;
#[cfg(madsim)]
pub mod oracle;
#[cfg(madsim)]
pub mod world;
#[cfg(madsim)]
pub mod ports;
#[cfg(madsim)]
pub mod scenario;
#[cfg(madsim)]
pub mod runner;
