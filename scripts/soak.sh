#!/usr/bin/env bash
# Soak (not part of CI): N fake Codex agents for M minutes under random SIGKILLs of the daemon,
# holders and agents, descriptor-pressure windows and disk-full windows, then the checks of the
# simulator's oracle: one terminal event per request, no duplicate write (turns counted in the
# rollouts), no renumbering or consumer-visible gap in the terminal stream, every armed request
# ends. The driver and the checks are scripts/soak_check.py (python3, stdlib only).
#
# Usage: bash scripts/soak.sh [--agents N] [--minutes M] [--seed S] [--keep] [--no-build]
#                             [--disk-mb MB] [-- extra soak_check.py options, e.g. --verbose]
# Exit: 0 no violation, 1 violation(s) (the run's directory is kept), 2 the soak could not run,
# 130 interrupted (everything it started is stopped either way).
# Disk-full windows need a tmpfs for the data directory (mounting one needs root); without
# it they are skipped and the summary says why.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

agents=20 minutes=10 seed=$RANDOM keep=0 build=1 disk_mb=256 extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --agents) agents=$2; shift 2 ;;
        --minutes) minutes=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --disk-mb) disk_mb=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --no-build) build=0; shift ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

command -v python3 >/dev/null || { echo "soak.sh: needs python3" >&2; exit 2; }
if [ "$build" = 1 ]; then
    cargo build --locked -p wakterm-runtime --bin wakterm >&2
fi
built=$repo/target/debug/wakterm
[ -x "$built" ] || { echo "soak.sh: $built missing (run without --no-build)" >&2; exit 2; }
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain -- engine runtime harness 2>/dev/null)" ] || commit="$commit+uncommitted"

root=$(mktemp -d /tmp/wk-soak-XXXXXX)
exe=$root/bin/wakterm fs="" data=$root/data skip="" driver=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
        kill -TERM "$driver" 2>/dev/null || true
        sleep 1
        kill -KILL "$driver" 2>/dev/null || true
    fi
    # A killed daemon leaves holders behind: start one to stop them all, then SIGKILL whatever
    # still names our private data directory (only ours: matched by exact environment entry).
    if [ -x "$exe" ] && ! WAKTERM_DATA_DIR=$data timeout 30 "$exe" mux stop --all >/dev/null 2>&1; then
        WAKTERM_DATA_DIR=$data timeout 30 "$exe" mux start >/dev/null 2>&1 || true
        WAKTERM_DATA_DIR=$data timeout 30 "$exe" mux stop --all >/dev/null 2>&1 || true
    fi
    sleep 1
    local pid
    for pid in $(grep -lzxF "WAKTERM_DATA_DIR=$data" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
        [ "$pid" != $$ ] && kill -KILL "$pid" 2>/dev/null || true
    done
    if [ -n "$fs" ]; then
        if [ "$rc" != 0 ] || [ "$keep" = 1 ]; then cp -a "$data" "$root/data-copy" 2>/dev/null || true; fi
        umount "$fs" 2>/dev/null || umount -l "$fs" 2>/dev/null || true
    fi
    if { [ "$rc" != 0 ] && [ "$rc" != 130 ]; } || [ "$keep" = 1 ]; then
        echo "soak: run directory kept: $root (records/report.json, records/*.jsonl)" >&2
    else
        rm -rf "$root"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A private copy: a rebuild of target/ during the run must not mix two daemons' versions.
mkdir "$root/bin" && cp "$built" "$exe"
mkdir -m 0700 "$root/fs"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o "size=${disk_mb}m,mode=0700" wk-soak "$root/fs" 2>/dev/null; then
    fs=$root/fs data=$root/fs/data
elif [ "$(id -u)" != 0 ]; then
    skip="not root: cannot mount a private tmpfs to fill"
else
    skip="mount -t tmpfs failed"
fi

echo "soak: commit=$commit agents=$agents minutes=$minutes seed=$seed root=$root disk_full=${fs:+tmpfs ${disk_mb}MB}${skip}" >&2
python3 "$repo/scripts/soak_check.py" run --exe "$exe" --root "$root" --data "$data" \
    ${fs:+--fs "$fs"} ${skip:+--disk-full-skip "$skip"} \
    --agents "$agents" --minutes "$minutes" --seed "$seed" --commit "$commit" "${extra[@]}" &
driver=$!
wait "$driver"
