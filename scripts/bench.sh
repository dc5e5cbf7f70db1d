#!/usr/bin/env bash
# The benchmark of issue 10: the real `wakterm` (release) with fake Codex agents
# (`--reply-delay-ms 0`), every row printed beside this machine's floor measured in the same run
# (fsync, SQLite commit, CLI spawn, socket round trip) and the ratio, as a Markdown table that is
# also written to target/bench/results.md. The rows: runtime/examples/bench_suite.rs.
#
# Usage: bash scripts/bench.sh                 full: 1/10/100 agents, 1 GiB rollout, 1,000 sleeps
#        BENCH_QUICK=1 bash scripts/bench.sh   smoke: 1/3/5 agents, 64 MiB rollout, 100 sleeps
# Knobs: BENCH_RUNS (samples per latency row), BENCH_AGENTS (e.g. 1,10,100), BENCH_BUSY,
#        BENCH_ROLLOUT_MIB, BENCH_SLEEPS, BENCH_LOAD_SECS, BENCH_IDLE_SECS, BENCH_RESULTS.
# Exit: 0, 1 when a row could not be measured (the table says why), 130 when interrupted.
set -euo pipefail
cd "$(dirname "$0")/.."
# Its own target directory: relinking target/release/wakterm would break every daemon already
# running from that path (its holders re-exec it). BENCH_TARGET_DIR moves it elsewhere (never
# CARGO_TARGET_DIR, which may point at the directory users run from).
export CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-target/bench}"
cargo build --release --locked -p wakterm-runtime --bin wakterm --example bench_suite
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain -- engine runtime harness Cargo.toml Cargo.lock 2>/dev/null)" ]; then
    commit="$commit + uncommitted changes"
fi
export BENCH_COMMIT="${BENCH_COMMIT:-commit $commit}"
export BENCH_RESULTS="${BENCH_RESULTS:-$CARGO_TARGET_DIR/results.md}"
exec "$CARGO_TARGET_DIR/release/examples/bench_suite" "$@"
