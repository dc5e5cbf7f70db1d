#!/usr/bin/env bash
# Latency benchmark of the real `wakterm` binary with one fake Codex agent:
# `agent send` / `agent admit --return-final` invoke -> receipt, and task_complete -> watch event.
# Usage: bash scripts/bench.sh            (BENCH_RUNS=N to change the 50 runs per measurement)
set -euo pipefail
cd "$(dirname "$0")/.."
# Its own target directory: relinking target/release/wakterm would break every daemon already
# running from that path (its holders re-exec it).
export CARGO_TARGET_DIR=target/bench
cargo build --release --locked -p wakterm-runtime --bin wakterm --example bench_latency
exec "$CARGO_TARGET_DIR/release/examples/bench_latency" "$@"
