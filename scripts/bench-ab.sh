#!/usr/bin/env bash
# A/B of two builds on this machine, for a host whose speed drifts (issue 10: within one hour the
# commit floor moved 0.24-0.69 ms and every process's CPU per request doubled for a while, so two
# single runs taken minutes apart compare the host, not the code). Builds BASE (a git revision)
# and NEW (a revision, or the working tree when omitted), then runs the quick benchmark
# alternately, BASE NEW BASE NEW ..., and prints the key rows of every run and their medians.
#
# Usage: bash scripts/bench-ab.sh BASE [NEW]
#   e.g. bash scripts/bench-ab.sh HEAD~1            the last commit against the working tree
# Knobs: AB_ROUNDS (alternations, default 3), AB_AGENTS (default 1,10), AB_BUSY (the watcher
#        rows' busy agents, default 10), AB_LOAD_SECS (each throughput and watcher run, default 8),
#        and any BENCH_* knob of scripts/bench.sh.
# Output: the table on stdout; each run's full results in target/bench-ab/results/.
# Exit: 0; 1 when a build or a run failed (its log is named).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
root="$(pwd)/target/bench-ab"
mkdir -p "$root/results"
rounds="${AB_ROUNDS:-3}"

# Builds one side; prints its release directory. A revision is built from a temporary worktree
# into a target directory named by its commit (reused by later runs); the working tree into
# target/bench, as scripts/bench.sh does.
build() {
    local rev="$1" sha dir tree
    if [ "$rev" = "." ]; then
        CARGO_TARGET_DIR=target/bench cargo build -q --release --locked -p wakterm-runtime --bin wakterm --example bench_suite >&2
        echo "$(pwd)/target/bench/release"
        return
    fi
    sha="$(git rev-parse --verify "$rev^{commit}")"
    dir="$root/${sha:0:12}"
    if [ ! -x "$dir/release/examples/bench_suite" ]; then
        tree="$root/src-${sha:0:12}"
        git worktree remove --force "$tree" 2>/dev/null || true
        git worktree add -q --detach "$tree" "$sha"
        (cd "$tree" && CARGO_TARGET_DIR="$dir" cargo build -q --release --locked -p wakterm-runtime --bin wakterm --example bench_suite) >&2 \
            || { git worktree remove --force "$tree"; echo "bench-ab: building $rev failed" >&2; exit 1; }
        git worktree remove --force "$tree"
    fi
    echo "$dir/release"
}

base_rev="$1"
new_rev="${2:-.}"
echo "bench-ab: building $base_rev and ${2:-the working tree}" >&2
base_dir="$(build "$base_rev")"
new_dir="$(build "$new_rev")"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"

export BENCH_QUICK=1
export BENCH_AGENTS="${AB_AGENTS:-1,10}"
export BENCH_BUSY="${AB_BUSY:-10}"
export BENCH_LOAD_SECS="${AB_LOAD_SECS:-8}"
export BENCH_RUNS="${BENCH_RUNS:-30}"
export BENCH_SLEEPS="${BENCH_SLEEPS:-10}"
export BENCH_ROLLOUT_MIB="${BENCH_ROLLOUT_MIB:-8}"
export BENCH_IDLE_SECS="${BENCH_IDLE_SECS:-1}"
status=0
files=()
for round in $(seq "$rounds"); do
    for side in base new; do
        dir="$base_dir"; [ "$side" = new ] && dir="$new_dir"
        out="$root/results/$stamp-$side-$round.md"
        echo "bench-ab: round $round/$rounds, $side ($(date -u +%T))" >&2
        if BENCH_COMMIT="$side" BENCH_RESULTS="$out" "$dir/examples/bench_suite" > "$out.log" 2>&1; then
            files+=("$side=$out")
        else
            echo "bench-ab: the $side run of round $round failed; see $out.log" >&2
            status=1
        fi
    done
done
echo "## bench-ab $stamp: base = $base_rev, new = ${2:-the working tree}, $rounds alternations (quick runs, agents $BENCH_AGENTS)"
python3 - "${files[@]}" <<'EOF'
import re, statistics, sys
# The rows to compare, by how their label in results.md starts.
keys = ["SQLite commit of one small row",
        "`agent admit --return-final` receipt, socket, p50",
        "throughput,",
        "daemon CPU per admission+completion,",
        "task_complete written -> `request watch` prints it"]
runs = {"base": [], "new": []}
for arg in sys.argv[1:]:
    side, path = arg.split("=", 1)
    rows = {}
    for line in open(path, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not any(cells[0].startswith(k) for k in keys):
            continue
        number = re.match(r"[0-9.]+", cells[1].replace(",", ""))
        if number:
            rows[cells[0]] = (float(number.group()), cells[1][number.end():].strip())
    runs[side].append(rows)
labels = []
for runs_of_side in runs.values():
    for rows in runs_of_side:
        labels += [label for label in rows if label not in labels]
print("| row | base runs | base median | new runs | new median |")
print("|---|---|---|---|---|")
for label in labels:
    cols = []
    unit = ""
    for side in ("base", "new"):
        values = [rows[label][0] for rows in runs[side] if label in rows]
        unit = next((rows[label][1] for rows in runs[side] if label in rows), unit)
        cols.append(" / ".join(f"{v:g}" for v in values) or "—")
        cols.append(f"{statistics.median(values):g} {unit}" if values else "—")
    print(f"| {label} | {' | '.join(cols)} |")
EOF
exit "$status"
