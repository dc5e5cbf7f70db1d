//! Test and demo doubles, documented programs of the workspace (never used by `wakterm-engine`):
//! a Codex-compatible fake TUI harness, a fake `codex app-server` and a loopback Responses-API
//! model provider.

pub mod fake_app_server;
pub mod fake_codex;
pub mod provider;
pub mod rollout_writer;
