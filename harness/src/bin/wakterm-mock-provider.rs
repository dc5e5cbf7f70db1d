//! `wakterm-mock-provider`: the loopback Responses-API provider as a standalone program, for shell
//! scripts and for running the real Codex CLI against it.
//!
//!     wakterm-mock-provider [--port N] [--script FILE] [--log FILE] [--port-file FILE]
//!
//! Listens on 127.0.0.1 until killed. The port file is written (atomically, via rename) only once
//! the socket is listening, so a script can wait for it to appear and then read the port.

use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use wakterm_harness::provider::{Provider, ProviderConfig, Script};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Loopback Responses-API model provider for the real Codex CLI"
)]
struct Args {
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// JSON script: {"default_reply": "...{prompt}...", "rules": [{"contains", "reply", "delay_ms",
    /// "output_delay_ms", "fail", "commentary", "plan": {"explanation", "steps": [{"step", "status"}]}}]}
    /// (a plan answers with an `update_plan` call first: see `provider::script`).
    #[arg(long)]
    script: Option<PathBuf>,
    /// Append one JSON line per received request.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Write the bound port (decimal, newline-terminated) here once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
}

fn write_port_file(path: &Path, port: u16) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{port}\n"))?;
    std::fs::rename(&tmp, path)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let script = match &args.script {
        Some(path) => match Script::from_file(path) {
            Ok(script) => script,
            Err(e) => {
                eprintln!("wakterm-mock-provider: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => Script::default(),
    };
    let provider = match Provider::start(ProviderConfig {
        port: args.port,
        script,
        log_path: args.log,
    }) {
        Ok(provider) => provider,
        Err(e) => {
            eprintln!("wakterm-mock-provider: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(path) = &args.port_file {
        if let Err(e) = write_port_file(path, provider.port()) {
            eprintln!(
                "wakterm-mock-provider: cannot write port file {}: {e}",
                path.display()
            );
            return ExitCode::from(1);
        }
    }
    eprintln!(
        "wakterm-mock-provider: listening on {}",
        provider.base_url()
    );
    loop {
        // Serving happens on the provider's threads; the process ends when it is killed.
        std::thread::park();
    }
}
