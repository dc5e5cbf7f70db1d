//! Test-only crash points of the real daemon (SPEC REC-5). `WAKTERM_FAULT` names one; the
//! daemon SIGKILLs itself exactly there, so tests can prove what each crash window leaves.
//! Read once at startup into the effects (no global state).

/// Environment variable selecting a crash point.
pub const FAULT_ENV: &str = "WAKTERM_FAULT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    /// The registration is durable; nothing was written to the pane.
    AfterRegister,
    /// The prompt was written; the submitted marker is not durable yet.
    AfterWrite,
    /// The submitted marker is durable; the receipt was not returned yet.
    AfterSubmitted,
    /// `agent start`: the holder process was spawned; the caller has no answer yet (LIFE-1).
    AfterHolderSpawn,
    /// Not a crash: `agent catalog` pauses `CATALOG_PAUSE` between asking the engine and
    /// reading the agent table, so a test can start agents in between (EV-8).
    CatalogPause,
    /// Not a crash: an admission's write or a submit's split write pauses `WRITE_PAUSE` after
    /// the engine asked for it (after its look) and before the holder call, so a test can type
    /// in between (ADM-4, SUB-1).
    WritePause,
}

/// How long [`FaultPoint::CatalogPause`] pauses.
pub const CATALOG_PAUSE: std::time::Duration = std::time::Duration::from_millis(300);

/// How long [`FaultPoint::WritePause`] pauses (well within the writes' bounds).
pub const WRITE_PAUSE: std::time::Duration = std::time::Duration::from_millis(1_000);

/// The log line [`FaultPoint::WritePause`] writes as its pause begins.
pub const WRITE_PAUSED_LOG: &str = "test fault: a pane write pauses before the holder call";

/// [`FaultPoint::WritePause`]: says so in the log, then pauses (on a blocking thread).
pub fn pause_write_if(selected: Option<FaultPoint>) {
    if selected == Some(FaultPoint::WritePause) {
        tracing::info!("{WRITE_PAUSED_LOG}");
        std::thread::sleep(WRITE_PAUSE);
    }
}

impl FaultPoint {
    /// The crash point named by `WAKTERM_FAULT`, or an error for an unknown name (a typo must
    /// not silently disable a crash test).
    pub fn from_env() -> Result<Option<FaultPoint>, String> {
        let Some(value) = std::env::var_os(FAULT_ENV) else { return Ok(None) };
        match value.to_str() {
            Some("") => Ok(None),
            Some("after_register") => Ok(Some(FaultPoint::AfterRegister)),
            Some("after_write") => Ok(Some(FaultPoint::AfterWrite)),
            Some("after_submitted") => Ok(Some(FaultPoint::AfterSubmitted)),
            Some("after_holder_spawn") => Ok(Some(FaultPoint::AfterHolderSpawn)),
            Some("catalog_pause") => Ok(Some(FaultPoint::CatalogPause)),
            Some("write_pause") => Ok(Some(FaultPoint::WritePause)),
            _ => Err(format!("{FAULT_ENV}={value:?} is not one of after_register, after_write, after_submitted, after_holder_spawn, catalog_pause, write_pause")),
        }
    }
}

/// Crashes the daemon at `point` when it is the selected one.
pub fn crash_if(selected: Option<FaultPoint>, point: FaultPoint) {
    if selected == Some(point) {
        eprintln!("wakterm: {FAULT_ENV} crash point {point:?} reached; SIGKILL");
        // SAFETY: kill on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        // SIGKILL cannot be caught; wait for it to land rather than run on.
        loop {
            std::thread::park();
        }
    }
}
