//! The per-agent PTY holder: a small detached process that owns one agent's PTY, so the agent
//! outlives a daemon crash, stop or upgrade.
//!
//! One holder per agent. It runs the agent's command in a PTY (portable-pty), keeps the last
//! [`OUTPUT_RING_BYTES`] of raw output with absolute offsets and a vt100 screen, and serves a
//! private Unix socket (directory 0700, socket 0600, peers of another uid refused) speaking the
//! line-delimited JSON protocol of [`protocol`]. The daemon talks to it through
//! [`HolderClient`]; a person watches and types through [`attach`].
//!
//! Lifecycle: [`spawn_holder`] starts `exe` (a binary whose entry point calls [`run_holder`]),
//! which binds the socket, forks, and lets its parent exit, so the holder is reparented away
//! from the daemon and sits in its own session. When the agent exits the holder keeps answering
//! for [`CHILD_EXIT_LINGER`], so a restarting daemon still learns the exit code, then leaves.

mod attach;
mod client;
mod daemonize;
mod output_ring;
mod pane;
pub mod protocol;
mod server;

use std::ffi::OsString;
use std::path::PathBuf;

pub use attach::{attach, DETACH_KEY};
pub use daemonize::log_path;
pub use server::FIRST_REQUEST_TIMEOUT;
pub use client::{
    spawn_holder, spawn_holder_with_args, write_call_bound, write_start_by, write_steps_call_bound, HolderClient,
    HolderError, Subscription, DEFAULT_CALL_TIMEOUT, HOLDER_CALL_TIMEOUT, SPAWN_READY_DEADLINE,
};
pub use output_ring::{OffsetBeyondEnd, OutputRing, RingSlice, OUTPUT_RING_BYTES};
pub use pane::{KILL_GRACE, WRITE_DEADLINE};
pub use protocol::{
    Cursor, HolderIdentity, InfoReply, KillReply, OutputPage, ScreenReply, StreamEvent, WireErrorKind, WriteOutcome,
};
pub use server::{run_holder, CHILD_EXIT_LINGER, MAX_CONNECTIONS, REBIND_GRACE, STREAM_HEARTBEAT};

/// What one holder runs and where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderConfig {
    pub socket_path: PathBuf,
    pub cwd: PathBuf,
    /// Set on top of the holder's own environment (TERM defaults to xterm-256color).
    pub env: Vec<(String, String)>,
    /// argv of the agent; never empty.
    pub command: Vec<String>,
    pub cols: u16,
    pub rows: u16,
    /// Fork away from the caller and redirect stdio to the log beside the socket. Only a
    /// foreground holder (for debugging, or a supervisor that wants it) sets this false.
    pub detach: bool,
    /// MGD-1: a raw terminal (no echo, no line editing, no output translation) for a
    /// program that speaks a byte protocol on its stdio (`codex app-server`'s JSON-RPC lines).
    pub raw: bool,
}

/// Longest socket path: sockaddr_un.sun_path holds 108 bytes with the terminating NUL.
pub const MAX_SOCKET_PATH_BYTES: usize = 107;
/// Most `--env` pairs one holder takes.
pub const MAX_ENV_PAIRS: usize = 256;
/// Most argv entries one command has.
pub const MAX_COMMAND_ARGS: usize = 1024;

impl HolderConfig {
    /// Checks every field against its limit; the error says which one failed.
    pub fn validate(&self) -> Result<(), String> {
        use std::os::unix::ffi::OsStrExt;
        let socket_len = self.socket_path.as_os_str().as_bytes().len();
        if socket_len == 0 || socket_len > MAX_SOCKET_PATH_BYTES {
            return Err(format!(
                "socket path must be 1..={MAX_SOCKET_PATH_BYTES} bytes, got {socket_len}"
            ));
        }
        if self
            .socket_path
            .parent()
            .is_none_or(|p| p.as_os_str().is_empty())
        {
            return Err("socket path needs a directory part".into());
        }
        if self.command.is_empty() || self.command.len() > MAX_COMMAND_ARGS {
            return Err(format!(
                "command must have 1..={MAX_COMMAND_ARGS} arguments"
            ));
        }
        if self.env.len() > MAX_ENV_PAIRS
            || self
                .env
                .iter()
                .any(|(k, _)| k.is_empty() || k.contains('='))
        {
            return Err(format!(
                "env takes at most {MAX_ENV_PAIRS} pairs with non-empty keys without '='"
            ));
        }
        if !(protocol::MIN_COLS..=protocol::MAX_COLS).contains(&self.cols)
            || !(protocol::MIN_ROWS..=protocol::MAX_ROWS).contains(&self.rows)
        {
            return Err(format!(
                "size must be {}..={} cols and {}..={} rows",
                protocol::MIN_COLS,
                protocol::MAX_COLS,
                protocol::MIN_ROWS,
                protocol::MAX_ROWS
            ));
        }
        Ok(())
    }

    /// The command line [`HolderArgs`] parses back into this config.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--socket".into(),
            self.socket_path.clone().into(),
            "--cwd".into(),
            self.cwd.clone().into(),
            "--cols".into(),
            self.cols.to_string().into(),
            "--rows".into(),
            self.rows.to_string().into(),
        ];
        // The agent's environment is NOT put on the command line, where every local user could
        // read it in /proc/PID/cmdline (API keys): `spawn_holder` passes it in the holder's own
        // environment (/proc/PID/environ is private to its owner), which the agent inherits.
        if !self.detach {
            args.push("--foreground".into());
        }
        if self.raw {
            args.push("--raw".into());
        }
        args.push("--".into());
        args.extend(self.command.iter().map(OsString::from));
        args
    }
}

/// Command-line form of [`HolderConfig`], for the `wakterm-holder` bin and `wakterm __holder`
/// (flatten it into the subcommand).
#[derive(Debug, Clone, clap::Args)]
pub struct HolderArgs {
    /// Unix socket to serve; its directory is created 0700 or must already be private.
    #[arg(long = "socket")]
    pub socket_path: PathBuf,
    /// Working directory of the agent.
    #[arg(long)]
    pub cwd: PathBuf,
    /// KEY=VALUE set in the agent's environment; repeatable.
    #[arg(long = "env", value_parser = parse_env_pair)]
    pub env: Vec<(String, String)>,
    #[arg(long, default_value_t = 80)]
    pub cols: u16,
    #[arg(long, default_value_t = 24)]
    pub rows: u16,
    /// Stay in the foreground: no fork, stdio kept.
    #[arg(long)]
    pub foreground: bool,
    /// A raw terminal for a program speaking a byte protocol on its stdio (no echo, no line
    /// discipline, no CR/LF translation).
    #[arg(long)]
    pub raw: bool,
    /// The agent's argv, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

impl HolderArgs {
    pub fn into_config(self) -> HolderConfig {
        HolderConfig {
            socket_path: self.socket_path,
            cwd: self.cwd,
            env: self.env,
            command: self.command,
            cols: self.cols,
            rows: self.rows,
            detach: !self.foreground,
            raw: self.raw,
        }
    }
}

fn parse_env_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: HolderArgs,
    }

    fn sample() -> HolderConfig {
        HolderConfig {
            socket_path: "/tmp/w/a.sock".into(),
            cwd: "/tmp".into(),
            env: vec![("A".into(), "x=y".into())],
            command: vec!["sh".into(), "-c".into(), "echo --cols".into()],
            cols: 100,
            rows: 30,
            detach: true,
            raw: true,
        }
    }

    /// A pane of one column or one row is refused: vt100 underflows there, and its panic
    /// ended the holder's reader thread (the pane never read its PTY again).
    #[test]
    fn hold_1_a_pane_of_one_column_or_one_row_is_refused() {
        for (cols, rows) in [(1, 30), (100, 1), (protocol::MAX_COLS + 1, 30)] {
            let error = HolderConfig { cols, rows, ..sample() }.validate().unwrap_err();
            assert!(error.contains("size must be 2..="), "{cols}x{rows}: {error}");
        }
        HolderConfig { cols: 2, rows: 2, ..sample() }.validate().expect("the smallest pane");
    }

    #[test]
    fn args_round_trip_through_clap_without_the_environment() {
        let cfg = sample();
        let mut argv = vec![OsString::from("holder")];
        argv.extend(cfg.to_args());
        assert!(!argv.iter().any(|a| a.to_string_lossy().contains("x=y")), "env values never go on argv");
        let parsed = Cli::try_parse_from(argv).unwrap().args.into_config();
        assert_eq!(parsed, HolderConfig { env: Vec::new(), ..cfg.clone() });
        let foreground = HolderConfig {
            detach: false,
            env: Vec::new(),
            ..cfg
        };
        let mut argv = vec![OsString::from("holder")];
        argv.extend(foreground.to_args());
        assert_eq!(
            Cli::try_parse_from(argv).unwrap().args.into_config(),
            foreground
        );
    }

    #[test]
    fn validate_names_the_bad_field() {
        assert!(sample().validate().is_ok());
        let empty = HolderConfig {
            command: vec![],
            ..sample()
        };
        assert!(empty.validate().unwrap_err().contains("command"));
        let huge = HolderConfig {
            cols: 5000,
            ..sample()
        };
        assert!(huge.validate().unwrap_err().contains("size"));
        let long = HolderConfig {
            socket_path: format!("/tmp/{}", "s".repeat(200)).into(),
            ..sample()
        };
        assert!(long.validate().unwrap_err().contains("socket path"));
        let bad_env = HolderConfig {
            env: vec![("".into(), "v".into())],
            ..sample()
        };
        assert!(bad_env.validate().is_err());
    }
}
