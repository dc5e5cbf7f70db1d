//! wakterm runtime: binds the pure engine to real PTYs, Codex rollout files, /proc and SQLite.

pub mod holder;
pub mod proc_probe;
pub mod rollout;
pub mod rollout_tail;
pub mod store;
