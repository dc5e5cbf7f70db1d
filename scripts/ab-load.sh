#!/usr/bin/env bash
# A/B of the daemon's throughput and CPU per request under one steady load, two builds
# alternated quickly (issue 10). The full suite (scripts/bench.sh, scripts/bench-ab.sh) spends a
# minute or more per run on other rows, so on a host whose speed drifts by 2x within minutes its
# A/Bs often cannot resolve a 10-15 % change; this runs only the throughput loop (about 20 s per
# run), so the two sides of a pair see nearly the same host.
#
# Usage: bash scripts/ab-load.sh BASE_BIN NEW_BIN
#   BASE_BIN, NEW_BIN: two `wakterm` release binaries, e.g.
#     target/bench-ab/<commit>/release/wakterm (built by scripts/bench-ab.sh) and
#     target/bench/release/wakterm (built by scripts/bench.sh)
# Knobs: AB_ROUNDS (pairs, default 3), AB_AGENTS (fake Codex agents, default 10), AB_SECS (load
#        per run, default 8).
# The load: one socket caller per agent, each looping `admit --return-final` -> its terminal
# event on one `watch` stream (the suite's throughput rows); CPU is the daemon's utime+stime
# over the load, from /proc, divided by completions; switches are the voluntary context
# switches of the daemon's threads over the load (/proc/PID/task/*/status), divided by the same.
# Exit: 0; 1 when a run failed (its daemon is stopped either way).
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
base="$(realpath "$1")"; new="$(realpath "$2")"
for bin in "$base" "$new"; do [ -x "$bin" ] || { echo "ab-load: $bin is not an executable" >&2; exit 2; }; done
rounds="${AB_ROUNDS:-3}"; agents="${AB_AGENTS:-10}"; secs="${AB_SECS:-8}"
work="$(mktemp -d /tmp/wakterm-ab-load.XXXXXX)"
current=""
cleanup() {
    [ -n "$current" ] && WAKTERM_DATA_DIR="$work/data" "$current" mux stop --all >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=scripts/fake-agents.sh
. "$(dirname "$0")/fake-agents.sh"

# One run: a fresh daemon with $agents idle fake agents, each with a baseline turn, then the load.
# Prints "completions per_s cpu_ms switches".
run() {
    local bin="$1" pid
    current="$bin"
    fake_agents "$bin" "$work" "$agents" || return 1
    pid=$(cat "$work/data/run/mux.lock")
    "$bin" agent catalog | AB_SOCK="$work/data/run/mux.sock" AB_PID="$pid" AB_SECS="$secs" python3 -c '
import json, os, socket, sys, threading, time, uuid
sock, pid, secs = os.environ["AB_SOCK"], os.environ["AB_PID"], float(os.environ["AB_SECS"])
agents = json.load(sys.stdin)["agents"]
def call(req):
    s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sock)
    s.sendall((json.dumps(req) + "\n").encode()); line = s.makefile().readline(); s.close()
    return json.loads(line)["body"]
watch = socket.socket(socket.AF_UNIX); watch.connect(sock)
watch.sendall((json.dumps({"op": "watch", "after": 0, "once": False}) + "\n").encode())
waiters, lock = {}, threading.Lock()
def reader():
    for line in watch.makefile():
        event = json.loads(line).get("event") or {}
        with lock: done = waiters.pop(event.get("request_id"), None)
        if done: done.set()
threading.Thread(target=reader, daemon=True).start()
cpu = lambda: sum(int(x) for x in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[11:13])
def switches():
    # Voluntary context switches of the daemon'"'"'s live threads (a hand-off between threads, or a
    # wait for I/O); far steadier across runs on this host than CPU time. A thread that ends
    # during the load (tokio drops blocking threads idle for 10 s) takes its count with it, so
    # the column can only undercount.
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try: status = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError: continue  # a thread that ended meanwhile
        total += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return total
completed, end = [0], time.time() + secs
def loop(agent):
    i = 0
    while time.time() < end:
        rid, done = str(uuid.uuid4()), threading.Event()
        with lock: waiters[rid] = done
        receipt = call({"op": "admit", "operation": "admit", "target": agent["name"], "exact_agent_id": False,
                        "incarnation": agent["incarnation"], "request_id": rid, "prompt": f"hello {i}",
                        "paste_mode": "bracketed", "return_mode": "return_final", "final_timeout_ms": 0})
        i += 1
        if receipt.get("classification") != "accepted":
            time.sleep(0.01); continue
        if done.wait(30): completed[0] += 1
before, switched, started = cpu(), switches(), time.time()
threads = [threading.Thread(target=loop, args=(a,)) for a in agents]
[t.start() for t in threads]; [t.join() for t in threads]
elapsed, ticks, switched = time.time() - started, cpu() - before, switches() - switched
hz = os.sysconf("SC_CLK_TCK")
done = max(completed[0], 1)
print(completed[0], "%.0f" % (completed[0] / elapsed), "%.2f" % (ticks * 1000 / hz / done), "%.1f" % (switched / done))
'
    "$bin" mux stop --all >/dev/null 2>&1 || true
    current=""
}

echo "## ab-load: base = $base, new = $new; $agents agents, $secs s per run, $rounds pairs"
echo "| pair | base per s | new per s | base daemon CPU ms/request | new daemon CPU ms/request | base switches/request | new switches/request |"
echo "|---|---|---|---|---|---|---|"
status=0
for r in $(seq "$rounds"); do
    b=$(run "$base") || { status=1; b="failed - - -"; }
    n=$(run "$new") || { status=1; n="failed - - -"; }
    read -r _ bps bcpu bsw <<< "$b"; read -r _ nps ncpu nsw <<< "$n"
    echo "| $r | $bps | $nps | $bcpu | $ncpu | $bsw | $nsw |"
done
exit "$status"
