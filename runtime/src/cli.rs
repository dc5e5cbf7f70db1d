//! The `wakterm` command line (clap). JSON goes to stdout, one object per line for streams;
//! diagnostics go to stderr. Exit codes are documented in README.md and `protocol::exit`.

use crate::client;
use crate::paths::DataPaths;
use crate::protocol::{exit, AdmitRequest, ClientRequest, Reply};
use clap::{Args, Parser, Subcommand};
use std::io::Read;
use std::path::PathBuf;
use wakterm_engine::limits::echoed;
use wakterm_engine::{Operation, PasteMode, ReturnMode};

#[derive(Parser, Debug)]
#[command(name = "wakterm", version, about = "Hand prompts to terminal coding agents safely: admitted at most once, honest receipts, durable final answers.",
    after_help = "Exit codes: 0 ok/accepted, 1 error, 2 usage, 3 daemon not running, 4 rejected (nothing written), 5 indeterminate, 6 not found, 7 daemon unresponsive.\nData directory: $WAKTERM_DATA_DIR (an absolute path; set but empty is an error), else the platform data directory.")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The mux daemon: one per data directory.
    Mux {
        #[command(subcommand)]
        command: MuxCommand,
    },
    /// Agents, admission and return-final requests.
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Runs the whole flow on a built-in fake Codex in a private temporary data directory.
    Demo {
        /// The managed transport instead: a built-in fake `codex app-server` (seed 000's
        /// second transport, SPEC.md MGD).
        #[arg(long)]
        managed: bool,
    },
    /// An MCP server on stdin/stdout (tools: agent_catalog, agent_capabilities, agent_admit,
    /// request_get, request_wait, session). It talks to the daemon of this data directory:
    /// start one first with `wakterm mux start`.
    Mcp,
    /// A Codex-compatible fake TUI, for tests and the demo.
    FakeCodex(wakterm_harness::fake_codex::FakeCodexArgs),
    /// A fake `codex app-server` 0.169 (stdio JSON-RPC), for tests and `demo --managed`;
    /// knobs are WAKTERM_FAKE_APP_SERVER_* environment variables.
    #[command(name = "fake-codex-app-server")]
    FakeCodexAppServer {
        /// Accepted and ignored, so it can stand in for `codex` in `codex app-server`.
        #[arg(value_parser = ["app-server"])]
        subcommand: Option<String>,
    },
    /// Internal: the per-agent PTY holder process.
    #[command(name = "__holder", hide = true)]
    Holder(crate::holder::HolderArgs),
}

#[derive(Subcommand, Debug)]
pub enum MuxCommand {
    /// Starts the daemon; returns once it answers (or stays attached with --foreground).
    Start {
        /// Run the daemon in this process (for a supervisor) instead of in the background; it
        /// logs to mux.log in the data directory and stops on SIGTERM or SIGINT. Once its socket
        /// answers it prints one JSON line (schema wakterm.mux-ready.v1: pid, socket, data_dir,
        /// version) on standard output; a failed start prints a wakterm.error.v1 line, exit 1.
        #[arg(long)]
        foreground: bool,
        /// Keep at most this many of the newest agent events (EV-9).
        #[arg(long, default_value_t = crate::daemon::retention::DEFAULT_RETAIN_EVENTS, value_parser = clap::value_parser!(u64).range(1..))]
        retain_events: u64,
        /// Prune agent events older than this many days; 0 keeps them whatever their age (EV-9).
        /// The same window forgets finished requests (HIST-4): a request id replayed after it
        /// is admitted as a new request; 0 keeps them too.
        #[arg(long, default_value_t = crate::daemon::retention::DEFAULT_RETAIN_DAYS)]
        retain_days: u64,
        /// Keep the newest agent events up to this many MiB of stored JSON, pruning the oldest
        /// past it; 0 keeps them whatever their size (EV-9).
        #[arg(long, default_value_t = crate::daemon::retention::DEFAULT_RETAIN_MIB, value_parser = clap::value_parser!(u64).range(..=crate::daemon::retention::MAX_RETAIN_MIB))]
        retain_mib: u64,
    },
    /// Stops the daemon. Agents keep running unless --all.
    Stop {
        /// Also stop every agent (their processes end).
        #[arg(long)]
        all: bool,
    },
    /// Prints the daemon's pid, data directory, version, agent count and event retention (bounds and stored bytes).
    Status,
}

#[derive(Subcommand, Debug)]
pub enum AgentCommand {
    /// Starts an agent in its own PTY, held by a process that outlives the daemon. With
    /// --managed, COMMAND is a Codex app-server (`codex app-server`) driven over JSON-RPC
    /// instead of a TUI: wakterm starts (or, on restart, resumes) one thread and follows its
    /// notifications (transport app_server, correlation source agent_api_events).
    Start {
        /// The agent's name, unique among the daemon's agents, a stopped one's too until `agent stop` (targets name it, or its id).
        #[arg(long)]
        name: String,
        /// What runs in the pane: codex (return-final available) or other (one-way only).
        #[arg(long, default_value = "codex", value_parser = ["codex", "other"])]
        harness: String,
        /// COMMAND speaks the Codex app-server protocol on its stdio (seed 000's managed transport).
        #[arg(long)]
        managed: bool,
        /// Working directory (default: the current one).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Environment for the agent, repeatable: --env CODEX_HOME=/x
        #[arg(long = "env", value_name = "K=V")]
        env: Vec<String>,
        /// The agent's command and its arguments, after `--` (e.g. `-- codex`).
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Ends one agent and its process.
    Stop {
        /// Agent name or id.
        target: String,
    },
    /// Replaces the agent's process in the same pane (a new incarnation); starts a new pane
    /// from the stored command if the old one is gone.
    Restart {
        /// Agent name or id.
        target: String,
    },
    /// The same as `catalog`.
    List,
    /// Stable ids, incarnations, state and return-final availability of every agent.
    Catalog,
    /// Versioned operations and schemas this build supports.
    Capabilities,
    /// Watch and type into the agent's terminal. Detach with Ctrl-].
    Attach {
        /// Agent name or id.
        target: String,
    },
    /// The interactive command: writes, submits, waits briefly for acknowledgement.
    Send(SendArgs),
    /// The authoritative admission API for orchestrators.
    Admit(AdmitArgs),
    /// Seed 003's acknowledged submission (the MCP `session action=submit`): claims an idle
    /// agent with an empty composer, types TEXT (a prompt or a slash command such as /clear)
    /// and Enter, and waits up to --timeout-ms for the terminal to move after the Enter.
    /// Prints one receipt (schema wakterm.session-submit.receipt.v1). Exit 0 acknowledged;
    /// 4 rejected, nothing written (retry_safe: true); 5 written but not acknowledged, or
    /// failed part-way (retry_safe: false: never replay it automatically). No durable record:
    /// for a durable request with the turn's final answer use `agent admit --return-final`.
    Submit {
        /// Agent name, or its id with --exact-agent-id.
        target: std::ffi::OsString,
        /// TARGET is an agent id: skip display-name resolution.
        #[arg(long)]
        exact_agent_id: bool,
        /// How long to wait for post-Enter terminal movement (clamped to 250..=10000).
        #[arg(long, default_value_t = wakterm_engine::submit::SUBMIT_DEFAULT_TIMEOUT_MS)]
        timeout_ms: u64,
        /// The text; `-` reads it from standard input.
        text: std::ffi::OsString,
    },
    /// EXPERIMENTAL shadow page of the agent's normalised Codex output
    /// (schema wakterm.agent-output-shadow.experimental.v1). The first read is a baseline;
    /// pass its next_cursor back with --after. Exit 0 page; 4 cursor_invalid, session_changed
    /// or record_skipped (a gap: record it, go on from its baseline_cursor) or
    /// unsupported_harness (no Codex record to page); 1 observer_unavailable; 2
    /// target_malformed (not a name or id); 6 unknown agent.
    Output {
        /// Agent name or id.
        target: String,
        /// The opaque next_cursor of the previous page (never decode it).
        #[arg(long)]
        after: Option<String>,
    },
    /// The durable Agent API event stream (schema wakterm.agent-events.v1): one JSON object
    /// per event, in sequence order; stays attached. Sequences survive restarts and are never
    /// reused. To start without missing anything, take `agent catalog` and pass its
    /// events_through to --after. Exit 4 cursor_too_old: the events after --after were
    /// pruned; rebase from a fresh catalog. Exit 4 cursor_ahead: --after lies past every event
    /// this data directory's daemon has stored (a cursor from elsewhere); rebase the same way.
    /// Exit 6 agent_unknown (no live agent has the name or id, and no stored event names the
    /// id), exit 2 too_many_agents (over 256 --agent filters) or target_malformed (an --agent
    /// that cannot name an agent). With --agent the stream ends
    /// (exit 0) once every agent it follows has stopped. A stream that breaks ends with one
    /// wakterm.error.v1 line on standard output (after the events; it has no `sequence`) naming
    /// `last_sequence`, the cursor to resume --after: exit 3 daemon_gone (no daemon answers),
    /// exit 1 stream_ended (a daemon answers: it restarted, or dropped this reader for falling
    /// more than 10 s behind, e.g. standard output not read), exit 7 daemon_unresponsive,
    /// exit 1 stdout_failed (standard output failed other than by being closed; said on
    /// standard error).
    /// Heartbeats are not printed; see --bookmarks.
    Events {
        /// Resume after this sequence. 0 reads from the first event ever, which is only possible
        /// while retention has pruned nothing (else cursor_too_old: rebase from a catalog).
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Drain what is available now and exit.
        #[arg(long)]
        once: bool,
        /// Only this agent's events (name or id; repeatable). A name is resolved to the agent's
        /// id once, when the stream starts: another agent started later under that name is not
        /// followed.
        #[arg(long = "agent", value_name = "TARGET")]
        agents: Vec<String>,
        /// Also print bookmarks: {"schema": ..., "kind": "stream.bookmark", "last_sequence": N}
        /// means every event this stream selects up to N was printed, so --after N resumes it
        /// without a gap. Printed when the stream has covered more than the lines before it
        /// (at most every 5 s), and always at the end of --once. Without --agent, an event's
        /// own sequence is as good a cursor; with it, other agents' events move the bookmark
        /// on, so a cursor from it does not fall behind retention while the agent is quiet.
        /// A stream with --agent ends once every agent it follows has stopped; its last
        /// bookmark then says "ended": "agents_stopped" and lies at the last stop (or at the
        /// cursor, if they had stopped before it), never past it.
        #[arg(long)]
        bookmarks: bool,
    },
    /// Inspect, cancel or stream return-final requests.
    Request {
        #[command(subcommand)]
        command: RequestCommand,
    },
}

#[derive(Args, Debug)]
pub struct SendArgs {
    /// Agent name (or id).
    pub target: std::ffi::OsString,
    /// Arm a durable request whose terminal event carries the final answer of the turn this
    /// prompt starts; exits once armed (needs an idle Codex with a completed baseline turn).
    #[arg(long)]
    pub return_final: bool,
    /// Caller-owned UUID: repeating it with the same input never writes twice.
    #[arg(long)]
    pub request_id: Option<std::ffi::OsString>,
    /// Asynchronous deadline for --return-final; 0 (default) disables it.
    #[arg(long, default_value_t = 0)]
    pub final_timeout_ms: u64,
    /// Type the prompt unbracketed (never reported accepted without observer evidence).
    #[arg(long)]
    pub raw_paste: bool,
    /// Put the prompt's text in this request's `request.admitted` event (`agent events`);
    /// without it the stream and the database keep only its SHA-256.
    #[arg(long)]
    pub share_prompt: bool,
    /// Never write into a running turn: take an agent seen idle only, as `agent admit` does,
    /// without naming an incarnation. Refused (exit 4, nothing written) while a turn runs
    /// (busy/turn_active), while a written prompt's turn has not started
    /// (awaiting_turn_start), on a draft or a question, when the observer cannot tell
    /// (turn_state_unknown, observer_unavailable: a program that writes no Codex record). A
    /// replay of the request id returns the first call's receipt whatever this says.
    #[arg(long, conflicts_with = "return_final")]
    pub no_steer: bool,
    /// The prompt; `-` reads it from standard input.
    pub message: std::ffi::OsString,
}

#[derive(Args, Debug)]
pub struct AdmitArgs {
    /// Agent name, or its id with --exact-agent-id.
    pub target: std::ffi::OsString,
    /// The opaque process incarnation from `agent catalog` (required); a different one is
    /// refused. Without it the answer is an `invalid` receipt (`incarnation_required`, exit
    /// 4), as for other bad input (INP-5), not a usage error.
    #[arg(long)]
    pub incarnation: Option<std::ffi::OsString>,
    /// Caller-owned UUID: repeating it with the same input never writes twice.
    #[arg(long, required = true)]
    pub request_id: std::ffi::OsString,
    /// TARGET is a persisted agent id: skip display-name and catalog resolution.
    #[arg(long)]
    pub exact_agent_id: bool,
    /// Arm a durable request for the final answer of the turn this prompt starts.
    #[arg(long)]
    pub return_final: bool,
    /// Asynchronous deadline for --return-final; 0 (default) disables it.
    #[arg(long, default_value_t = 0)]
    pub final_timeout_ms: u64,
    /// Type the prompt unbracketed (never reported accepted without observer evidence).
    #[arg(long)]
    pub raw_paste: bool,
    /// Put the prompt's text in this request's `request.admitted` event (`agent events`);
    /// without it the stream and the database keep only its SHA-256.
    #[arg(long)]
    pub share_prompt: bool,
    /// The prompt; `-` reads it from standard input.
    pub message: std::ffi::OsString,
}

#[derive(Subcommand, Debug)]
pub enum RequestCommand {
    /// A request's current state, receipt and terminal event (once published).
    Get {
        /// The request id the admission was made with (its receipt's `request_id`).
        request_id: String,
        /// Also show the evidence trail: every step with its time and evidence, and for an
        /// `indeterminate` end the rule and evidence that decided it (SPEC RF-6).
        #[arg(long)]
        evidence: bool,
    },
    /// Ends a waiting return-final request as `cancelled` (the provider's turn is not interrupted).
    Cancel {
        /// The request id of the waiting return-final request.
        request_id: String,
    },
    /// One JSON object per terminal request, in sequence order; stays attached. Exit 4
    /// cursor_too_old (pruned) or cursor_ahead (--after past every stored terminal event).
    Watch {
        /// Resume after this terminal_event_sequence.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Drain what is available now and exit.
        #[arg(long)]
        once: bool,
    },
}

/// Accepts `wakterm cli agent ...` as a spelling of `wakterm agent ...` (seed 002).
pub fn normalise_args(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    if args.get(1).is_some_and(|a| a == "cli") {
        args.remove(1);
    }
    args
}

pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Mux { command } => with_data_dir(false, |paths| run_mux(&paths, command)),
        Command::Agent { command } => with_data_dir(false, |paths| run_agent(&paths, command)),
        Command::Mcp => with_data_dir(true, crate::mcp::run),
        Command::Demo { managed } => crate::demo::run(managed),
        Command::FakeCodexAppServer { .. } => wakterm_harness::fake_app_server::run_from_env(),
        Command::FakeCodex(args) => wakterm_harness::fake_codex::run(args),
        Command::Holder(args) => crate::holder::run_holder(args.into_config()),
    }
}

/// Runs `command` with the data directory, for the commands that use one only (CLI-2: one
/// whose path is no UTF-8 is refused, and `demo` or a holder, which never use it, must not be).
/// The MCP server's stdout is its JSON-RPC channel: its error goes to stderr.
fn with_data_dir(mcp: bool, command: impl FnOnce(DataPaths) -> i32) -> i32 {
    match DataPaths::from_env() {
        Ok(paths) => command(paths),
        Err(error) if mcp => {
            eprintln!("wakterm mcp: no data directory: {error}");
            exit::ERROR
        }
        Err(error) => print_reply(Reply::error(exit::ERROR, "no_data_dir", error.to_string())),
    }
}

/// CLI-3: prints a command's one answer. Standard output closed by its reader (`| head -c 10`)
/// is not an error of ours; any other failure (a full disk, an I/O error) is: the answer (an
/// admission's receipt with the only copy of its generated request id) goes to standard error
/// whole, then a `stdout_failed` line, and the exit is 1. It used to exit as if printed.
pub fn print_reply(reply: Reply) -> i32 {
    let line = serde_json::to_string(&reply.body).expect("json");
    match write_line(&line) {
        Ok(()) => reply.exit_code,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => reply.exit_code,
        Err(error) => {
            let failed = Reply::error(exit::ERROR, "stdout_failed", format!("cannot print to standard output ({error}); its answer (exit {}) is the line before this one", reply.exit_code));
            eprintln!("{line}");
            eprintln!("{}", failed.body);
            failed.exit_code
        }
    }
}

/// One line of output. False when standard output is closed (`| head -1`): `println!` panicked
/// there with a backtrace; a reader that has seen enough is not an error of ours.
fn print_line(line: &str) -> bool {
    write_line(line).is_ok()
}

fn run_mux(paths: &DataPaths, command: MuxCommand) -> i32 {
    match command {
        MuxCommand::Start { foreground: true, retain_events, retain_days, retain_mib } => {
            let retention = crate::daemon::retention::Retention { events: retain_events, days: retain_days, bytes: retain_mib.saturating_mul(1 << 20) };
            match crate::daemon::run_foreground(paths.clone(), retention) {
                Ok(()) => exit::OK,
                Err(message) => print_reply(Reply::error(exit::ERROR, "daemon_failed", message)),
            }
        }
        MuxCommand::Start { foreground: false, retain_events, retain_days, retain_mib } => {
            let retention = crate::daemon::retention::Retention { events: retain_events, days: retain_days, bytes: retain_mib.saturating_mul(1 << 20) };
            print_reply(crate::mux::start_background(paths, retention))
        }
        MuxCommand::Stop { all } => print_reply(crate::mux::stop(paths, all)),
        MuxCommand::Status => print_reply(client::call(paths, &ClientRequest::Status)),
    }
}

fn run_agent(paths: &DataPaths, command: AgentCommand) -> i32 {
    let request = match command {
        AgentCommand::Start { name, harness, managed, cwd, env, command } => {
            let cwd = cwd.or_else(|| std::env::current_dir().ok()).unwrap_or_default();
            // Canonical when it exists; else absolute, so the daemon's refusal names the
            // directory that is missing (CORR-14: it refuses a relative one as such).
            let cwd = std::fs::canonicalize(&cwd).or_else(|_| std::path::absolute(&cwd)).unwrap_or(cwd);
            // CORR-14: the directory goes to the daemon as text; a lossy copy of one that is no
            // UTF-8 named another directory (one with U+FFFD in its name, where the agent then
            // ran), or one that does not exist (a hostile run).
            let Some(cwd) = cwd.to_str().map(str::to_string) else {
                let message = format!("the working directory {} is not UTF-8: wakterm keeps it as text, and a lossy copy would name another directory; start the agent from (or pass --cwd) a directory whose path is UTF-8", cwd.display());
                return print_reply(Reply::error(exit::USAGE, "invalid_cwd", message));
            };
            let mut pairs = Vec::new();
            for item in env {
                // An empty key (`=v`) too: the holder refused it only after the daemon had begun
                // the start (`agent_start_failed`, exit 1; a review).
                let Some((key, value)) = item.split_once('=').filter(|(key, _)| !key.is_empty()) else {
                    return print_reply(Reply::error(exit::USAGE, "invalid_env", format!("--env expects K=V with a non-empty K, got {}", echoed(&item))));
                };
                pairs.push((key.to_string(), value.to_string()));
            }
            ClientRequest::AgentStart { name, harness, cwd, env: pairs, command, managed }
        }
        AgentCommand::Stop { target } => ClientRequest::AgentStop { target },
        AgentCommand::Restart { target } => ClientRequest::AgentRestart { target },
        AgentCommand::List | AgentCommand::Catalog => ClientRequest::Catalog,
        AgentCommand::Capabilities => ClientRequest::Capabilities,
        AgentCommand::Output { target, after } => ClientRequest::AgentOutput { target, after },
        AgentCommand::Submit { target, exact_agent_id, timeout_ms, text } => match submit_request(target, exact_agent_id, timeout_ms, &text) {
            Ok(request) => request,
            Err(reply) => return print_reply(reply),
        },
        AgentCommand::Attach { target } => return attach(paths, &target),
        AgentCommand::Events { after, once, agents, bookmarks } => {
            let request = ClientRequest::Events { after, once, agents };
            return match request.malformed_target() {
                Some(refused) => print_reply(refused),
                None => stream(paths, &request, bookmarks),
            };
        }
        AgentCommand::Send(args) => match admission(Operation::Send, args.target, None, args.request_id, false, args.return_final, args.final_timeout_ms, (args.raw_paste, args.share_prompt, args.no_steer), &args.message) {
            Ok(request) => request,
            Err(reply) => return print_reply(reply),
        },
        AgentCommand::Admit(args) => match admission(Operation::Admit, args.target, args.incarnation, Some(args.request_id), args.exact_agent_id, args.return_final, args.final_timeout_ms, (args.raw_paste, args.share_prompt, false), &args.message) {
            Ok(request) => request,
            Err(reply) => return print_reply(reply),
        },
        AgentCommand::Request { command } => match command {
            RequestCommand::Get { request_id, evidence } => ClientRequest::RequestGet { request_id, evidence },
            RequestCommand::Cancel { request_id } => ClientRequest::RequestCancel { request_id },
            RequestCommand::Watch { after, once } => return watch(paths, after, once),
        },
    };
    // INP-4: a usage error, before the daemon is asked (the daemon checks again).
    if let Some(refused) = request.malformed_target() {
        return print_reply(refused);
    }
    if let ClientRequest::Admit(admit) = &request {
        return print_reply(client::call_admission(paths, admit));
    }
    if let ClientRequest::Submit(submit) = &request {
        return print_reply(client::call_submit(paths, submit));
    }
    print_reply(client::call_pane_change(paths, &request))
}

#[allow(clippy::too_many_arguments)]
/// `(raw_paste, share_prompt, no_steer)`: the three input flags.
fn admission(operation: Operation, target: std::ffi::OsString, incarnation: Option<std::ffi::OsString>, request_id: Option<std::ffi::OsString>, exact_agent_id: bool, return_final: bool, final_timeout_ms: u64, (raw_paste, share_prompt, no_steer): (bool, bool, bool), message: &std::ffi::OsStr) -> Result<ClientRequest, Reply> {
    let limit = wakterm_engine::limits::MAX_PROMPT_BYTES;
    // The plain `send` request id is generated here, not in the daemon, so a caller whose reply
    // is lost still knows which request to replay.
    let generated_id = request_id.is_none();
    let return_mode = if return_final { ReturnMode::ReturnFinal } else { ReturnMode::OneWay };
    // INP-2, INP-4: an id or an incarnation that is no text gets the receipt the daemon gives a
    // malformed one (it was clap's usage error, exit 2, where a prompt or a target that is no
    // text was `invalid`, exit 4: two shapes for one kind of bad input, a hostile run).
    // An id that is no UUID was never stored: retry-safe, as the daemon's refusal of one says.
    let Ok(request_id) = request_id.map_or_else(|| Ok(uuid::Uuid::new_v4().to_string()), std::ffi::OsString::into_string) else {
        return Err(client::refused_input(operation, return_mode, None, false, "request_id_malformed", "the request id is not UTF-8".to_string()));
    };
    // After a malformed id (the nil UUID too) nothing else is judged (INP-2): the daemon's check
    // answers it.
    let id_malformed = !wakterm_engine::RequestId::parse(&request_id).is_ok_and(|id| !id.is_nil());
    let incarnation = match incarnation.map(std::ffi::OsString::into_string).transpose() {
        Ok(incarnation) => incarnation,
        Err(raw) if id_malformed => Some(raw.to_string_lossy().into_owned()),
        Err(_) => return Err(client::refused_input(operation, return_mode, Some(&request_id), !generated_id, "incarnation_malformed", "the incarnation is not UTF-8".to_string())),
    };
    // INP-1, answered locally: the request line would exceed what the daemon reads, or the
    // bytes are no text. A receipt as the daemon's (it was a bare error for non-UTF-8).
    let refused = |reason: &str, detail: String| client::refused_input(operation, return_mode, Some(&request_id), !generated_id, reason, detail);
    // INP-1: bytes that are no text get the same receipt from the argument as from `-` (the
    // argument was a bare usage error, a script saw two shapes for one bad input; a review).
    // INP-4: no agent name or id holds bytes that are no text; the same answer as the daemon's
    // for a target with white space (it was clap's usage error, exit 2, a CLI review). Before
    // the prompt, so standard input is not read for a request refused anyway.
    // After a malformed id, bytes that are no text are taken lossily: the daemon's check
    // answers the id first (INP-2; they were judged first, a review).
    let target = match target.into_string() {
        Ok(target) => target,
        Err(raw) if id_malformed => raw.to_string_lossy().into_owned(),
        Err(_) => return Err(refused("target_malformed", "the target is not UTF-8".to_string())),
    };
    let message = match message.to_str() {
        Some(message) => std::borrow::Cow::Borrowed(message),
        None if id_malformed => message.to_string_lossy(),
        None => return Err(refused("prompt_not_utf8", "the prompt argument is not UTF-8".to_string())),
    };
    let prompt = if message == "-" && id_malformed {
        String::new() // refused for its id whatever it says: standard input is not read
    } else if message == "-" {
        match read_stdin_prompt(&mut std::io::stdin().lock(), limit) {
            Ok(StdinPrompt::Text(text)) => text,
            Ok(StdinPrompt::TooLarge { bytes, exact }) => {
                let size = if exact { format!("{bytes} bytes") } else { format!("more than {bytes} bytes") };
                return Err(refused("prompt_too_large", format!("the prompt on standard input is {size}; the limit is {limit}")));
            }
            Err(reply) if reply.body["error"] == "prompt_not_utf8" => return Err(refused("prompt_not_utf8", "the prompt on standard input is not UTF-8".to_string())),
            Err(reply) => return Err(reply),
        }
    } else {
        message.to_string()
    };
    // (`client::call_admission` checks the size of what it sends: INP-1.)
    let admit = AdmitRequest {
        operation,
        target,
        exact_agent_id,
        incarnation,
        request_id: Some(request_id.clone()),
        prompt,
        paste_mode: if raw_paste { PasteMode::Raw } else { PasteMode::Bracketed },
        return_mode,
        final_timeout_ms,
        share_prompt,
        generated_id,
        no_steer,
    };
    // (`client::call_admission` refuses what needs no state before it connects: INP-1..5.)
    Ok(ClientRequest::Admit(admit))
}

/// `agent submit`: the text from the argument or standard input, bounded like a prompt.
/// INP-1: text that is no UTF-8, from the argument or `-`, gets the submit receipt
/// `invalid` / `prompt_not_utf8` (exit 4), as an oversized one does and as admissions do; it
/// was a usage error from the argument and a bare error from `-` (a review).
fn submit_request(target: std::ffi::OsString, exact_agent_id: bool, timeout_ms: u64, text: &std::ffi::OsStr) -> Result<ClientRequest, Reply> {
    let limit = wakterm_engine::limits::MAX_PROMPT_BYTES;
    // INP-4, as for admissions (`admission`).
    let Ok(target) = target.into_string() else {
        return Err(client::submit_refused("target_malformed", "the target is not UTF-8".to_string(), Some(timeout_ms)));
    };
    let not_utf8 = |whose: &str| client::submit_refused("prompt_not_utf8", format!("the text {whose} is not UTF-8"), Some(timeout_ms));
    let Some(text) = text.to_str() else {
        return Err(not_utf8("argument"));
    };
    let text = if text == "-" {
        match read_stdin_prompt(&mut std::io::stdin().lock(), limit) {
            Ok(StdinPrompt::Text(text)) => text,
            Ok(StdinPrompt::TooLarge { bytes, .. }) => {
                let detail = format!("the text on standard input is over {limit} bytes ({bytes} counted)");
                return Err(client::submit_refused("prompt_too_large", detail, Some(timeout_ms)));
            }
            Err(reply) if reply.body["error"] == "prompt_not_utf8" => return Err(not_utf8("on standard input")),
            Err(reply) => return Err(reply),
        }
    } else {
        text.to_string()
    };
    // (`client::call_submit` refuses what needs no state, and checks the size of what it
    // sends, before it connects: INP-1, INP-4.)
    Ok(ClientRequest::Submit(crate::protocol::SubmitRequest { target, exact_agent_id, text, timeout_ms: Some(timeout_ms) }))
}

/// How far past the limit an oversized prompt on standard input is counted (not kept), so
/// the refusal can say its size; an endless stream is cut here.
pub const STDIN_COUNT_BOUND: u64 = 64 * 1024 * 1024;

pub enum StdinPrompt {
    Text(String),
    /// Over the limit: `bytes` counted, `exact` when the stream ended within the count bound.
    TooLarge { bytes: u64, exact: bool },
}

/// INP-1 for `-`: reads at most one byte past `limit` into memory. A larger prompt is refused
/// as too large (whatever its encoding: a cut can split a UTF-8 character, which must not read
/// as `prompt_not_utf8`), with its size counted up to `STDIN_COUNT_BOUND`.
pub fn read_stdin_prompt(input: &mut impl Read, limit: usize) -> Result<StdinPrompt, Reply> {
    let stdin_error = |e: std::io::Error| Reply::error(exit::ERROR, "stdin", e.to_string());
    let mut bytes = Vec::new();
    input.take(limit as u64 + 1).read_to_end(&mut bytes).map_err(stdin_error)?;
    if bytes.len() > limit {
        let rest = std::io::copy(&mut input.take(STDIN_COUNT_BOUND), &mut std::io::sink()).map_err(stdin_error)?;
        let exact = rest < STDIN_COUNT_BOUND;
        return Ok(StdinPrompt::TooLarge { bytes: bytes.len() as u64 + rest, exact });
    }
    String::from_utf8(bytes)
        .map(StdinPrompt::Text)
        .map_err(|_| Reply::error(exit::USAGE, "prompt_not_utf8", "the prompt on standard input is not UTF-8"))
}

fn watch(paths: &DataPaths, after: u64, once: bool) -> i32 {
    stream(paths, &ClientRequest::Watch { after, once }, false)
}

/// EV-14: the line `agent events --bookmarks` prints for a bookmark.
pub const BOOKMARK_KIND: &str = "stream.bookmark";

/// Prints a stream's events, and with `bookmarks` its bookmarks (EV-14): each one that covers
/// more than the lines printed before it, and always the `--once` end's. A reader that closes
/// our standard output ends the stream quietly (exit 0); any other failure to print is an
/// error (exit 1) with the cursor of the last line printed.
fn stream(paths: &DataPaths, request: &ClientRequest, bookmarks: bool) -> i32 {
    // The cursor a reader holds: what it asked to start after, then what was printed.
    let mut printed = request.stream_cursor().map_or(0, |(after, _)| after);
    let mut failed: Option<std::io::Error> = None;
    let mut print = |line: &str, covers: u64, printed: &mut u64| match write_line(line) {
        Ok(()) => {
            *printed = (*printed).max(covers);
            true
        }
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => false,
        Err(error) => {
            failed = Some(error);
            false
        }
    };
    let result = client::stream(paths, request, |item| match item {
        client::StreamItem::Event { event, sequence } => print(&serde_json::to_string(event).expect("json"), sequence, &mut printed),
        client::StreamItem::Bookmark { last_sequence, end, agents_stopped } => {
            if agents_stopped {
                eprintln!("wakterm: every agent this stream follows has stopped: nothing more can come for them (the stream covered through {last_sequence})");
            }
            if !(bookmarks && (end || last_sequence > printed)) {
                // TERM-3: a reader that closed our output while nothing was printed (`| head
                // -1` after the backlog) is noticed at the heartbeat, not at the next event,
                // which may never come.
                return !stdout_reader_gone();
            }
            let mut line = serde_json::json!({"schema": wakterm_engine::AGENT_EVENTS_SCHEMA, "kind": BOOKMARK_KIND, "last_sequence": last_sequence});
            if agents_stopped {
                line["ended"] = serde_json::json!("agents_stopped");
            }
            print(&line.to_string(), last_sequence, &mut printed)
        }
    });
    if let Some(error) = failed {
        let mut reply = Reply::error(exit::ERROR, "stdout_failed", format!("cannot print to standard output ({error}); resume with --after {printed}"));
        reply.body["last_sequence"] = serde_json::json!(printed);
        eprintln!("{}", reply.body);
        return reply.exit_code;
    }
    match result {
        Ok(()) => exit::OK,
        Err(reply) => print_reply(reply),
    }
}

/// TERM-3: standard output is a pipe whose reader closed it (poll reports an error on the
/// write end). A file, a terminal or an open pipe is not; a failed poll says nothing.
fn stdout_reader_gone() -> bool {
    use rustix::event::{PollFd, PollFlags};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::empty())];
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    match rustix::event::poll(&mut fds, Some(&zero)) {
        Ok(_) => fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP),
        Err(_) => false,
    }
}

/// One line on standard output, flushed.
fn write_line(line: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush())
}

fn attach(paths: &DataPaths, target: &str) -> i32 {
    // INP-4, as for every command that names an agent: a usage error, before the daemon is asked.
    if let Some(detail) = wakterm_engine::target_malformed(target) {
        return print_reply(Reply::error(exit::USAGE, "target_malformed", format!("{detail}; nothing was attached")));
    }
    let catalog = client::call(paths, &ClientRequest::Catalog);
    if catalog.exit_code != exit::OK {
        return print_reply(catalog);
    }
    // An id in any spelling the daemon takes: this command answered `agent_unknown` to
    // `D532F7AB-...`, which the others resolve (a review).
    let agent = match client::catalog_agent(&catalog.body, target) {
        Ok(agent) => agent,
        Err(unknown) => return print_reply(unknown),
    };
    let agent_id = agent["agent_id"].as_str().unwrap_or_default();
    // MGD-1, MCP-4: a managed agent's pane is its app-server's JSON-RPC stdio. Keys typed there
    // started turns past admission (no claim, no record, no receipt), and its screen showed
    // the raw stream, prompts included.
    if agent["transport"] != "pty" {
        let message = format!("{target} is a managed app-server session: its pane carries JSON-RPC, not a terminal. Follow it with `agent events --agent {target}`, send prompts with `agent send` or `agent admit`; nothing was attached");
        return print_reply(Reply::error(exit::USAGE, "attach_needs_pty", message));
    }
    if agent["state"] == "stopped" {
        return print_reply(not_running(target, &agent, pane_evidence(&paths.holder_socket(agent_id), agent["transport"] == "pty")));
    }
    crate::holder::attach(&paths.holder_socket(agent_id), &format!("wakterm: attached to {target}; detach with Ctrl-]"))
}

/// LIFE-4: `attach` to a stopped agent: why it stopped, as far as its holder knows, while it
/// keeps the pane (10 minutes after the exit): the exit code (the catalog's), or why its
/// command could not start (`spawn_error`, LIFE-2: a failed `agent restart`), and the pane's
/// last screen (a Codex that exited at once says why there: not logged in, a bad flag).
fn not_running(target: &str, agent: &serde_json::Value, (screen, spawn_error): PaneEvidence) -> Reply {
    let why = match (&spawn_error, agent["exit_code"].as_i64()) {
        (Some(error), _) => format!(" (its command could not start: {error})"),
        (None, Some(code)) => format!(" (it exited with code {code})"),
        (None, None) => String::new(),
    };
    let shown = if screen.is_some() { "; its last screen is in last_screen" } else { "" };
    let message = format!("{target} has no running process{why}{shown}; `wakterm agent restart {target}` starts it again");
    let mut reply = Reply::error(exit::ERROR, "agent_not_running", message);
    reply.body["exit_code"] = agent["exit_code"].clone();
    reply.body["spawn_error"] = serde_json::json!(spawn_error);
    if let Some(lines) = screen {
        reply.body["last_screen"] = serde_json::json!(lines);
    }
    reply
}

/// What a stopped agent's holder still knows: the pane's screen (its blank rows above and
/// below dropped; PTY agents only: a managed agent's pane is its JSON-RPC stream, prompts and
/// all) and the last spawn's error. Nothing when no holder answers within 2 s (gone after a
/// reboot, or its linger ended).
type PaneEvidence = (Option<Vec<String>>, Option<String>);

fn pane_evidence(socket: &std::path::Path, pty: bool) -> PaneEvidence {
    let Ok(mut holder) = crate::holder::HolderClient::connect_with_timeout(socket, std::time::Duration::from_secs(2)) else { return (None, None) };
    let spawn_error = holder.info().ok().and_then(|info| info.spawn_error);
    let screen = pty.then(|| holder.screen().ok()).flatten().map(|screen| {
        let mut lines = screen.lines;
        while lines.last().is_some_and(|line| line.trim().is_empty()) {
            lines.pop();
        }
        let first = lines.iter().position(|line| !line.trim().is_empty()).unwrap_or(lines.len());
        lines.split_off(first)
    });
    (screen, spawn_error)
}

/// The `wakterm` program: parse the arguments (usage errors answered as structured JSON on
/// stdout, and readably on stderr), run, exit with the documented code. Shared by the
/// `wakterm` binary and the end-to-end suites' copy of it (`tests/`).
pub fn main_entry() -> ! {
    let args = normalise_args(std::env::args_os().collect());
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => {
            if !error.use_stderr() {
                let _ = error.print(); // --help, --version
                std::process::exit(0);
            }
            let body = serde_json::json!({"schema": "wakterm.error.v1", "error": "usage", "message": error.to_string().trim()});
            print_line(&body.to_string());
            let _ = error.print();
            std::process::exit(exit::USAGE);
        }
    };
    std::process::exit(run(cli));
}
