#!/usr/bin/env bash
# The benchmark of issue 10: the real `wakterm` (release) with fake Codex agents
# (`--reply-delay-ms 0`), every row printed beside this machine's floor measured in the same run
# (fsync, SQLite commit, CLI spawn, socket round trip) and the ratio, as a Markdown table that is
# also written to target/bench/results.md. The rows: runtime/examples/bench_suite.rs.
#
# Usage: bash scripts/bench.sh                 full: 1/10/100 agents, 1 GiB rollout, 1,000 sleeps,
#                                              1,000,000 admissions of history (about 10 min)
#        BENCH_QUICK=1 bash scripts/bench.sh   smoke: 1/3/5 agents, 64 MiB rollout, 100 sleeps, 50,000
# Knobs: BENCH_RUNS (samples per latency row), BENCH_AGENTS (e.g. 1,10,100), BENCH_BUSY,
#        BENCH_ROLLOUT_MIB, BENCH_BURST_MESSAGES, BENCH_SLEEPS, BENCH_LOAD_SECS, BENCH_IDLE_SECS,
#        BENCH_RESULTS, BENCH_WORLDS (which worlds to run: scaling,burst,restart, the default;
#        the rows of the others say "not measured" and the exit is 1).
# Exit: 0, 1 when a row could not be measured (the table says why), 130 when interrupted.
set -euo pipefail
cd "$(dirname "$0")/.."
# Its own target directory: relinking target/release/wakterm would break every daemon already
# running from that path (its holders re-exec it). BENCH_TARGET_DIR moves it elsewhere (never
# CARGO_TARGET_DIR, which may point at the directory users run from).
export CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-target/bench}"
cargo build --release --locked -p wakterm-runtime --bin wakterm --example bench_suite --example bench_history
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain -- engine runtime harness Cargo.toml Cargo.lock 2>/dev/null)" ]; then
    commit="$commit + uncommitted changes"
fi
export BENCH_COMMIT="${BENCH_COMMIT:-commit $commit}"
export BENCH_RESULTS="${BENCH_RESULTS:-$CARGO_TARGET_DIR/results.md}"
status=0
"$CARGO_TARGET_DIR/release/examples/bench_suite" "$@" || status=$?
# Issue 11: N one-way admissions and their events through the driver, engine and store
# (runtime/examples/bench_history.rs): memory and receipt latency at the start and the end.
# BENCH_HISTORY=0 skips it; the default is 1,000,000 (50,000 with BENCH_QUICK=1).
history="${BENCH_HISTORY:-$([ -n "${BENCH_QUICK:-}" ] && echo 50000 || echo 1000000)}"
if [ "$history" != 0 ]; then
    echo
    echo "== history: $history one-way admissions through the driver, engine and store (100 agents)"
    "$CARGO_TARGET_DIR/release/examples/bench_history" "$history" 100 | tee "$CARGO_TARGET_DIR/history.md" || status=1
fi
exit "$status"
