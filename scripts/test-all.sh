#!/usr/bin/env bash
# The whole test suite: rule-id coverage, the workspace tests (one shared target dir), and
# the engine's dependency/purity check. Run from anywhere: `bash scripts/test-all.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# Snapshots are never written in CI or by this script: a missing or changed snapshot fails.
export INSTA_UPDATE=no
echo "== SPEC.md rule ids cited by tests"
bash scripts/check-spec-ids.sh
echo "== engine purity"
bash scripts/check-engine-purity.sh
echo "== cargo test (workspace)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"
echo "== real Codex conformance (installs the pinned @openai/codex from npm into .cache/)"
bash scripts/test-real-codex.sh
echo "== simulation (madsim flavour, own target dir target/sim): seeds 1-20000, every run"
bash sim/run.sh --seeds 20000 --jobs 2
# The oracle exists only in the madsim flavour, so its own unit tests (a check that must fire
# on a hand-made history) run there, not in the workspace's cargo test.
echo "== simulation: the oracle's unit tests (madsim flavour)"
CARGO_TARGET_DIR=target/sim RUSTFLAGS="--cfg madsim" cargo test --release --locked -p wakterm-sim --lib 2>&1 | tee -a "$log"
# Exploration: each run also takes 20,000 more seeds, a range chosen from the hash of the tree
# under test (a rebase of the same tree keeps it), so CI explores new scenarios over time.
# Seeds past the gate's range found bugs it had missed (the ninth session's SUB-1 and MGD-6,
# the tenth's ADM-17, the twelfth's EV-7). It reported without failing the run while known
# failures stood past the gate (seeds 77782850 and 77787078, fixed in the eleventh session);
# with none left it is a gate too (thirteenth session): a failure is a real bug, reproduced by
# the printed command. It fails the run at the end, after the mutants, so one run shows all.
tree=$(git rev-parse 'HEAD^{tree}' 2>/dev/null || echo 0)
tree=${tree:0:7}
from=$(( (16#$tree % 4999 + 1) * 20000 + 1 ))
echo "== simulation exploration (a gate, a new range per tree): seeds $from-$((from + 19999)), chosen by tree $tree (reproduce: bash sim/run.sh --from $from --seeds 20000 --jobs 2)"
explore_log=$(mktemp)
explored="clean"
if ! bash sim/run.sh --from "$from" --seeds 20000 --jobs 2 >"$explore_log" 2>&1; then
  explored="FAILED: $(grep -cE '^FAIL seed' "$explore_log" || true) seeds (listed above; each one is a bug to fix)"
  grep -E '^FAIL seed|^  violation|^reproduce' "$explore_log" || tail -20 "$explore_log"
fi
tail -n1 "$explore_log"
rm -f "$explore_log"
echo "== simulation: determinism (same seed twice + madsim's check)"
bash sim/run.sh --check-determinism 3
echo "== simulation: every planted mutant must be caught"
mutants=$(bash sim/run.sh --list-mutants | awk '{print $1}')
[ -n "$mutants" ] || { echo "no mutants listed" >&2; exit 1; }
# Its own file (not a fixed name in /tmp, which two runs on one machine would share).
mutant_log="$(mktemp "${TMPDIR:-/tmp}/wakterm-mutant.XXXXXX")"
trap 'rm -f "$log" "$mutant_log"' EXIT
for mutant in $mutants; do
  # A run stops at the first seed that catches the mutant, so the budget costs only the rare
  # ones: `any_holder_read` needs a late resume, a holder restart and a written prompt's turn
  # start lost with the old holder, together. It was caught at seeds 6, 120, 12155 and 18486 of
  # 1-30,000 once, at 3,114 in the twenty-eighth session's first CI, then (the fault plan
  # drawing one more value) not within 40,000 seeds: first at 104,881; with that draw moved
  # last, at 18,213. Rarer than the one in 7,500 the 40,000 were sized for, so it gets 160,000
  # (about 8 minutes of CI if a change pushes it that far).
  # `resume_announced_at_cursor` needs a resume past a checkpoint with a turn's records
  # between; caught at seed 3,212 until the forty-fourth session's new draws (a TUI that queues
  # an Enter, same-text humans within 50 ms) moved it to 40,244: 80,000 (about 2 minutes).
  seeds=40000
  [ "$mutant" = any_holder_read ] && seeds=160000
  [ "$mutant" = resume_announced_at_cursor ] && seeds=80000
  # Caught means the simulator's own report says so (exit 1 and "mutant NAME CAUGHT"): a run
  # that failed for another reason (bad arguments exit 2, a crash of the simulator itself) is
  # no catch. How it was caught (the oracle's violation kind, or a panic of an engine or driver
  # assertion) is printed beside the seed.
  rc=0
  bash sim/run.sh --mutant "$mutant" --seeds "$seeds" --jobs 2 >"$mutant_log" 2>&1 || rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qx "mutant $mutant CAUGHT" "$mutant_log"; then
    echo "mutant $mutant was NOT caught (exit $rc)" >&2
    tail -5 "$mutant_log" >&2
    rm -f "$mutant_log"
    exit 1
  fi
  how=$(grep -m1 -oE 'VIOLATION [A-Za-z]+|^FAIL seed=[0-9]+ panic' "$mutant_log" | sed 's/^VIOLATION //; s/^FAIL seed=[0-9]* //' || true)
  echo "mutant $mutant caught: $(grep -m1 -oE 'seed[= ][0-9]+' "$mutant_log" || true) (${how:-?})"
done
rm -f "$mutant_log"
echo "simulation exploration, seeds $from-$((from + 19999)): $explored"
passed=$(grep -E '^test result:' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -E '^test result:' "$log" | awk '{s+=$6} END {print s+0}')
echo "suite: $passed passed, $failed failed"
[ "$explored" = clean ] || exit 1
