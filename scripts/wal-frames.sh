#!/usr/bin/env bash
# The WAL frames (pages written) and commits per serial admission, by table or index (issue 10):
# a fresh daemon with one idle fake Codex agent, 20 warm-up admissions, then N serial
# `admit --return-final` calls on the socket, each waiting for its terminal event, while
# `strace` records the daemon's writes to its WAL. A frame's header names its page; the pages
# are mapped to tables with SQLite's `dbstat` on the database afterwards. Prints one line per
# table, frames per admission, then the commits and fsyncs per admission, e.g.
# "  3.90 requests" ... "commits 3.05, fsyncs 3.40, frames 19.40 per admission".
#
# Usage: bash scripts/wal-frames.sh WAKTERM_BIN [N]
#   WAKTERM_BIN: a built `wakterm` (e.g. target/bench/release/wakterm); N: admissions (20).
# Needs: strace, python3 (with SQLite's dbstat). Exit: 0; 2 on bad usage.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
bin="$(realpath "$1")"; n="${2:-20}"
# shellcheck source=scripts/fake-agents.sh
. "$(dirname "$0")/fake-agents.sh"
strace_workspace wal-frames
fake_agents "$bin" "$work" 1
daemon=$(cat "$work/data/run/mux.lock")
serial_admissions "$bin" "$work" 20
sleep 1.5
strace -f -qq -x -s 8 -e trace=pwrite64,fsync,fdatasync -o "$work/trace" -p "$daemon" &
tracer=$!
sleep 1.5
serial_admissions "$bin" "$work" "$n"
sleep 1.5
stop_tracer
DB="$work/data/wakterm.db" TRACE="$work/trace" N="$n" python3 -c '
import collections, os, re, sqlite3
n = int(os.environ["N"])
names = {page: name for name, page in sqlite3.connect("file:" + os.environ["DB"] + "?mode=ro", uri=True).execute("SELECT name, pageno FROM dbstat")}
frames, commits, fsyncs = collections.Counter(), 0, 0
for line in open(os.environ["TRACE"]):
    if "fsync(" in line or "fdatasync(" in line:
        fsyncs += 1
        continue
    # A WAL frame header (the only 24-byte write): its first 4 bytes name the page, the next 4,
    # when not 0, end a commit.
    m = re.search(r"pwrite64\(\d+, \"((?:\\x[0-9a-f]{2}|\\.|[^\"\\])*)\"\.*, 24, ", line)
    if not m:
        continue
    raw = m.group(1).encode().decode("unicode_escape").encode("latin1")
    page, size = int.from_bytes(raw[:4], "big"), int.from_bytes(raw[4:8], "big")
    frames["page 1 (the header: the file grew)" if page == 1 else names.get(page, f"page {page}")] += 1
    commits += size != 0
for name, count in frames.most_common():
    print(f"{count / n:6.2f} {name}")
print(f"commits {commits / n:.2f}, fsyncs {fsyncs / n:.2f}, frames {sum(frames.values()) / n:.2f} per admission")
'
