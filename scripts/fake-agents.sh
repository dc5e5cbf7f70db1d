# Sourced by scripts/ab-load.sh, scripts/holder-calls.sh and scripts/wal-frames.sh (not run on
# its own).
# fake_agents BIN WORK N: a fresh daemon of BIN with its data in WORK/data, then N fake Codex
# agents named a1..aN (`--reply-delay-ms 0`, CODEX_HOME WORK/codex), each idle with one
# baseline turn done. Exports WAKTERM_DATA_DIR. Returns 1 (saying why) when not all of them
# became idle within 30 s.
fake_agents() {
    local bin="$1" work="$2" agents="$3" n=0 i
    rm -rf "$work/data" "$work/codex" "$work/cwd"
    mkdir -p "$work/data" "$work/codex" "$work/cwd"; chmod 700 "$work/data"
    export WAKTERM_DATA_DIR="$work/data"
    "$bin" mux start >/dev/null
    for i in $(seq "$agents"); do
        "$bin" agent start --name "a$i" --cwd "$work/cwd" --env "CODEX_HOME=$work/codex" -- "$bin" fake-codex --reply ok --reply-delay-ms 0 >/dev/null
    done
    for _ in $(seq 150); do
        n=$("$bin" agent catalog | python3 -c 'import json,sys; print(sum(a["state"] == "idle" for a in json.load(sys.stdin)["agents"]))')
        [ "$n" = "$agents" ] && break
        sleep 0.2
    done
    [ "$n" = "$agents" ] || { echo "fake_agents: only $n of $agents agents became idle" >&2; return 1; }
    for i in $(seq "$agents"); do "$bin" agent send "a$i" baseline >/dev/null; done
    sleep 1
}

# serial_admissions BIN WORK N: N `admit --return-final` calls to the first agent of the daemon
# in WORK/data, on the socket, one at a time, each waiting for its terminal event on one
# `watch` stream (every wait bounded by 30 s). Fails on a refused admission.
serial_admissions() {
    local bin="$1" work="$2" n="$3"
    "$bin" agent catalog | SOCK="$work/data/run/mux.sock" N="$n" python3 -c '
import json, os, socket, sys, uuid
sock, n = os.environ["SOCK"], int(os.environ["N"])
agent = json.load(sys.stdin)["agents"][0]
def call(request):
    s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sock)
    s.sendall((json.dumps(request) + "\n").encode()); line = s.makefile().readline(); s.close()
    return json.loads(line)["body"]
watch = socket.socket(socket.AF_UNIX); watch.settimeout(30); watch.connect(sock)
watch.sendall((json.dumps({"op": "watch", "after": 0, "once": False}) + "\n").encode())
events = watch.makefile()
for i in range(n):
    rid = str(uuid.uuid4())
    receipt = call({"op": "admit", "operation": "admit", "target": agent["name"], "exact_agent_id": False, "incarnation": agent["incarnation"],
                    "request_id": rid, "prompt": f"hello {i}", "paste_mode": "bracketed", "return_mode": "return_final", "final_timeout_ms": 0})
    assert receipt.get("classification") == "accepted", receipt
    while (json.loads(events.readline()).get("event") or {}).get("request_id") != rid:
        pass
'
}

# strace_workspace NAME: the common start of the scripts that strace a fake-agent daemon of
# `$bin` (holder-calls.sh, wal-frames.sh): refuses (exit 2) when `$bin` is not an executable or
# strace is missing, sets `work` to a fresh directory and `tracer` to "", and on exit stops the
# tracer and the daemon and removes `work`.
strace_workspace() {
    local name="$1"
    [ -x "$bin" ] || { echo "$name: $bin is not an executable" >&2; exit 2; }
    command -v strace >/dev/null || { echo "$name: strace is not installed" >&2; exit 2; }
    work="$(mktemp -d "/tmp/wakterm-$name.XXXXXX")"
    tracer=""
    trap strace_workspace_cleanup EXIT
}

strace_workspace_cleanup() {
    [ -n "$tracer" ] && kill "$tracer" 2>/dev/null || true
    WAKTERM_DATA_DIR="$work/data" "$bin" mux stop --all >/dev/null 2>&1 || true
    rm -rf "$work"
}

# stop_tracer: ends the strace started as `tracer` and waits for it to write its last lines.
stop_tracer() {
    kill "$tracer" 2>/dev/null || true
    wait "$tracer" 2>/dev/null || true
    tracer=""
}
