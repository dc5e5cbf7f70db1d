# Sourced by scripts/ab-load.sh and scripts/holder-calls.sh (not run on its own).
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
