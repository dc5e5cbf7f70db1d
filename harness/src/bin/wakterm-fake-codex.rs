//! `wakterm-fake-codex`: the fake Codex 0.169 TUI as a standalone binary (tests, demos).
//! Same options as `wakterm fake-codex`; see `--help`.

use clap::Parser;
use wakterm_harness::fake_codex::{run, FakeCodexArgs};

/// A fake Codex 0.169 TUI: raw-mode composer, bracketed paste, turns and a rollout file.
#[derive(Parser)]
#[command(name = "wakterm-fake-codex", version)]
struct Cli {
    #[command(flatten)]
    args: FakeCodexArgs,
}

fn main() {
    std::process::exit(run(Cli::parse().args));
}
