#!/usr/bin/env bash
# Builds the madsim flavour of the simulator in its own target directory and runs it.
#   sim/run.sh --seeds N              run seeds 1..N (add --from S0 to shift, --jobs J to parallelise)
#   sim/run.sh --seed S [--trace]     reproduce one seed (prints its trace hash; --trace the trace)
#   sim/run.sh --mutant NAME --seeds N  run with a planted bug; exits non-zero when it is caught
#   sim/run.sh --list-mutants
#   sim/run.sh --check-determinism K  each of seeds 1..K twice (trace hashes) and under madsim's check
#   the managed agent's once-known runtime gaps (note.mgd_*) fail by default; --lenient-mgd tolerates them
# The last line is the summary: seeds=N requests=R faults=F misclassified=0 duplicate_writes=0 wrong_finals=0 unfinished=0 evidence=0 stalled=0 steered=0
#   event_sequence=0 event_not_durable=0 event_order=0 event_gap=0 request_terminal_events=0 pruned_early=0
#   submit_false_acks=0 submit_write_states=0 interleaved=0 submit_receipts=0 submit_stalled=0
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=target/sim
export RUSTFLAGS="--cfg madsim"
cargo build --quiet --release -p wakterm-sim --bin sim >&2
exec "$CARGO_TARGET_DIR/release/sim" "$@"
