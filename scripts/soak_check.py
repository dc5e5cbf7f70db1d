#!/usr/bin/env python3
"""Soak driver and oracle for the real `wakterm` daemon (run by scripts/soak.sh; stdlib only).

`soak_check.py run ...` starts a daemon in a private data directory and N built-in fake Codex
agents, drives concurrent admissions (return-final and one-way, caller-generated request ids,
replays of the same id, retries after an unknown outcome only under the same id, cancels, short
deadlines, abort and crash triggers) for M minutes while a fault thread SIGKILLs the daemon,
holders and agents, opens descriptor-pressure windows (hundreds of idle or half-written
connections to run/mux.sock plus abandoned `request watch` clients, against a daemon started with
a low RLIMIT_NOFILE) and disk-full windows (the data directory's own tmpfs filled to ENOSPC).
Then faults stop, unknown outcomes are replayed under their own ids, the run settles, and the
checks of the simulator's oracle (sim/src/oracle.rs) run against what the daemon reported and
what the fake Codex recorded in its rollout files:

  duplicate_write            a request's prompt reached the agent more than once (rollout turns)
  written_despite_rejection  a prompt is in a rollout although every answer for its id was a
                             definitive rejection (prompt_written: false)
  acknowledged_unrecorded    `send` said acknowledged: true, the rollout has no such prompt
  receipt_inconsistent       a receipt breaks its own invariants (ADM-9, ADM-15, RF-2)
  replay_mismatch            a replay differs from the stored receipt, or an id was admitted
                             afresh after it had a receipt (IDEM-2; the one change IDEM-6
                             allows, store_commit_failed -> restart_in_write_window across a
                             daemon restart, is counted instead)
  terminal_twice             more than one terminal event for one request (RF-5, TERM-2)
  sequence_order             a watch stream went backwards or repeated a sequence (TERM-2)
  renumbered                 a sequence changed its request or content, an event vanished, or a
                             request changed its sequence (TERM-3)
  late_publication           an event appeared below a sequence a resuming consumer had already
                             passed (it would never see it: a gap for consumers)
  sequence_gap               a number never published; TERM-2 allows gaps only after a failed
                             commit, so it counts only when no disk-full window ran
  wrong_final                completed/aborted with a turn our prompt did not open or a final
                             that is not that turn's; delivery_failed although our prompt opened
                             a turn (CORR-6, CORR-7, CORR-10, CORR-11)
  unexpected_event           a terminal event for an unknown or one-way request
  unfinished                 an armed return-final request without a terminal event after the
                             settle period (RF-5 liveness)

`--plant dup|renumber` plants a caller or stream bug that the checks must report (the run must
FAIL): a prompt re-admitted under a fresh id, or one event moved to another sequence.

`soak_check.py fdhog SOCKET COUNT HOLD_S` (internal) holds COUNT connections to SOCKET.
"""

import argparse
import collections
import json
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
RID_RE = re.compile(r"soak (" + UUID + r")")
# Outcomes of a call that certainly sent nothing: connect refused, or refused before reading.
UNSENT = {"no_daemon", "refused_unsent"}
REJECTIONS = {"busy", "unsupported", "unavailable", "stale_incarnation", "invalid", "observer_failure", "internal_failure"}
CLI_TIMEOUT_S = 80  # the CLI's own bound is 60 s per call (client::CALL_TIMEOUT)
ABORT_MARK = "ABORTME"
CRASH_MARK = "CRASHME"
REPLY_DELAYS_MS = [30, 150, 400, 900, 2000]


def now():
    return time.time()


class SetupError(Exception):
    pass


class Res:
    def __init__(self, code, out, err, t0, t1):
        self.code, self.out, self.err, self.t0, self.t1 = code, out, err, t0, t1
        self.lines = []
        for line in out.splitlines():
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                pass
        self.json = self.lines[-1] if self.lines else None


# ---------------------------------------------------------------------------------------------
# /proc helpers


def read_proc(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def all_threads_dead(pid):
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for task in tasks:
        stat = read_proc(pid, f"task/{task}/stat") or b""
        if stat and b") Z " not in stat and b") X " not in stat:
            return False
    return True


def kill_and_wait(pid, bound_s=10.0):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    end = now() + bound_s
    while now() < end:
        if all_threads_dead(pid):
            return True
        time.sleep(0.02)
    return False


# ---------------------------------------------------------------------------------------------
# The soak


class Soak:
    def __init__(self, a):
        self.a = a
        self.exe = a.exe
        self.root = a.root
        self.data = a.data
        self.fs = a.fs  # tmpfs mount holding the data dir, or None
        self.rec_dir = os.path.join(self.root, "records")
        os.makedirs(self.rec_dir, exist_ok=True)
        self.rng = random.Random(a.seed)
        self.lock = threading.RLock()
        self.env = dict(os.environ, WAKTERM_DATA_DIR=self.data)
        self.env.pop("CODEX_HOME", None)
        self.names = [f"s{i:02d}" for i in range(a.agents)]
        self.agent_cfg = {}
        self.cache = {}  # name -> catalog entry
        self.id_of = {}  # name -> agent_id
        self.stopped_since = {}
        self.requests = {}  # rid -> dict
        self.by_agent = collections.defaultdict(list)
        self.retries = collections.defaultdict(list)  # worker -> [(due, rid)]
        self.faults = collections.Counter()
        self.anomalies = []
        self.violations = []
        self.stream = {}  # seq -> event (first observation)
        self.seq_of = {}  # rid -> seq
        self.incr_last = 0
        self.incr_seen = set()
        self.late_reported = set()
        self.restart_lock = threading.Lock()
        self.persist_last = 0
        self.persist_seen = set()
        self.daemon_down = threading.Event()  # set while the fault thread restarts the daemon
        self.load_stop = threading.Event()
        self.fault_stop = threading.Event()
        self.all_stop = threading.Event()
        self.children = []  # Popen objects to kill at the end
        self.windows_active = 0
        self.disk_full_active = threading.Event()
        self.disk_windows = []  # (start, end) of every disk-full window
        self.daemon_kills = []  # times of every daemon SIGKILL
        self.ops = collections.Counter()
        self.files = {n: open(os.path.join(self.rec_dir, n + ".jsonl"), "a") for n in ("calls", "faults", "stream", "anomalies")}

    # --- records --------------------------------------------------------------------------------

    def log(self, kind, obj):
        obj = dict(obj, t=round(now(), 3))
        with self.lock:
            f = self.files[kind]
            f.write(json.dumps(obj, sort_keys=True) + "\n")
            f.flush()

    def fault(self, kind, **detail):
        with self.lock:
            self.faults[kind] += 1
        self.log("faults", dict(detail, kind=kind))
        self.say(f"fault {kind} {json.dumps(detail, sort_keys=True)}")

    def anomaly(self, kind, **detail):
        with self.lock:
            self.anomalies.append(dict(detail, kind=kind))
        self.log("anomalies", dict(detail, kind=kind))
        self.say(f"anomaly {kind} {json.dumps(detail, sort_keys=True)[:300]}")

    def violate(self, kind, message, **detail):
        with self.lock:
            self.violations.append(dict(detail, kind=kind, message=message))

    def say(self, text):
        if self.a.verbose:
            print(f"[soak {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    # --- the CLI --------------------------------------------------------------------------------

    def cli(self, args, timeout=CLI_TIMEOUT_S, nofile=None, kill_after=None):
        argv = [self.exe] + args
        if nofile:
            argv = ["sh", "-c", f'ulimit -n {int(nofile)} && exec "$@"', "sh"] + argv
        t0 = now()
        if kill_after is not None:  # an abandoned client: SIGKILLed mid-call
            try:
                p = subprocess.Popen(argv, env=self.env, cwd=self.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            except OSError as e:
                return Res(-2, "", f"spawn failed: {e}", t0, now())
            try:
                out, err = p.communicate(timeout=kill_after)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            return Res(p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), t0, now())
        try:
            p = subprocess.run(argv, env=self.env, cwd=self.root, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
            return Res(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), t0, now())
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace")
            return Res(-1, out, "cli_timeout", t0, now())
        except OSError as e:
            return Res(-2, "", f"spawn failed: {e}", t0, now())

    def mux_start(self, rng=None):
        nofile = self.a.daemon_nofile
        if rng is not None and rng.random() < self.a.tight_share:
            nofile = self.a.tight_nofile
            with self.lock:
                self.faults["tight_nofile_start"] += 1
        r = self.cli(["mux", "start"], timeout=40, nofile=nofile)
        self.log("faults", {"kind": "mux_start", "nofile": nofile, "code": r.code, "pid": (r.json or {}).get("pid")})
        return r

    def ensure_daemon(self, bound_s=60.0, rng=None):
        end = now() + bound_s
        while now() < end:
            st = self.cli(["mux", "status"], timeout=20)
            if st.code == 0:
                return True
            if st.code == 3:
                r = self.mux_start(rng)
                if r.code != 0 and self.cli(["mux", "status"], timeout=20).code != 0:
                    self.anomaly("mux_start_failed", code=r.code, out=r.out[-500:], err=r.err[-500:])
            time.sleep(0.5)
        return False

    # --- processes ------------------------------------------------------------------------------

    def our_procs(self):
        """(pid, ppid, argv) of every process whose environment names our data dir."""
        needle = b"WAKTERM_DATA_DIR=" + self.data.encode()
        found = []
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            env = read_proc(entry, "environ")
            if not env or needle not in env.split(b"\0"):
                continue
            cmd = read_proc(entry, "cmdline") or b""
            stat = read_proc(entry, "stat") or b""
            try:
                ppid = int(stat.rsplit(b")", 1)[1].split()[1])
                state = stat.rsplit(b")", 1)[1].split()[0]
            except (IndexError, ValueError):
                continue
            if state in (b"Z", b"X"):
                continue
            found.append((int(entry), ppid, [x.decode(errors="replace") for x in cmd.split(b"\0") if x]))
        return found

    def daemon_pids(self):
        return [p for p, _, argv in self.our_procs() if argv[1:4] == ["mux", "start", "--foreground"]]

    def holder_pid(self, agent_id):
        sock = os.path.join(self.data, "h", agent_id + ".sock")
        for p, _, argv in self.our_procs():
            if len(argv) > 3 and argv[1] == "__holder" and sock in argv:
                return p
        return None

    def agent_pid(self, holder):
        for p, ppid, argv in self.our_procs():
            if ppid == holder and "fake-codex" in argv:
                return p
        return None

    # --- setup ----------------------------------------------------------------------------------

    def setup(self):
        r = self.mux_start()
        if r.code != 0:
            raise SetupError(f"mux start failed: {r.out} {r.err}")
        for i, name in enumerate(self.names):
            delay = REPLY_DELAYS_MS[i % len(REPLY_DELAYS_MS)]
            home = os.path.join(self.root, "codex", name)
            work = os.path.join(self.root, "work", name)
            os.makedirs(home, exist_ok=True)
            os.makedirs(work, exist_ok=True)
            self.agent_cfg[name] = {"codex_home": home, "reply_delay_ms": delay}
            args = ["agent", "start", "--name", name, "--cwd", work, "--env", f"CODEX_HOME={home}", "--", self.exe, "fake-codex",
                    "--reply", "Final for: {prompt}", "--reply-delay-ms", str(delay), "--abort-on", ABORT_MARK, "--crash-on", CRASH_MARK]
            r = self.cli(args, timeout=40)
            if r.code != 0:
                raise SetupError(f"agent start {name} failed: {r.out} {r.err}")
            self.id_of[name] = r.json["agent_id"]
        self.refresh_catalog()

    def refresh_catalog(self):
        r = self.cli(["agent", "catalog"], timeout=40)
        if r.code != 0 or not r.json:
            return False
        with self.lock:
            for entry in r.json.get("agents", []):
                self.cache[entry["name"]] = entry
                self.id_of[entry["name"]] = entry["agent_id"]
        return True

    # --- load -----------------------------------------------------------------------------------

    def new_request(self, name, kind, return_final, argv_fn, marker=""):
        rid = str(uuid.uuid4())
        prompt = f"soak {rid} {kind} {name}{marker}"
        req = {"rid": rid, "agent": name, "kind": kind, "return_final": return_final, "prompt": prompt, "argv": argv_fn(rid, prompt), "attempts": []}
        with self.lock:
            self.requests[rid] = req
            self.by_agent[name].append(rid)
        return req

    def attempt(self, req, why, kill_after=None):
        r = self.cli(req["argv"], kill_after=kill_after)
        j = r.json if isinstance(r.json, dict) else {}
        receipt = j if j.get("schema") == "wakterm.agent-admission.receipt.v1" else None
        cls = j.get("classification")
        if r.code == 0 and receipt:
            outcome = "accepted"
        elif r.code == 4 and receipt:
            outcome = "rejected"
        elif r.code == 5:
            outcome = "indeterminate" if receipt else "reply_lost"
        elif r.code == 3:
            outcome = "no_daemon"
        elif j.get("error") in ("too_many_connections", "daemon_not_accepting"):
            outcome = "refused_unsent"
        elif r.code == 7:
            outcome = "unresponsive"
        elif r.code == -1:
            outcome = "cli_timeout"
        elif r.code == -signal.SIGKILL:
            outcome = "client_killed"
        else:
            outcome = "error"
        att = {"why": why, "code": r.code, "outcome": outcome, "t0": round(r.t0, 3), "t1": round(r.t1, 3),
               "receipt": receipt, "error": j.get("error"), "reason": (receipt or {}).get("reason"), "classification": cls}
        with self.lock:
            req["attempts"].append(att)
            self.ops[f"outcome:{outcome}"] += 1
        self.log("calls", {"rid": req["rid"], "agent": req["agent"], "kind": req["kind"], "why": why, "code": r.code, "outcome": outcome,
                           "dt_ms": int((r.t1 - r.t0) * 1000), "json": j, "stderr": r.err[-300:] if outcome not in ("accepted", "rejected") else ""})
        return att

    def unknown(self, att):
        return att["outcome"] in ("reply_lost", "no_daemon", "refused_unsent", "unresponsive", "cli_timeout", "client_killed", "error", "indeterminate")

    def worker(self, wid, home_agent):
        rng = random.Random(f"{self.a.seed}-{wid}")
        while not self.load_stop.is_set():
            due = None
            with self.lock:
                queue = self.retries[wid]
                queue.sort()
                if queue and queue[0][0] <= now():
                    due = queue.pop(0)[1]
            if due:
                req = self.requests[due]
                att = self.attempt(req, "retry_same_id")
                self.ops["retry_same_id"] += 1
                self.maybe_retry(wid, rng, req, att)
                continue
            name = home_agent or rng.choice(self.names)
            with self.lock:
                entry = self.cache.get(name)
            if not entry or not entry.get("incarnation"):
                time.sleep(0.3)
                continue
            self.one_op(wid, rng, name, entry)
            time.sleep(rng.uniform(0.02, 0.4))

    def maybe_retry(self, wid, rng, req, att):
        if self.unknown(att) and len(req["attempts"]) < 4 and rng.random() < 0.6:
            with self.lock:
                self.retries[wid].append((now() + rng.uniform(0.5, 5.0), req["rid"]))

    def one_op(self, wid, rng, name, entry):
        inc = entry["incarnation"]
        rf_ok = bool(entry.get("return_final_available"))
        x = rng.random()
        marker = ""
        m = rng.random()
        if m < 0.03:
            marker = " " + ABORT_MARK
        elif m < 0.035:
            marker = " " + CRASH_MARK
        if x < 0.07:
            with self.lock:
                cands = [r for r in self.by_agent[name][-60:] if any(a["outcome"] in ("accepted", "indeterminate") for a in self.requests[r]["attempts"])]
            if cands:
                req = self.requests[rng.choice(cands)]
                self.ops["replay"] += 1
                self.attempt(req, "replay")
                return
        if x < 0.10:
            with self.lock:
                cands = [r for r in self.by_agent[name][-30:] if self.requests[r]["return_final"] and r not in self.seq_of
                         and any(a["outcome"] == "accepted" for a in self.requests[r]["attempts"])]
            if cands:
                rid = rng.choice(cands)
                r = self.cli(["agent", "request", "cancel", rid])
                self.ops[f"cancel:{r.code}"] += 1
                self.log("calls", {"rid": rid, "agent": name, "kind": "cancel", "code": r.code, "json": r.json})
                return
        if not rf_ok or x < 0.35:
            if rng.random() < 0.5:
                kind, argv_fn = "ow_admit", lambda rid, p: ["agent", "admit", name, "--incarnation", inc, "--request-id", rid, p]
            else:
                kind, argv_fn = "ow_send", lambda rid, p: ["agent", "send", name, "--request-id", rid, p]
            req = self.new_request(name, kind, False, argv_fn, marker if rf_ok else "")
        else:
            timeout = []
            if rng.random() < 0.04:
                timeout = ["--final-timeout-ms", str(rng.choice([50, 300, 1500]))]
            if rng.random() < 0.85:
                kind = "rf_admit"
                argv_fn = lambda rid, p: ["agent", "admit", name, "--incarnation", inc, "--request-id", rid, "--return-final"] + timeout + [p]
            else:
                kind = "rf_send"
                argv_fn = lambda rid, p: ["agent", "send", name, "--return-final", "--request-id", rid] + timeout + [p]
            req = self.new_request(name, kind, True, argv_fn, marker)
        self.ops[f"new:{req['kind']}"] += 1
        kill_after = rng.uniform(0.0, 0.05) if rng.random() < 0.02 else None
        att = self.attempt(req, "first", kill_after)
        self.maybe_retry(wid, rng, req, att)
        if self.a.plant == "dup" and att["outcome"] == "accepted" and rng.random() < 0.05:
            # Planted caller bug: the same prompt again under a fresh id. The daemon cannot know;
            # the rollout count must catch it as a duplicate write of the original request.
            rid = str(uuid.uuid4())
            argv = [rid if x == req["rid"] else x for x in req["argv"][:-1]] + [req["prompt"]]
            twin = {"rid": rid, "agent": name, "kind": req["kind"] + "_planted_twin", "return_final": req["return_final"],
                    "prompt": req["prompt"], "argv": argv, "attempts": []}
            with self.lock:
                self.requests[rid] = twin
            self.ops["planted_dup"] += 1
            self.attempt(twin, "planted")

    # --- healer: catalog cache, restarts of stopped agents, unexpected daemon deaths -------------

    def healer(self):
        while not self.all_stop.is_set():
            if not self.daemon_down.is_set():
                if not self.refresh_catalog():
                    st = self.cli(["mux", "status"], timeout=20)
                    if st.code == 3 and not self.daemon_down.is_set() and not self.daemon_pids():
                        self.anomaly("daemon_gone_unprompted")
                        self.ensure_daemon(30)
                else:
                    self.restart_stopped()
            self.all_stop.wait(1.5)

    def restart_stopped(self, grace_s=2.0):
        with self.restart_lock:
            self._restart_stopped(grace_s)

    def _restart_stopped(self, grace_s):
        with self.lock:
            entries = dict(self.cache)
        for name, entry in entries.items():
            if entry.get("state") != "stopped":
                self.stopped_since.pop(name, None)
                continue
            first = self.stopped_since.setdefault(name, now())
            if now() - first < grace_s:
                continue
            r = self.cli(["agent", "restart", name], timeout=40)
            self.log("faults", {"kind": "heal_restart", "agent": name, "code": r.code, "json": r.json})
            with self.lock:
                self.cache[name] = dict(entry, state="restarting", incarnation=None)
                self.faults["heal_restart"] += 1
                if r.code != 0:
                    self.faults["heal_restart_failed"] += 1
            self.stopped_since.pop(name, None)

    # --- stream recorder --------------------------------------------------------------------------

    def observe(self, source, events):
        """Checks one watch output: strictly increasing, and consistent with every earlier view."""
        last = 0
        for ev in events:
            seq = ev.get("terminal_event_sequence")
            rid = ev.get("request_id")
            if not isinstance(seq, int):
                continue
            if seq <= last:
                self.violate("sequence_order", f"{source}: sequence {seq} after {last}", seq=seq, rid=rid)
            last = max(last, seq)
            key = json.dumps(ev, sort_keys=True)
            with self.lock:
                first = self.stream.get(seq)
                if first is None:
                    self.stream[seq] = ev
                    self.log("stream", {"source": source, "event": ev})
                elif json.dumps(first, sort_keys=True) != key:
                    self.violate("renumbered", f"sequence {seq} was {first.get('request_id')}/{first.get('state')}, now {rid}/{ev.get('state')} ({source})",
                                 seq=seq, first=first, now=ev)
                prev = self.seq_of.get(rid)
                if prev is None:
                    self.seq_of[rid] = seq
                elif prev != seq:
                    self.violate("terminal_twice", f"request {rid} has terminal events at sequences {prev} and {seq} ({source})", rid=rid, seqs=[prev, seq])

    def poll_once(self, after):
        r = self.cli(["agent", "request", "watch", "--once", "--after", str(after)], timeout=60)
        if r.code != 0:
            return None
        return [x for x in r.lines if x.get("schema") == "wakterm.agent-request.terminal.v1"]

    def incremental(self, events):
        """A consumer resuming with --after LAST: it must never be handed a smaller sequence, and
        whatever appears below what it passed is lost to it."""
        for ev in events:
            seq = ev["terminal_event_sequence"]
            if seq <= self.incr_last:
                self.violate("sequence_order", f"watch --after {self.incr_last} returned sequence {seq}", seq=seq)
            self.incr_seen.add(seq)
            self.incr_last = max(self.incr_last, seq)

    def recorder(self):
        last_full = 0.0
        while not self.all_stop.is_set():
            events = self.poll_once(self.incr_last)
            if events is not None:
                self.observe("poll_after", events)
                self.incremental(events)
            if now() - last_full > 15:
                full = self.poll_once(0)
                if full is not None:
                    last_full = now()
                    self.observe("poll_full", full)
                    self.late_check(full)
            self.all_stop.wait(1.0)

    def late_check(self, full):
        seqs = {e["terminal_event_sequence"] for e in full}
        with self.lock:
            for seq in sorted(seqs):
                if seq < self.incr_last and seq not in self.incr_seen:
                    ev = next(e for e in full if e["terminal_event_sequence"] == seq)
                    if seq not in self.late_reported:
                        self.late_reported.add(seq)
                        self.violate("late_publication", f"sequence {seq} ({ev.get('request_id')}) appeared after the resuming consumer had passed {self.incr_last}",
                                     seq=seq, event=ev)
            for seq in sorted(self.incr_seen - seqs):
                if seq <= max(seqs, default=0) and seq not in self.late_reported:
                    self.late_reported.add(seq)
                    self.violate("renumbered", f"sequence {seq} was published and then vanished from the stream", seq=seq)

    def persistent_watcher(self):
        """A long-lived `request watch --after LAST`, reopened with the last sequence it saw."""
        while not self.all_stop.is_set():
            try:
                p = subprocess.Popen([self.exe, "agent", "request", "watch", "--after", str(self.persist_last)], env=self.env, cwd=self.root,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            except OSError:
                self.all_stop.wait(1)
                continue
            with self.lock:
                self.children.append(p)
            for line in p.stdout:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("schema") != "wakterm.agent-request.terminal.v1":
                    continue
                seq = ev["terminal_event_sequence"]
                if seq <= self.persist_last:
                    self.violate("sequence_order", f"persistent watch (resumed after {self.persist_last}) delivered {seq}", seq=seq)
                self.persist_last = max(self.persist_last, seq)
                self.persist_seen.add(seq)
                self.observe("persistent", [ev])
                if self.all_stop.is_set():
                    break
            p.kill()
            p.wait()
            with self.lock:
                self.ops[f"watch_reconnect:{p.returncode}"] += 1
            self.all_stop.wait(0.5)

    # --- faults ---------------------------------------------------------------------------------

    def fault_loop(self):
        rng = random.Random(f"{self.a.seed}-faults")
        kinds = [("daemon_kill", 3), ("holder_kill", 2), ("agent_kill", 3), ("fd_pressure", 1.5), ("disk_full", 1.5 if self.fs else 0)]
        while not self.fault_stop.is_set():
            if self.fault_stop.wait(rng.expovariate(1.0 / self.a.fault_interval)):
                break
            total = sum(w for _, w in kinds)
            x = rng.uniform(0, total)
            for kind, w in kinds:
                x -= w
                if x <= 0:
                    break
            try:
                getattr(self, kind)(rng)
            except Exception as e:  # a fault that could not be injected is an anomaly, not a crash
                self.anomaly("fault_failed", fault=kind, error=repr(e))

    def daemon_kill(self, rng):
        pids = self.daemon_pids()
        if not pids:
            return
        self.daemon_down.set()
        try:
            for pid in pids:
                if not kill_and_wait(pid):
                    self.anomaly("daemon_survived_sigkill", pid=pid)
            with self.lock:
                self.daemon_kills.append(now())
            self.fault("daemon_kill", pids=pids)
            time.sleep(rng.uniform(0, 3))
            if not self.ensure_daemon(60, rng):
                self.anomaly("daemon_restart_failed")
        finally:
            self.daemon_down.clear()

    def pick_agent(self, rng):
        name = rng.choice(self.names)
        return name, self.id_of.get(name)

    def holder_kill(self, rng):
        name, agent_id = self.pick_agent(rng)
        pid = agent_id and self.holder_pid(agent_id)
        if pid:
            kill_and_wait(pid)
            self.fault("holder_kill", agent=name, pid=pid)
        else:
            self.fault("skipped_holder_kill", agent=name, reason="no holder process")

    def agent_kill(self, rng):
        name, agent_id = self.pick_agent(rng)
        holder = agent_id and self.holder_pid(agent_id)
        pid = holder and self.agent_pid(holder)
        if pid:
            kill_and_wait(pid)
            self.fault("agent_kill", agent=name, pid=pid)
            if rng.random() < 0.5:  # sometimes restart at once, otherwise the healer does it
                time.sleep(rng.uniform(0, 1.5))
                r = self.cli(["agent", "restart", name], timeout=40)
                self.log("faults", {"kind": "restart", "agent": name, "code": r.code, "json": r.json})
        else:
            self.fault("skipped_agent_kill", agent=name, reason="no agent process")

    def fd_pressure(self, rng):
        count = rng.choice([self.a.daemon_nofile // 2, self.a.daemon_nofile + 64, 1100])
        hold = rng.uniform(3, 15)
        sock = os.path.join(self.data, "run", "mux.sock")
        hog = subprocess.Popen([sys.executable, os.path.abspath(__file__), "fdhog", sock, str(count), f"{hold:.1f}"], env=self.env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        watchers = []
        for _ in range(rng.randint(2, 8)):
            try:  # abandoned watchers: stdout is a pipe nobody reads
                watchers.append(subprocess.Popen([self.exe, "agent", "request", "watch", "--after", "0"], env=self.env,
                                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
            except OSError:
                break
        with self.lock:
            self.children.extend([hog] + watchers)
            self.windows_active += 1
        self.fault("fd_pressure", connections=count, hold_s=round(hold, 1), abandoned_watchers=len(watchers))

        def end():
            try:
                out, _ = hog.communicate(timeout=hold + 60)
                self.log("faults", {"kind": "fd_pressure_end", "hog": out.decode(errors="replace").strip()})
            except subprocess.TimeoutExpired:
                hog.kill()
            for w in watchers:
                w.send_signal(signal.SIGKILL)
                w.wait()
            with self.lock:
                self.windows_active -= 1
        threading.Thread(target=end, daemon=True).start()

    def disk_full(self, rng):
        if not self.fs or self.disk_full_active.is_set():
            return
        hold = rng.uniform(2, 12)
        self.disk_full_active.set()
        with self.lock:
            self.windows_active += 1
        path = os.path.join(self.fs, "fill")
        self.fault("disk_full", hold_s=round(hold, 1))

        def window():
            t_begin = now()
            filled = 0
            try:
                with open(path, "ab", buffering=0) as f:
                    end = now() + hold
                    while now() < end and not self.all_stop.is_set():
                        for chunk in (1 << 20, 4096, 512):
                            while True:
                                try:
                                    filled += f.write(b"\0" * chunk)
                                except OSError:
                                    break
                        time.sleep(0.1)
            finally:
                try:
                    os.unlink(path)
                except OSError:
                    pass
                self.log("faults", {"kind": "disk_full_end", "filled_bytes": filled})
                with self.lock:
                    self.disk_windows.append((t_begin, now()))
                with self.lock:
                    self.windows_active -= 1
                self.disk_full_active.clear()
        threading.Thread(target=window, daemon=True).start()

    # --- the run --------------------------------------------------------------------------------

    def run(self):
        t_start = now()
        self.setup()
        threads = [threading.Thread(target=self.healer, daemon=True), threading.Thread(target=self.recorder, daemon=True),
                   threading.Thread(target=self.persistent_watcher, daemon=True)]
        workers = [threading.Thread(target=self.worker, args=(i, n), daemon=True) for i, n in enumerate(self.names)]
        roamers = max(1, self.a.agents // 4)
        workers += [threading.Thread(target=self.worker, args=(len(self.names) + i, None), daemon=True) for i in range(roamers)]
        faults = threading.Thread(target=self.fault_loop, daemon=True)
        for t in threads + workers:
            t.start()
        if not self.a.no_faults:
            faults.start()
        end = t_start + self.a.minutes * 60
        while now() < end:
            time.sleep(min(10, max(0.1, end - now())))
            with self.lock:
                print(f"[soak] {int(now() - t_start)}s requests={len(self.requests)} events={len(self.stream)} faults={dict(self.faults)}", file=sys.stderr, flush=True)
        self.load_stop.set()
        self.fault_stop.set()
        for t in workers:
            t.join(CLI_TIMEOUT_S + 10)
        faults.join(120)
        t_quiet = now()
        while self.windows_active and now() - t_quiet < 90:
            time.sleep(0.2)
        self.say("faults stopped; replaying unknown outcomes and settling")
        self.ensure_daemon(90)
        self.quiet_phase()
        self.all_stop.set()
        with self.lock:
            kids = list(self.children)
        for p in kids:
            try:
                p.kill()
            except OSError:
                pass
        for t in threads:
            t.join(CLI_TIMEOUT_S)
        return self.check(t_start, t_quiet)

    def quiet_phase(self):
        # Every agent back (and idle enough to be used), then every unknown outcome replayed
        # under its own id, then a bounded settle until each armed request is terminal.
        end = now() + 60
        while now() < end:
            self.refresh_catalog()
            self.restart_stopped(grace_s=0)
            with self.lock:
                if all(self.cache.get(n, {}).get("state") not in (None, "stopped") for n in self.names):
                    break
            time.sleep(1)
        with self.lock:
            unknown = [r for r in self.requests.values() if r["attempts"] and self.unknown(r["attempts"][-1])]
        for req in unknown:
            self.attempt(req, "final_replay")
        self.ops["final_replays"] = len(unknown)
        settle_end = now() + self.a.settle
        pending = []
        while now() < settle_end:
            self.restart_stopped(grace_s=0)
            events = self.poll_once(0)
            if events is not None:
                self.observe("poll_full", events)
            pending = self.pending_requests()
            if not pending:
                break
            self.say(f"settling: {len(pending)} armed requests without a terminal event")
            time.sleep(3)
        self.settle_s = round(now() + self.a.settle - settle_end, 1)
        self.final_pending = pending
        # The final views: a full snapshot, one incremental poll, the persistent watcher catching up.
        full = self.poll_once(0) or []
        if self.a.plant == "renumber" and full:
            # Planted stream bug: one published event shows up under another sequence.
            ev = dict(full[len(full) // 2])
            ev["terminal_event_sequence"] += 1
            full = [e for e in full if e["terminal_event_sequence"] != ev["terminal_event_sequence"]] + [ev]
            full.sort(key=lambda e: e["terminal_event_sequence"])
        self.final_stream = full
        self.observe("poll_full", full)
        events = self.poll_once(self.incr_last)
        if events is not None:
            self.observe("poll_after", events)
            self.incremental(events)
        self.late_check(full)
        end = now() + 10
        top = max((e["terminal_event_sequence"] for e in full), default=0)
        while self.persist_last < top and now() < end:
            time.sleep(0.2)
        self.request_views = {}
        for rid in pending:
            r = self.cli(["agent", "request", "get", rid])
            self.request_views[rid] = {"code": r.code, "json": r.json}
        # Stop everything so the rollouts are complete, then read them.
        r = self.cli(["mux", "stop", "--all"], timeout=60)
        self.log("faults", {"kind": "final_stop", "code": r.code, "json": r.json})

    def pending_requests(self):
        """Return-final ids that the daemon armed (an accepted or indeterminate receipt, or
        registered per `request get`) and that have no terminal event yet."""
        with self.lock:
            cands = [r for r in self.requests.values() if r["return_final"] and r["rid"] not in self.seq_of]
        pending = []
        for req in cands:
            outcomes = {a["outcome"] for a in req["attempts"]}
            if outcomes <= {"rejected"}:
                continue
            r = self.cli(["agent", "request", "get", req["rid"]], timeout=30)
            j = r.json or {}
            if r.code == 6:
                if "accepted" in outcomes:
                    pending.append(req["rid"])  # accepted but unknown to the daemon: reported below
                continue
            if r.code != 0:
                pending.append(req["rid"])
                continue
            if j.get("terminal_event"):
                self.observe("request_get", [j["terminal_event"]])
                continue
            if j.get("phase") in ("released", "settled"):
                continue
            pending.append(req["rid"])
        return pending

    # --- rollouts and checks --------------------------------------------------------------------

    def claims_less_after_restart(self, stored, stored_end, rc, att):
        return (stored.get("classification") == rc.get("classification") == "indeterminate"
                and stored.get("reason") == "store_commit_failed" and rc.get("reason") == "restart_in_write_window"
                and rc.get("write_state") == "unknown" and not rc.get("retry_safe")
                and any(stored_end < k < att["t0"] for k in self.daemon_kills))

    def read_rollouts(self):
        turns = {}  # turn_id -> {agent, users: [text], end, final}
        mentions = collections.defaultdict(list)  # rid -> [(agent, turn_id, index_in_turn)]
        bad_lines = 0
        files = 0
        for name in self.names:
            base = os.path.join(self.agent_cfg[name]["codex_home"], "sessions")
            for dirpath, _, filenames in os.walk(base):
                for fn in sorted(filenames):
                    if not fn.endswith(".jsonl"):
                        continue
                    files += 1
                    with open(os.path.join(dirpath, fn), "rb") as f:
                        for raw in f:
                            try:
                                line = json.loads(raw)
                            except ValueError:
                                bad_lines += 1
                                continue
                            p = line.get("payload") or {}
                            t = p.get("type")
                            tid = p.get("turn_id")
                            if line.get("type") != "event_msg":
                                continue
                            if t == "task_started":
                                turns[tid] = {"agent": name, "users": [], "end": None, "final": None}
                            elif t == "item_completed" and (p.get("item") or {}).get("type") == "UserMessage":
                                turn = turns.setdefault(tid, {"agent": name, "users": [], "end": None, "final": None})
                                for c in p["item"].get("content") or []:
                                    text = c.get("text") or ""
                                    turn["users"].append(text)
                                    for rid in RID_RE.findall(text):
                                        mentions[rid].append((name, tid, len(turn["users"]) - 1))
                            elif t == "task_complete" and tid in turns:
                                turns[tid]["end"] = "completed"
                                turns[tid]["final"] = p.get("last_agent_message")
                            elif t == "turn_aborted" and tid in turns:
                                turns[tid]["end"] = "aborted"
        return turns, mentions, files, bad_lines

    def check(self, t_start, t_quiet):
        turns, mentions, files, bad_lines = self.read_rollouts()
        self.unresolved = []
        self.accepted_unrecorded = 0
        reqs = self.requests
        events = {e["request_id"]: e for e in self.final_stream}
        # Receipts: invariants, IDEM-2, write evidence.
        for rid, req in reqs.items():
            stored, stored_end = None, 0
            for att in req["attempts"]:
                rc = att["receipt"]
                if not rc:
                    continue
                cls = rc.get("classification")
                if rc.get("request_id") != rid:
                    self.violate("receipt_inconsistent", f"{rid}: receipt names request {rc.get('request_id')}", rid=rid, receipt=rc)
                if cls in REJECTIONS and (rc.get("prompt_written") or rc.get("write_state") != "not_started" or rc.get("reply_pending")):
                    self.violate("receipt_inconsistent", f"{rid}: rejection {cls} claims a write or a pending reply", rid=rid, receipt=rc)
                if cls == "accepted" and not (rc.get("prompt_written") and rc.get("write_state") == "complete"):
                    self.violate("receipt_inconsistent", f"{rid}: accepted without a complete write", rid=rid, receipt=rc)
                if cls == "accepted" and req["return_final"] and not (rc.get("reply_pending") and rc.get("armed_cursor")):
                    self.violate("receipt_inconsistent", f"{rid}: accepted return-final without reply_pending/armed_cursor", rid=rid, receipt=rc)
                if stored is None:
                    if cls in REJECTIONS and not rc.get("replayed"):
                        continue  # IDEM-6: a definitive rejection leaves the id free
                    stored, stored_end = rc, att["t1"]
                    if rc.get("replayed") and att["why"] == "first":
                        self.violate("replay_mismatch", f"{rid}: the first call was answered as a replay", rid=rid, receipt=rc)
                    continue
                same = {k: v for k, v in stored.items() if k != "replayed"} == {k: v for k, v in rc.items() if k != "replayed"}
                if att["t0"] < stored_end and same:
                    continue  # IDEM-5: a call that overlapped the stored one joined it
                if not rc.get("replayed"):
                    self.violate("replay_mismatch", f"{rid}: answered afresh ({cls}/{rc.get('reason')}) after its stored {stored.get('classification')} receipt",
                                 rid=rid, first=stored, now=rc)
                else:
                    a = {k: v for k, v in stored.items() if k != "replayed"}
                    b = {k: v for k, v in rc.items() if k != "replayed"}
                    if a != b and self.claims_less_after_restart(stored, stored_end, rc, att):
                        # IDEM-6: the caller's progress commit failed (disk full) and the daemon
                        # restarted before its retry landed: the id is now indeterminate /
                        # restart_in_write_window, which claims less. Later replays keep that.
                        self.ops["replay_claims_less_after_restart"] += 1
                        stored, stored_end = rc, att["t1"]
                    elif a != b:
                        diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
                        self.violate("replay_mismatch", f"{rid}: replay differs from the stored receipt: {diff}", rid=rid, diff=diff)
            m = mentions.get(rid, [])
            history = [(a["why"], a["outcome"], a["reason"] or a["error"]) for a in req["attempts"]]
            if len(m) > 1:
                self.violate("duplicate_write", f"{rid} ({req['kind']}) reached the agent {len(m)} times: turns {[t for _, t, _ in m]}; attempts {history}",
                             rid=rid, mentions=m)
            if m and stored is None:
                last = req["attempts"][-1] if req["attempts"] else None
                if last and last["receipt"]:
                    self.violate("written_despite_rejection", f"{rid}: in turn {m[0][1]}, but the daemon holds no receipt for it "
                                 f"(the last answer was a fresh {last['receipt'].get('classification')}, prompt_written: false); attempts {history}", rid=rid)
                elif all(a["outcome"] in UNSENT for a in req["attempts"]):
                    self.violate("written_despite_rejection", f"{rid}: in turn {m[0][1]}, but no call ever reached the daemon; attempts {history}", rid=rid)
                else:
                    self.unresolved.append(rid)
            if m and stored is not None and not stored.get("prompt_written"):
                self.violate("written_despite_rejection", f"{rid}: in turn {m[0][1]}, but its stored receipt says prompt_written: false", rid=rid, receipt=stored)
            if not m and stored is not None and stored.get("classification") == "accepted":
                self.accepted_unrecorded += 1
            own = mentions.get(RID_RE.search(req["prompt"]).group(1), [])  # a planted twin carries another id's prompt
            if not own and any(a["receipt"] and a["receipt"].get("acknowledged") is True for a in req["attempts"]):
                self.violate("acknowledged_unrecorded", f"{rid}: acknowledged: true but no rollout has the prompt", rid=rid)
        # Terminal events against requests and rollouts.
        for rid, ev in events.items():
            req = reqs.get(rid)
            state = ev.get("state")
            if req is None or not req["return_final"]:
                self.violate("unexpected_event", f"terminal event {ev.get('terminal_event_sequence')} for {'a one-way' if req else 'an unknown'} request {rid}", event=ev)
                continue
            opened = [t for (_, t, i) in mentions.get(rid, []) if i == 0]
            tid = ev.get("provider_turn_id")
            turn = turns.get(tid) if tid else None
            if state == "completed":
                if not turn or tid not in opened:
                    self.violate("wrong_final", f"{rid}: completed with turn {tid}, which its prompt did not open (opened: {opened})", rid=rid, event=ev)
                elif turn["final"] != ev.get("final_message") or turn["end"] != "completed":
                    self.violate("wrong_final", f"{rid}: final {ev.get('final_message')!r}, turn {tid} ended {turn['end']} with {turn['final']!r}", rid=rid, event=ev)
            elif state == "aborted":
                if not turn or tid not in opened or turn["end"] != "aborted":
                    self.violate("wrong_final", f"{rid}: aborted with turn {tid}, not its own aborted turn", rid=rid, event=ev)
            elif state == "delivery_failed" and opened:
                self.violate("wrong_final", f"{rid}: delivery_failed ({ev.get('reason')}, sequence {ev.get('terminal_event_sequence')}), "
                             f"but its prompt opened turn {opened[0]} (ended {turns[opened[0]]['end']}) of agent {req['agent']}", rid=rid, event=ev)
            if "final_message" in ev and state != "completed":
                self.violate("wrong_final", f"{rid}: {state} carries a final_message", rid=rid, event=ev)
        # Liveness.
        for rid in [r for r in self.final_pending if r not in self.seq_of]:
            self.violate("unfinished", f"{rid}: no terminal event {self.a.settle:.0f}s after faults stopped; request get: {self.request_views.get(rid)}",
                         rid=rid, attempts=[(a['why'], a['outcome'], a['reason']) for a in reqs[rid]["attempts"]])
        # Sequence numbers: gaps (TERM-2 allows them only after a failed commit).
        seqs = sorted(self.stream)
        gaps = [s for s in range(1, (seqs[-1] if seqs else 0) + 1) if s not in self.stream]
        slack = 5.0
        windows = [(a - slack, b + slack) for a, b in self.disk_windows]
        for g in gaps:
            below = max((x for x in seqs if x < g), default=None)
            above = min((x for x in seqs if x > g), default=None)
            lo = self.stream[below]["at_ms"] / 1000 if below else t_start
            hi = self.stream[above]["at_ms"] / 1000 if above else now()
            if not any(a <= hi and lo <= b for a, b in windows):
                self.violate("sequence_gap", f"sequence {g} was never published and no disk-full window was open between "
                             f"{below} and {above} (TERM-2 allows gaps only after a failed commit)", seq=g)
        return self.report(t_start, t_quiet, turns, mentions, files, bad_lines, gaps)

    def report(self, t_start, t_quiet, turns, mentions, files, bad_lines, gaps):
        reqs = self.requests.values()
        final_outcome = collections.Counter()
        reasons = collections.Counter()
        for r in reqs:
            best = None
            for a in r["attempts"]:
                if a["receipt"]:
                    best = a
            a = best or (r["attempts"][-1] if r["attempts"] else None)
            if a:
                final_outcome[a["outcome"] if a["outcome"] != "rejected" else "rejected"] += 1
                if a["reason"]:
                    reasons[f"{a['receipt'].get('classification') if a['receipt'] else a['outcome']}/{a['reason']}"] += 1
        states = collections.Counter(e.get("state") for e in self.final_stream)
        attempts = collections.Counter(a["outcome"] for r in reqs for a in r["attempts"])
        replayed = sum(1 for r in reqs for a in r["attempts"] if a["receipt"] and a["receipt"].get("replayed"))
        seqs = sorted(self.stream)
        vk = collections.Counter(v["kind"] for v in self.violations)
        rep = {
            "commit": self.a.commit, "agents": self.a.agents, "minutes": self.a.minutes, "seed": self.a.seed, "daemon_nofile": self.a.daemon_nofile,
            "wall_s": round(now() - t_start, 1), "settle_s": self.settle_s,
            "requests": len(self.requests),
            "requests_by_kind": dict(collections.Counter(r["kind"] for r in reqs)),
            "return_final": sum(1 for r in reqs if r["return_final"]),
            "attempts": sum(attempts.values()), "attempt_outcomes": dict(attempts), "replayed_receipts": replayed,
            "final_outcome_per_request": dict(final_outcome), "reasons": dict(reasons.most_common()),
            "terminal_events": len(self.final_stream), "terminal_states": dict(states),
            "sequence_max": seqs[-1] if seqs else 0, "sequence_gaps": len(gaps),
            "persistent_watch_events": len(self.persist_seen),
            "rollout_files": files, "rollout_turns": len(turns), "rollout_bad_lines": bad_lines,
            "prompts_in_rollouts": sum(1 for r in self.requests if mentions.get(r)),
            "crash_triggers": sum(1 for t in turns.values() if t["users"] and CRASH_MARK in t["users"][0]),
            "abort_triggers": sum(1 for t in turns.values() if t["users"] and ABORT_MARK in t["users"][0]),
            "accepted_not_in_rollout": self.accepted_unrecorded, "written_outcome_unresolved": self.unresolved[:50],
            "faults": dict(self.faults), "ops": dict(self.ops), "anomalies": self.anomalies[:50], "anomaly_count": len(self.anomalies),
            "disk_full": "tmpfs" if self.fs else "skipped: " + (self.a.disk_full_skip or "no tmpfs"),
            "violations": len(self.violations), "violation_kinds": dict(vk), "violation_list": self.violations[:200],
        }
        with open(os.path.join(self.rec_dir, "report.json"), "w") as f:
            json.dump(rep, f, indent=1, sort_keys=True)
        with open(os.path.join(self.rec_dir, "requests.json"), "w") as f:
            json.dump(self.requests, f, sort_keys=True)
        fc = self.faults
        st = " ".join(f"{k}={v}" for k, v in sorted(states.items()))
        line = (f"SOAK {'PASS' if not self.violations else 'FAIL'} agents={self.a.agents} minutes={self.a.minutes:g} seed={self.a.seed} "
                f"requests={rep['requests']} (return_final={rep['return_final']}) attempts={rep['attempts']} "
                f"accepted={final_outcome['accepted']} indeterminate={final_outcome['indeterminate']} rejected={final_outcome['rejected']} "
                f"unknown={sum(v for k, v in final_outcome.items() if k not in ('accepted', 'indeterminate', 'rejected'))} "
                f"replayed={replayed} terminal_events={rep['terminal_events']} [{st}] seq_max={rep['sequence_max']} seq_gaps={len(gaps)} "
                f"turns={rep['rollout_turns']} kills: daemon={fc['daemon_kill']} holder={fc['holder_kill']} agent={fc['agent_kill']} "
                f"crash_triggers={rep['crash_triggers']} agent_restarts={fc['heal_restart']} "
                f"fd_windows={fc['fd_pressure']} tight_nofile_daemons={fc['tight_nofile_start']} "
                f"disk_full_windows={fc['disk_full'] if self.fs else 'skipped(' + rep['disk_full'] + ')'} "
                f"clients_killed={attempts['client_killed']} anomalies={len(self.anomalies)} violations={len(self.violations)}")
        for v in self.violations[:40]:
            print(f"VIOLATION {v['kind']}: {v['message']}")
        print(line, flush=True)
        with open(os.path.join(self.rec_dir, "summary.txt"), "w") as f:
            f.write(line + "\n")
        return 0 if not self.violations else 1


# ---------------------------------------------------------------------------------------------
# fdhog: COUNT connections held for HOLD seconds; every third one sends half a request line.


def fdhog(sock_path, count, hold):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    conns, refused, partial = [], 0, 0
    end_open = time.time() + 10
    for i in range(count):
        if time.time() > end_open:
            break
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(1.0)
        try:
            s.connect(sock_path)
            if i % 3 == 0:
                s.send(b'{"Admit": {"target": "s00", "prom')
                partial += 1
            conns.append(s)
        except OSError:
            refused += 1
            s.close()
            if refused > 20:
                break
    time.sleep(hold)
    closed_by_peer = 0
    for s in conns:
        try:
            s.setblocking(False)
            if s.recv(1, socket.MSG_PEEK) == b"":
                closed_by_peer += 1
        except OSError:
            pass
        s.close()
    print(json.dumps({"opened": len(conns), "refused": refused, "partial_lines": partial, "closed_or_answered_by_peer": closed_by_peer}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "fdhog":
        fdhog(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["run"])
    ap.add_argument("--exe", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--fs", default=None, help="tmpfs mount holding the data dir (enables disk-full windows)")
    ap.add_argument("--disk-full-skip", default=None)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fault-interval", type=float, default=5.0, help="mean seconds between faults")
    ap.add_argument("--settle", type=float, default=180.0, help="bound for armed requests to end after faults stop")
    ap.add_argument("--daemon-nofile", type=int, default=512, help="RLIMIT_NOFILE of the daemon (and its holders)")
    ap.add_argument("--tight-nofile", type=int, default=128, help="RLIMIT_NOFILE of some restarted daemons")
    ap.add_argument("--tight-share", type=float, default=0.3, help="share of daemon restarts under --tight-nofile")
    ap.add_argument("--commit", default="", help="what was built (for the report)")
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--plant", choices=["dup", "renumber"], default=None, help="plant a bug the checks must catch (the run must FAIL)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    try:
        return Soak(a).run()
    except SetupError as e:
        print(f"soak: setup failed: {e}", file=sys.stderr)
        return 2
    except Exception:
        import traceback
        traceback.print_exc()
        print("soak: the driver failed (not a verdict on the daemon)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
