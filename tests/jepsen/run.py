#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The fault suite of cluster keys (docs/jepsen.md).

A real 3-member etcd on loopback, three brokers as three hosts, each reaching
etcd through a proxy of its own that can cut it off (tests/jepsen/cluster.py),
clients on liblocal (tests/jepsen/worker.c) on one cluster lock and one
cluster semaphore of 2 slots on every host, and a nemesis that injects a
seeded, printed schedule of faults. After the last fault has healed the run
goes on for the liveness bound and a little more, then tests/jepsen/check.py
judges the records.

  run.py --broker BIN --worker BIN --short [--seed N]
  run.py --broker BIN --worker BIN --seconds S [--runs N] [--seed N] [--faults K,...]

--short runs a fixed list of faults (the parameters from the seed, 1 by
default), --seconds a random schedule of that length per run. Exits 1 on a
violation, 2 when the harness itself could not run.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402
from cluster import (PDEATH, Broker, Etcd, Ports, Proxy, proc_state,  # noqa: E402
                     signal_pid, wait_for)

HOSTS = 3
PREFIX = "jepsen/"
LOCK_KEY = "jepsen/lock"
SEM_KEY = "jepsen/sem"
SEM_LIMIT = 2
TTL_S = 3
MARGIN_MS = 1000
LOCK_WORKERS = SEM_WORKERS = 2  # per host
# Crash points inside the key mutex (libshm/crashpoint.h): handing the key to a
# local waiter at the release (HANDOFF_HOLD_SET: the key is open on the host by
# construction), or queueing on it (ENQ_LINKED).
CP_HANDOFF_HOLD_SET, CP_ENQ_LINKED = 9, 5


class HarnessError(Exception):
    pass


class Run:
    def __init__(self, args, seed, rundir):
        self.args, self.seed, self.dir = args, seed, rundir
        self.ttl = args.ttl_s
        self.rng = random.Random(seed)
        self.t0 = time.monotonic()
        self.nemlog = open(os.path.join(rundir, "nemesis.log"), "a", buffering=1)
        self.event("note", "harness started")
        self.workers = []  # [Popen, host, kind, name]
        self.nworkers = 0
        ports = Ports()
        self.etcd = Etcd(rundir, ports)
        self.proxy = Proxy(HOSTS, self.etcd.cport, ports)
        self.brokers = [Broker(args.broker, rundir, h, self.proxy.endpoints(h), PREFIX, self.ttl,
                               MARGIN_MS) for h in range(HOSTS)]
        self.fence = os.path.join(rundir, "fence")

    # ---- records ------------------------------------------------------------

    def event(self, what, text):
        """Write down a nemesis event (CLOCK_MONOTONIC, as the workers' records)."""
        self.nemlog.write("%d %s %s\n" % (time.monotonic_ns(), what, text))
        print("  %7.2f s  %-5s %s" % (time.monotonic() - self.t0, what, text), flush=True)

    # ---- clients ------------------------------------------------------------

    def spawn(self, h, kind, once=False, env=None, tag="w"):
        self.nworkers += 1
        name = "%s%d-h%d-%s" % (tag, self.nworkers, h, kind)
        argv = PDEATH + [self.args.worker, "--socket", self.brokers[h].sock, "--host", str(h),
                         "--id", str(self.nworkers), "--kind", kind,
                         "--key", LOCK_KEY if kind == "lock" else SEM_KEY,
                         "--limit", str(SEM_LIMIT if kind == "sem" else 1),
                         "--log", os.path.join(self.dir, "w-%s.log" % name),
                         "--until-ns", str(time.monotonic_ns() + 3600 * 10**9),
                         "--hold-us", "1000" if kind == "lock" else "3000",
                         "--seed", str(self.seed * 1000 + self.nworkers)]
        if kind == "lock":
            argv += ["--fence", self.fence]
        if once:
            argv += ["--once", "1"]
        e = dict(os.environ)
        for k in ("SHMLOCK_STOP_AT", "SHMLOCK_CRASH_AT", "SHMLOCK_NO_FAST_PATH"):
            e.pop(k, None)
        e.update(env or {})
        p = subprocess.Popen(argv, env=e, stdin=subprocess.DEVNULL)
        w = [p, h, kind, name]
        self.workers.append(w)
        return w

    def pick_worker(self, h, kind):
        ws = [w for w in self.workers if w[1] == h and w[2] == kind and w[3].startswith("w")
              and w[0].poll() is None]
        if not ws:
            raise HarnessError("no running %s worker on host %d" % (kind, h))
        return self.rng.choice(ws)

    def replace(self, w, why):
        """A worker that did not do what it was told is killed and replaced."""
        self.event("note", "%s %s: killed and replaced" % (w[3], why))
        signal_pid(w[0].pid, signal.SIGKILL)
        w[0].wait()
        self.workers.remove(w)
        self.spawn(w[1], w[2])

    # ---- faults: each applies, waits, heals, and writes both down -------------

    def sleep(self, s):
        time.sleep(s)

    def cut_off(self, h, how, dur):
        """Cut host @h off from etcd for @dur s: 'refuse' or 'blackhole' its
        network, or 'pause' its broker."""
        if how == "pause":
            self.brokers[h].signal(signal.SIGSTOP)
        else:
            self.proxy.set(h, how)
        self.sleep(dur)
        if how == "pause":
            self.brokers[h].signal(signal.SIGCONT)
        else:
            self.proxy.set(h, "up")

    def partition(self, h, mode, dur):
        d = "partition h%d %s %.1fs" % (h, mode, dur)
        self.event("begin", d)
        self.cut_off(h, mode, dur)
        self.event("heal", d)

    def broker_pause(self, h, dur):
        d = "broker-pause h%d %.1fs (TTL %ds)" % (h, dur, self.ttl)
        self.event("begin", d)
        self.cut_off(h, "pause", dur)
        self.event("heal", d)

    def broker_kill(self, h, down):
        d = "broker-kill h%d, restarted after %.1fs" % (h, down)
        self.event("begin", d)
        self.brokers[h].kill()
        self.sleep(down)
        self.brokers[h].start()
        self.event("heal", d)

    def client_pause(self, h, kind, dur):
        w = self.pick_worker(h, kind)
        d = "client-pause %s %.1fs" % (w[3], dur)
        self.event("begin", d)
        signal_pid(w[0].pid, signal.SIGSTOP)
        self.sleep(dur)
        signal_pid(w[0].pid, signal.SIGCONT)
        self.event("heal", d)

    def stopped(self, w, timeout_s):
        return wait_for(lambda: proc_state(w[0].pid) == "T" or w[0].poll() is not None,
                        timeout_s) and w[0].poll() is None

    def client_stop_in_hold(self, h, kind, how, dur, settle):
        """A holder stops itself inside its hold; its host is cut off (@how)
        past the lease; @settle s after the heal (its host has a new lease
        by then) the holder goes on, believing it still holds."""
        w = self.pick_worker(h, kind)
        d = "client-stop-in-hold %s + %s h%d %.1fs, continued %.1fs after" % (
            w[3], how, h, dur, settle)
        self.event("begin", d)
        signal_pid(w[0].pid, signal.SIGUSR1)
        if not self.stopped(w, 15):
            self.replace(w, "did not stop inside a hold within 15 s")
            self.event("heal", d + " (no stop)")
            return
        self.event("note", "%s stopped inside its hold" % w[3])
        self.cut_off(h, how, dur)
        self.sleep(settle)
        signal_pid(w[0].pid, signal.SIGCONT)
        self.event("heal", d)

    def last_grant(self, w):
        """The time of the last grant @w wrote down (0: none in its tail)."""
        with open(os.path.join(self.dir, "w-%s.log" % w[3]), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 300))
            grants = [x for x in f.read().split(b"\n") if x.startswith(b"G ")]
        return int(grants[-1].split()[1]) if grants else 0

    def all_served_since(self, t_ns):
        """Has every host been granted each key after @t_ns?"""
        for h in range(HOSTS):
            for kind in ("lock", "sem"):
                if not any(self.last_grant(w) > t_ns for w in self.workers
                           if w[1] == h and w[2] == kind):
                    return False
        return True

    def quiet(self, bound_s):
        """After the last heal: until every host has been served both keys
        and 1 s more, or the liveness bound and 2 s more (then the records
        show who was not served)."""
        since = time.monotonic_ns()
        self.event("note", "quiet until every host is served, %.0f s at most" % (bound_s + 2))
        if wait_for(lambda: self.all_served_since(since), bound_s, 0.2):
            self.event("note", "every host served")
            self.sleep(1)
        else:
            self.sleep(2)

    def local_holders(self, h, kind):
        """The clients of @kind on host @h whose last record is a grant."""
        out = []
        for w in self.workers:
            if w[1] != h or w[2] != kind or w[0].poll() is not None:
                continue
            with open(os.path.join(self.dir, "w-%s.log" % w[3]), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200))
                lines = f.read().split(b"\n")
            last = [x for x in lines if x][-1:]
            if last and last[0].startswith(b"G "):
                out.append(w[3])
        return out

    def client_trap_in_mutex(self, h, kind, how, dur, settle):
        """A client of @kind stops inside the key's mutex (SHMLOCK_STOP_AT at
        a crash point of a CRASH_POINTS build); its host is cut off (@how)
        past the lease; @settle s after the heal it goes on."""
        d = "client-stop-in-key-mutex %s h%d + %s %.1fs, continued %.1fs after" % (
            kind, h, how, dur, settle)
        self.event("begin", d)
        trap, end = None, time.monotonic() + 30
        for attempt in range(8):
            cp = CP_HANDOFF_HOLD_SET if attempt % 2 == 0 else CP_ENQ_LINKED
            trap = self.spawn(h, kind, once=True, tag="t",
                              env={"SHMLOCK_STOP_AT": str(cp), "SHMLOCK_NO_FAST_PATH": "1"})
            if not self.stopped(trap, 15):
                if trap[0].poll() is None:
                    self.event("note", "%s neither stopped nor ended in 15 s: killed" % trap[3])
                    signal_pid(trap[0].pid, signal.SIGKILL)
                    trap[0].wait()
                trap = None
                continue
            # The case that matters: the key open on the host (a holder
            # inside, the trap itself at a handoff, or another who cannot
            # release while the trap has the mutex). Otherwise the trap goes
            # on (one attempt) and another is placed.
            time.sleep(0.1)  # a grant or release just made is written down
            inside = self.local_holders(h, kind)
            self.event("note", "%s stopped at crash point %d; inside on h%d: %s" % (
                trap[3], cp, h, ", ".join(inside) or "nobody"))
            if inside or time.monotonic() > end:
                break
            signal_pid(trap[0].pid, signal.SIGCONT)
            trap[0].wait()
        if trap is None:
            raise HarnessError("no client stopped inside the key mutex in 8 attempts")
        self.cut_off(h, how, dur)
        self.sleep(settle)
        signal_pid(trap[0].pid, signal.SIGCONT)
        self.event("heal", d)

    def lease_losses(self):
        """How many times each broker has said its lease was lost."""
        out = []
        for b in self.brokers:
            with open(b.log, errors="replace") as f:
                out.append(sum(1 for x in f if "local hold(s) of cluster keys ended" in x
                               and "stopping" not in x))
        return out

    def etcd_member(self, role, how, dur):
        """Stop or kill one member. 'first-follower': the member every host
        asks first (m0), made a follower first: with the quorum intact and
        no election, no host may lose its lease to it (checked)."""
        if role == "first-follower" and not self.etcd.move_leader_off(0):
            raise HarnessError("etcd leadership could not be moved off m0")
        lead = self.etcd.leader()
        if lead is None:
            raise HarnessError("etcd has no leader")
        if role == "first-follower":
            i = 0
        else:
            i = lead if role == "leader" else self.rng.choice([j for j in range(3) if j != lead])
        d = "etcd-%s m%d (%s) %.1fs" % (how, i, role, dur)
        before = self.lease_losses()
        self.event("begin", d)
        self.etcd_down([i], how, dur)
        self.event("heal", d)
        # A renewal missed while the member was down ends at the local
        # deadline, TTL - margin after the last renewal: wait that out.
        self.sleep(self.ttl)
        lost = [a - b for a, b in zip(self.lease_losses(), before)]
        self.event("note", "%s %d lease(s) lost while one %s member was down (%s)" % (
            "minority-fault:" if role != "leader" else "leader-fault:", sum(lost),
            role, ", ".join("h%d %d" % x for x in enumerate(lost))))

    def etcd_majority(self, how, dur):
        lead = self.etcd.leader()
        if lead is None:
            raise HarnessError("etcd has no leader")
        two = [lead, self.rng.choice([j for j in range(3) if j != lead])]
        d = "etcd-majority-%s m%d m%d %.1fs" % (how, two[0], two[1], dur)
        self.event("begin", d)
        self.etcd_down(two, how, dur)
        self.event("heal", d)

    def etcd_restart_all(self, dur):
        d = "etcd-restart-all, down %.1fs" % dur
        self.event("begin", d)
        self.etcd_down([0, 1, 2], "kill", dur)
        self.event("heal", d)

    def etcd_down(self, members, how, dur):
        for i in members:
            if how == "stop":
                self.etcd.signal(i, signal.SIGSTOP)
            else:
                self.etcd.kill(i)
        self.sleep(dur)
        for i in members:
            if how == "stop":
                self.etcd.signal(i, signal.SIGCONT)
            else:
                self.etcd.start(i)
        if not self.etcd.wait_healthy(range(3), 30):
            raise HarnessError("etcd not healthy 30 s after the fault healed")

    # ---- schedules ------------------------------------------------------------

    def short_schedule(self):
        """The fixed list of make check: the faults the product is known to
        have broken under, and one of each other kind that is quick."""
        r, hs = self.rng, list(range(HOSTS))
        r.shuffle(hs)
        past = lambda: self.ttl + 1.5 + r.random() * 2  # past the lease
        return [
            ("client_trap_in_mutex", hs[0], "lock", "refuse", past(), 1.5 + r.random()),
            ("broker_pause", hs[1], past()),
            ("client_stop_in_hold", hs[2], "sem", "pause", past(), 1.5 + r.random()),
            ("client_trap_in_mutex", hs[1], "sem", "pause", past(), 1.5 + r.random()),
            ("client_stop_in_hold", hs[0], "lock", "blackhole", past(), 1.5 + r.random()),
            ("partition", hs[2], "refuse", past()),
            ("etcd_member", "first-follower", "stop", 2 + r.random() * 2),
            ("etcd_restart_all", 0.5 + r.random()),
        ]

    def random_ops(self):
        """One fault of each kind, each with its own host and parameters."""
        r = self.rng
        h = lambda: r.randrange(HOSTS)
        past = lambda: self.ttl + 1 + r.random() * 4.5
        settle = lambda: 1 + r.random() * 2
        cut = lambda: r.choice(["refuse", "blackhole", "pause"])
        kind = lambda: r.choice(["lock", "sem"])
        return [
            ("partition", h(), r.choice(["refuse", "blackhole"]), 1 + r.random() * 6),
            ("broker_pause", h(), 1 + r.random() * 6.5),
            ("broker_kill", h(), r.choice([0, self.ttl + 1.5])),
            ("client_pause", h(), kind(), 0.5 + r.random() * 3.5),
            ("client_stop_in_hold", h(), kind(), cut(), past(), settle()),
            ("client_trap_in_mutex", h(), kind(), cut(), past(), settle()),
            ("etcd_member", r.choice(["leader", "follower", "first-follower"]),
             r.choice(["stop", "kill"]),
             1 + r.random() * 5),
            ("etcd_majority", r.choice(["stop", "kill"]), self.ttl + r.random() * 4),
            ("etcd_restart_all", 0.5 + r.random() * 2),
        ]

    # ---- the run --------------------------------------------------------------

    def start(self):
        self.etcd.start_all()
        if not self.etcd.wait_healthy(range(3), 30):
            raise HarnessError("etcd did not become healthy in 30 s (logs in %s)" % self.dir)
        for b in self.brokers:
            b.start()
        for h in range(HOSTS):
            for _ in range(LOCK_WORKERS):
                self.spawn(h, "lock")
            for _ in range(SEM_WORKERS):
                self.spawn(h, "sem")

    def run_schedule(self, seconds):
        gap = lambda: 1 + self.rng.random() * 1.5
        if seconds is None:
            ops = self.short_schedule()
            print("schedule (seed %d): %s" % (self.seed, "; ".join(
                "%s%r" % (o[0], tuple(round(x, 2) if isinstance(x, float) else x
                                      for x in o[1:])) for o in ops)), flush=True)
            for op in ops:
                self.sleep(gap())
                getattr(self, op[0])(*op[1:])
            return
        # Every kind once, in a random order, however short the run, then
        # kinds at random until the time is up.
        kinds = lambda: [op for op in self.random_ops()
                         if not self.args.faults or op[0] in self.args.faults]
        first = kinds()
        if not first:
            raise HarnessError("no fault of the kinds %s" % ",".join(self.args.faults))
        self.rng.shuffle(first)
        end = time.monotonic() + seconds
        while first or time.monotonic() < end:
            self.sleep(gap())
            op = first.pop() if first else self.rng.choice(kinds())
            getattr(self, op[0])(*op[1:])

    def continue_stragglers(self):
        """Every fault has healed: a client still stopped is the harness's
        mistake, continued here (and the heal written down) so that liveness
        is judged from then."""
        for w in self.workers:
            if w[0].poll() is None and proc_state(w[0].pid) == "T":
                self.event("heal", "%s still stopped: continued" % w[3])
                signal_pid(w[0].pid, signal.SIGCONT)

    def stop(self):
        for w in self.workers:
            signal_pid(w[0].pid, signal.SIGCONT)
            signal_pid(w[0].pid, signal.SIGKILL)
        for w in self.workers:
            w[0].wait()
        for b in self.brokers:
            b.stop()
        self.proxy.stop()
        self.etcd.stop_all()
        self.nemlog.close()


# What the brokers said about their leases: not judged (the records are),
# but a lease lost to a fault that should cost none (a follower stopped) shows
# here.
BROKER_EVENTS = (("lease lost", "local hold(s) of cluster keys ended"),
                 ("keys left open", "could not be closed"),
                 ("leases granted", "granted (TTL"),
                 ("re-adopted", "re-adopted"))


def broker_events(rundir):
    for h in range(HOSTS):
        try:
            with open(os.path.join(rundir, "broker-h%d.log" % h), errors="replace") as f:
                text = f.read().splitlines()
        except OSError:
            continue
        print("  broker h%d: %s" % (h, ", ".join(
            "%s %d" % (name, sum(1 for x in text if pat in x and "stopping" not in x))
            for name, pat in BROKER_EVENTS)))


def one_run(args, seed, n, total):
    rundir = tempfile.mkdtemp(prefix="shmlock-jepsen-%d-" % os.getpid())
    liveness = args.liveness_s
    with open(os.path.join(rundir, "run.json"), "w") as f:
        json.dump({"lock_key": LOCK_KEY, "sem_key": SEM_KEY, "sem_limit": SEM_LIMIT,
                   "hosts": HOSTS, "liveness_s": liveness, "seed": seed,
                   "seconds": args.seconds}, f)
    print("== jepsen run %d/%d, seed %d, %s, records in %s" % (
        n, total, seed, "short" if args.short else "%d s" % args.seconds, rundir), flush=True)
    run = Run(args, seed, rundir)
    started = time.monotonic()
    # The harness's own deadline: a fault that wedges the harness ends the
    # run instead of hanging make check.
    limit = max(args.seconds or 0, 120) + liveness + 240

    def overdue():
        print("jepsen: run over its %d s deadline (records in %s)" % (limit, rundir), flush=True)
        for b in run.brokers:  # the keepers outlive us otherwise (see Broker.stop)
            try:
                os.unlink(b.sock + ".keep")
            except OSError:
                pass
        os._exit(2)  # every other child has PR_SET_PDEATHSIG

    timer = threading.Timer(limit, overdue)
    timer.daemon = True
    timer.start()
    try:
        run.start()
        run.event("note", "started")
        run.run_schedule(None if args.short else args.seconds)
        run.continue_stragglers()
        run.quiet(liveness)
        run.event("note", "end")
    except HarnessError as e:
        print("jepsen: harness: %s (records in %s)" % (e, rundir), flush=True)
        run.stop()
        timer.cancel()
        return 2
    finally:
        if not run.nemlog.closed:
            run.stop()
        timer.cancel()
    print("  run took %.0f s; checking" % (time.monotonic() - started), flush=True)
    broker_events(rundir)
    cfg, workers, nemesis = check.load(rundir)
    bad = check.judge(cfg, workers, nemesis)
    if bad:
        print("jepsen: %d violation(s); records kept in %s" % (bad, rundir))
        for h in range(HOSTS):
            log = os.path.join(rundir, "broker-h%d.log" % h)
            subprocess.call(["sh", "-c", "grep -c '' %s | sed 's/^/  broker-h%d.log lines: /';"
                             " grep -i 'cluster' %s | tail -8" % (log, h, log)])
        return 1
    print("jepsen: run %d/%d: no violation" % (n, total), flush=True)
    if not args.keep:
        shutil.rmtree(rundir, ignore_errors=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--broker", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--short", action="store_true")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--liveness-s", type=float)
    ap.add_argument("--ttl-s", type=int, default=TTL_S,
                    help="the brokers' etcd lease TTL (default %d s; margin 1000 ms)" % TTL_S)
    ap.add_argument("--keep", action="store_true", help="keep the records of passing runs")
    ap.add_argument("--faults", type=lambda v: v.split(","), default=[],
                    help="only these kinds of fault (comma-separated), without --short")
    args = ap.parse_args()
    if args.short:
        args.seconds, args.runs = None, 1
    if args.liveness_s is None:
        # The done-criterion is 10 s; make check's run gets more room, as a
        # loaded 2-core machine slows the recovery, not the faults.
        args.liveness_s = 15.0 if args.short else 10.0
    if args.seed is None:
        args.seed = 1 if args.short else int(time.time()) % 100000
    feat = subprocess.run([args.worker, "--features"], capture_output=True, text=True).stdout
    if feat.strip() != "crash-points":
        print("jepsen: %s is not a CRASH_POINTS=1 build" % args.worker, file=sys.stderr)
        return 2
    if not shutil.which("etcd") or not shutil.which("setpriv"):
        print("jepsen: needs etcd (etcd-server) and setpriv (util-linux)", file=sys.stderr)
        return 2
    worst = 0
    for i in range(args.runs):
        worst = max(worst, one_run(args, args.seed + i, i + 1, args.runs))
    return worst


if __name__ == "__main__":
    sys.exit(main())
