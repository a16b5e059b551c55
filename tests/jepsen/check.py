#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The checker of the fault suite (docs/jepsen.md).

Reads a run directory left by tests/jepsen/run.py:

  run.json      the run's parameters: lock_key, sem_key, sem_limit, hosts,
                liveness_s
  w-*.log       one file per client (tests/jepsen/worker.c explains the lines)
  nemesis.log   '<ns> begin|heal|note <what>' per fault, CLOCK_MONOTONIC

and judges, with CLOCK_MONOTONIC compared across processes (one machine):

  exclusion     no two confirmed holds of the lock key overlap in time;
  limit         never more confirmed holders of the semaphore than its limit;
  token order   fencing tokens of the lock key strictly rising in grant order
                (every grant written down, confirmed or not);
  fencing       no confirmed hold of the lock key refused by the fenced file;
  liveness      every host granted each key within liveness_s of the last
                heal;
  availability  no lease lost while only one etcd follower was down (the
                harness counts the brokers' reports and writes a
                'minority-fault: N ...' note after each such fault).

A hold is confirmed when its release returned 0: the product still counted it
as held then, so the recorded interval [grant, release] lies inside a real
hold. A hold whose release failed (lost to a fault, as the product reported)
ended at an unknown time: it is left out of exclusion and limit, but its grant
counts for token order (its record can follow a later grant of a higher token
only if its client was descheduled longer than the brokers' margin between
the grant and the record), and a refusal by the fence counts as fencing at
work.

Prints a summary with counts and exits 1 on any violation, 2 on unusable input.
"""
import glob
import json
import os
import sys

EXAMPLES = 5
# Times are printed in seconds from the run's first nemesis record (the
# harness prints its schedule on the same scale).
T0 = 0


class Hold:
    __slots__ = ("host", "worker", "kind", "key", "token", "start", "end", "rc",
                 "f0", "f1", "stopped", "line")

    def __init__(self, w, token, start, line):
        self.host, self.worker, self.kind, self.key = w["host"], w["name"], w["kind"], w["key"]
        self.token, self.start, self.line = token, start, line
        self.end = self.rc = None
        self.f0 = self.f1 = None
        self.stopped = False

    @property
    def status(self):
        if self.rc is None:
            return "open"
        return "ok" if self.rc == 0 else "lost"

    def __repr__(self):
        end = "-" if self.end is None else "%.3f" % ((self.end - T0) / 1e9)
        return ("%s:%d host %d token %d [%.3f, %s] %s rc=%s fence=%s/%s%s" %
                (self.worker, self.line, self.host, self.token, (self.start - T0) / 1e9, end,
                 self.status, self.rc, self.f0, self.f1, " stopped-inside" if self.stopped else ""))


def parse_worker(name, lines):
    """The holds and errors of one worker's log (a list of lines)."""
    w, holds, errors, cur = None, [], [], None
    for n, line in enumerate(lines, 1):
        f = line.split()
        if not f:
            continue
        if f[0] == "W":
            kv = dict(x.split("=", 1) for x in f[1:])
            w = {"name": name, "host": int(kv["host"]), "kind": kv["kind"], "key": kv["key"]}
        elif w is None:
            raise ValueError("%s:%d: a record before the W line" % (name, n))
        elif f[0] == "G":
            cur = Hold(w, int(f[2]), int(f[1]), n)
            holds.append(cur)
        elif f[0] == "S" and cur is not None:
            cur.stopped = True
        elif f[0] == "R":
            if cur is None or cur.token != int(f[2]):
                raise ValueError("%s:%d: a release without its grant" % (name, n))
            cur.end, cur.rc = int(f[1]), int(f[3])
            cur.f0 = None if f[4] == "-" else int(f[4])
            cur.f1 = None if f[5] == "-" else int(f[5])
            cur = None
        elif f[0] == "E":
            errors.append((f[2], int(f[3])))
    if w is None:
        raise ValueError("%s: no W line" % name)
    return w, holds, errors


def overlaps(holds):
    """(pairs, worst_ns, examples, (first, last)) of confirmed holds
    overlapping in time; first and last: when the first and the last of them
    began (None without any)."""
    ok = sorted((h for h in holds if h.status == "ok"), key=lambda h: h.start)
    pairs, worst, examples, active, first, last = 0, 0, [], [], None, None
    for h in ok:
        active = [a for a in active if a.end > h.start]
        for a in active:
            pairs += 1
            ov = min(a.end, h.end) - h.start
            worst = max(worst, ov)
            first = h.start if first is None else first
            last = h.start
            if len(examples) < EXAMPLES:
                examples.append((a, h))
        active.append(h)
    return pairs, worst, examples, (first, last)


def max_concurrent(holds, limit):
    """(max holders at once, grants beyond the limit, examples, (first, last))
    over confirmed holds; first and last: the first and the last grant beyond
    the limit (None without any)."""
    ev = []
    for h in holds:
        if h.status == "ok":
            ev.append((h.start, 1, h))
            ev.append((h.end, 0, h))  # at one instant, ends before starts
    ev.sort(key=lambda e: (e[0], e[1]))
    cur, best, excess, examples, inside, first, last = 0, 0, 0, [], set(), None, None
    for t, up, h in ev:
        if up:
            cur += 1
            inside.add(h)
            if cur > limit:
                excess += 1
                first = t if first is None else first
                last = t
                if len(examples) < EXAMPLES:
                    examples.append(sorted(inside, key=lambda x: x.start))
        else:
            cur -= 1
            inside.discard(h)
        best = max(best, cur)
    return best, excess, examples, (first, last)


def token_regressions(holds):
    """(count, examples) of grants whose token is not above every earlier one."""
    seq = sorted(holds, key=lambda h: h.start)
    top, n, examples = None, 0, []
    for h in seq:
        if top is not None and h.token <= top.token:
            n += 1
            if len(examples) < EXAMPLES:
                examples.append((top, h))
        if top is None or h.token > top.token:
            top = h
    return n, examples


def time_to_serve(holds, hosts, since_ns):
    """{host: ns from since_ns to its first grant after it, or None}."""
    out = {h: None for h in range(hosts)}
    for h in holds:
        if h.start > since_ns:
            d = h.start - since_ns
            if out[h.host] is None or d < out[h.host]:
                out[h.host] = d
    return out


def parse_nemesis(lines):
    events = []
    for line in lines:
        f = line.split(None, 2)
        if len(f) >= 2:
            events.append((int(f[0]), f[1], f[2].strip() if len(f) > 2 else ""))
    return events


def judge(cfg, workers, nemesis, out=sys.stdout):
    """Check one run; prints the summary to @out, returns the violations' count."""
    global T0
    p = lambda *a: print(*a, file=out)
    T0 = min((t for t, _, _ in nemesis), default=0)
    holds, errors = [], {}
    for w, hs, errs in workers:
        holds.extend(hs)
        for op, rc in errs:
            errors[(w["kind"], op, rc)] = errors.get((w["kind"], op, rc), 0) + 1
    lock = [h for h in holds if h.kind == "lock" and h.key == cfg["lock_key"]]
    sem = [h for h in holds if h.kind == "sem" and h.key == cfg["sem_key"]]
    heals = [t for t, what, _ in nemesis if what == "heal"]
    last_heal = max(heals) if heals else T0  # no fault: served from the start
    bound = int(cfg["liveness_s"] * 1e9)
    last_record = max([h.end or h.start for h in holds], default=0)
    bad = 0

    def count(hs):
        c = {"ok": 0, "lost": 0, "open": 0}
        for h in hs:
            c[h.status] += 1
        return "%d (%d confirmed, %d lost, %d open at the end)" % (len(hs), c["ok"], c["lost"],
                                                                   c["open"])

    def violation(what, n, examples, fmt):
        nonlocal bad
        if n:
            bad += n
            p("VIOLATION %s: %d; first %d:" % (what, n, len(examples)))
            for e in examples:
                p("   ", fmt(e))

    p("lock %s: holds %s" % (cfg["lock_key"], count(lock)))
    pairs, worst, ex, (first, last) = overlaps(lock)
    p("  overlaps (confirmed holds): %d, worst %.3f ms%s" % (
        pairs, worst / 1e6, "" if first is None else ", from %.3f s to %.3f s" % (
            (first - T0) / 1e9, (last - T0) / 1e9)))
    violation("exclusion", pairs, ex, lambda e: "%r\n     overlaps %r" % e)
    n, ex = token_regressions(lock)
    p("  token regressions: %d" % n)
    violation("token order", n, ex, lambda e: "%r\n     then %r" % e)
    refused_ok = [h for h in lock if h.status == "ok" and 1 in (h.f0, h.f1)]
    refused_lost = [h for h in lock if h.status != "ok" and 1 in (h.f0, h.f1)]
    p("  fence refusals: %d of confirmed holds, %d of lost ones (fencing at work)" %
      (len(refused_ok), len(refused_lost)))
    violation("fencing refused a confirmed hold", len(refused_ok), refused_ok[:EXAMPLES], repr)
    stopped = [h for h in lock + sem if h.stopped]
    for h in stopped:
        p("  stopped inside its hold: %r" % h)

    p("semaphore %s (limit %d): holds %s" % (cfg["sem_key"], cfg["sem_limit"], count(sem)))
    best, excess, ex, (first, last) = max_concurrent(sem, cfg["sem_limit"])
    p("  max concurrent (confirmed holds): %d%s" % (best, "" if first is None else (
        ", over the limit from %.3f s to %.3f s" % ((first - T0) / 1e9, (last - T0) / 1e9))))
    violation("semaphore limit", excess, ex,
              lambda e: "%d inside:\n      " % len(e) + "\n      ".join(map(repr, e)))
    dup = len(sem) - len({h.token for h in sem})
    violation("semaphore token reused", dup, [], repr)

    p("liveness: last heal at %.3f s, bound %.1f s, records until %.3f s" %
      ((last_heal - T0) / 1e9, bound / 1e9, (last_record - T0) / 1e9))
    if last_record < last_heal + bound and not all(
            v is not None for hs in (lock, sem)
            for v in time_to_serve(hs, cfg["hosts"], last_heal).values()):
        p("  (the records end before the bound: a host unserved so far counts as unserved)")
    for name, hs in (("lock", lock), ("semaphore", sem)):
        tts = time_to_serve(hs, cfg["hosts"], last_heal)
        p("  %s time to serve per host: %s" % (name, ", ".join(
            "h%d %s" % (k, "never" if v is None else "%.3f s" % (v / 1e9))
            for k, v in sorted(tts.items()))))
        late = [(k, v) for k, v in sorted(tts.items()) if v is None or v > bound]
        violation("liveness (%s)" % name, len(late), late,
                  lambda e: "host %d: %s" % (e[0], "never served" if e[1] is None else
                                             "first served %.3f s after the heal" % (e[1] / 1e9)))
    minority = [(t, text) for t, what, text in nemesis
                if what == "note" and text.startswith("minority-fault:")]
    lost = [(t, text) for t, text in minority if int(text.split()[1]) > 0]
    p("availability: %d fault(s) of one etcd follower, %d with leases lost" % (
        len(minority), len(lost)))
    violation("availability (a lease lost while only a follower was down)",
              sum(int(text.split()[1]) for _, text in lost), lost,
              lambda e: "%.3f s: %s" % ((e[0] - T0) / 1e9, e[1]))
    if errors:
        p("errors returned: " + ", ".join("%s %s %d: %d" % (k + (v,))
                                          for k, v in sorted(errors.items())))
    return bad


def load(rundir):
    with open(os.path.join(rundir, "run.json")) as f:
        cfg = json.load(f)
    workers = []
    for path in sorted(glob.glob(os.path.join(rundir, "w-*.log"))):
        with open(path) as f:
            workers.append(parse_worker(os.path.basename(path), f.read().splitlines()))
    nem = os.path.join(rundir, "nemesis.log")
    with open(nem) as f:
        nemesis = parse_nemesis(f.read().splitlines())
    return cfg, workers, nemesis


def main(argv):
    if len(argv) != 2:
        print("usage: check.py RUNDIR", file=sys.stderr)
        return 2
    try:
        cfg, workers, nemesis = load(argv[1])
    except (OSError, ValueError, KeyError) as e:
        print("check: %s" % e, file=sys.stderr)
        return 2
    t0 = min((t for t, _, _ in nemesis), default=0)
    for t, what, text in nemesis:
        print("  %8.3f s  %-5s %s" % ((t - t0) / 1e9, what, text))
    bad = judge(cfg, workers, nemesis)
    print("check: %s" % ("%d violation(s)" % bad if bad else "no violation"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
