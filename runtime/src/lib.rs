//! wakterm runtime: binds the pure engine to real PTYs, Codex rollout files, /proc and SQLite.

pub mod holder;
pub mod app_server;
pub mod app_server_stream;
pub mod managed_observer;
pub mod observer;
pub mod observer_checkpoint;
pub mod monitor_recheck;
pub mod screen;
pub mod proc_probe;
pub mod json_fields;
pub mod rollout;
pub mod rollout_tail;
pub mod output_cursor;
pub mod output_page;
pub mod store;
#[cfg(not(madsim))]
pub mod daemon;
#[cfg(not(madsim))]
pub mod mcp;
pub mod driver;
pub mod logging;
pub mod paths;
pub mod protocol;
pub mod client;
#[cfg(not(madsim))]
pub mod cli;
#[cfg(not(madsim))]
pub mod demo;
#[cfg(not(madsim))]
pub mod mux;
