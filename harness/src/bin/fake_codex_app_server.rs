//! `fake-codex-app-server`: a fake `codex app-server` (Codex 0.169) on stdio JSON-RPC, for tests
//! and demos. Knobs are environment variables (see `wakterm_harness::fake_app_server` or
//! `--help`).
//!
//!     fake-codex-app-server [app-server] [--listen stdio://]
//!
//! The optional `app-server` word and `--listen stdio://` are accepted so the fake can stand in for
//! a `codex` command line; no other transport exists.

use clap::Parser;
use wakterm_harness::fake_app_server::{
    ENV_BUSY, ENV_EXIT_PREFIX, ENV_FAIL_PREFIX, ENV_HOLD_MS, ENV_HOLD_PREFIX,
    ENV_REPLY, ENV_REPLY_DELAY_MS, ENV_STATE_DIR,
};

const KNOBS: &str = "\
Environment:
  WAKTERM_FAKE_APP_SERVER_REPLY           reply template, {prompt} = trimmed prompt (default `done: {prompt}`)
  WAKTERM_FAKE_APP_SERVER_REPLY_DELAY_MS  user message -> reply (default 50)
  WAKTERM_FAKE_APP_SERVER_HOLD_PREFIX     prompts starting with it wait HOLD_MS before any output
  WAKTERM_FAKE_APP_SERVER_HOLD_MS         (default 8000)
  WAKTERM_FAKE_APP_SERVER_FAIL_PREFIX     prompts starting with it end `failed`
  WAKTERM_FAKE_APP_SERVER_EXIT_PREFIX     prompts starting with it kill the process (SIGKILL) mid-turn
  WAKTERM_FAKE_APP_SERVER_BUSY            turn/start on a busy thread: steer (default, as the real one) | refuse
  WAKTERM_FAKE_APP_SERVER_STATE_DIR       thread records (default $CODEX_HOME/fake-app-server)
  CODEX_HOME                              default $HOME/.codex

Exit: 0 at end of stdin, 1 on an I/O error, 2 on unusable options.";

/// A fake `codex app-server` on stdio.
#[derive(Parser)]
#[command(name = "fake-codex-app-server", version, after_help = KNOBS)]
struct Cli {
    /// Accepted and ignored: lets the fake replace `codex` in `codex app-server`.
    #[arg(value_parser = ["app-server"])]
    subcommand: Option<String>,
    /// Transport; only stdio exists.
    #[arg(long, default_value = "stdio://", value_parser = ["stdio://"])]
    listen: String,
}

fn main() {
    let _ = Cli::parse();
    // Named here so `--help` and the library cannot drift apart silently.
    debug_assert!([
        ENV_REPLY,
        ENV_REPLY_DELAY_MS,
        ENV_HOLD_PREFIX,
        ENV_HOLD_MS,
        ENV_FAIL_PREFIX,
        ENV_EXIT_PREFIX,
        ENV_BUSY,
        ENV_STATE_DIR
    ]
    .iter()
    .all(|name| KNOBS.contains(name)));
    std::process::exit(wakterm_harness::fake_app_server::run_from_env());
}
