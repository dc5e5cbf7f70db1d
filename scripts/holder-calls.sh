#!/usr/bin/env bash
# The daemon's calls to one agent's holder per admission, by request kind (issue 10, MON-3):
# a fresh daemon with one idle fake Codex agent, then N serial `admit --return-final` calls on
# the socket, each waiting for its terminal event, while `strace` records what the holder reads.
# Prints one line per kind: calls per admission, e.g. "1.03 screen".
#
# Usage: bash scripts/holder-calls.sh WAKTERM_BIN [N]
#   WAKTERM_BIN: a built `wakterm` (e.g. target/bench/release/wakterm); N: admissions (100).
# Needs: strace, python3. Exit: 0; 2 on bad usage.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
bin="$(realpath "$1")"; n="${2:-100}"
# shellcheck source=scripts/fake-agents.sh
. "$(dirname "$0")/fake-agents.sh"
strace_workspace holder-calls
fake_agents "$bin" "$work" 1
holder=$(pgrep -f -- "__holder.*$work" | head -1)
[ -n "$holder" ] || { echo "holder-calls: no holder process found" >&2; exit 1; }
strace -f -qq -s 40 -e trace=read,recvfrom,recvmsg -o "$work/trace" -p "$holder" &
tracer=$!
sleep 1
serial_admissions "$bin" "$work" "$n"
sleep 1.5
stop_tracer
grep -o 'op\\":\\"[a-z_]*' "$work/trace" | sed 's/.*"//' | sort | uniq -c | awk -v n="$n" '{printf "%6.2f %s\n", $1 / n, $2}'
