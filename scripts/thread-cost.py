#!/usr/bin/env python3
"""A process's cost by thread name over a window (issue 10): voluntary and involuntary context
switches and CPU ticks of its threads, summed by name, from /proc/PID/task/*/{comm,status,stat}.
Run it beside a load (e.g. `scripts/ab-load.sh` with `AB_SECS=30`, against the daemon's pid in
DATA_DIR/run/mux.lock) and divide by the requests the load completed in the window.

Usage: python3 scripts/thread-cost.py PID SECONDS
Exit: 0; 2 on bad usage; 1 when the process is gone before the window ends.
"""
import collections
import os
import sys
import time


def sample(pid):
    """Per live thread: (name, voluntary switches, involuntary switches, utime+stime ticks)."""
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended meanwhile
        voluntary = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        involuntary = int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
        threads[tid] = (name, voluntary, involuntary, int(fields[11]) + int(fields[12]))
    return threads


def main():
    if len(sys.argv) != 3 or not sys.argv[1].isdigit():
        print(__doc__.strip(), file=sys.stderr)
        return 2
    pid, seconds = sys.argv[1], float(sys.argv[2])
    try:
        before = sample(pid)
        time.sleep(seconds)
        after = sample(pid)
    except FileNotFoundError:
        print(f"thread-cost: process {pid} is gone", file=sys.stderr)
        return 1
    # A thread that started in the window counts from zero; one that ended takes its counts
    # with it (tokio drops blocking threads idle for 10 s): the sums can only undercount.
    totals = collections.defaultdict(lambda: [0, 0, 0, 0])
    for tid, (name, voluntary, involuntary, ticks) in after.items():
        _, v0, i0, t0 = before.get(tid, (name, 0, 0, 0))
        total = totals[name]
        total[0] += 1
        total[1] += voluntary - v0
        total[2] += involuntary - i0
        total[3] += ticks - t0
    hz = os.sysconf("SC_CLK_TCK")
    print(f"{'thread name':24} {'threads':>7} {'voluntary':>10} {'involuntary':>12} {'CPU s':>7}")
    for name, (count, voluntary, involuntary, ticks) in sorted(totals.items(), key=lambda item: -item[1][1]):
        print(f"{name:24} {count:7} {voluntary:10} {involuntary:12} {ticks / hz:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
