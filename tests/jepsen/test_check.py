#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Unit tests of the fault suite's checker (tests/jepsen/check.py): each
violation it must find, each look-alike it must not count."""
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

S = 1000000000
CFG = {"lock_key": "c/l", "sem_key": "c/s", "sem_limit": 2, "hosts": 2, "liveness_s": 10}


def worker(name, host, kind, *lines):
    key = "c/l" if kind == "lock" else "c/s"
    head = "W host=%d id=0 kind=%s key=%s pid=1" % (host, kind, key)
    return check.parse_worker(name, [head] + list(lines))


def hold(start, end, tok, rc=0, f0="0", f1="0"):
    return ["G %d %d" % (start, tok), "R %d %d %d %s %s" % (end, tok, rc, f0, f1)]


def run(workers, heal=0):
    nem = check.parse_nemesis(["%d heal partition" % heal] if heal else [])
    out = io.StringIO()
    bad = check.judge(CFG, workers, nem, out)
    return bad, out.getvalue()


def served(t):
    """Both hosts served both keys at @t: liveness is not what a test is about."""
    return [worker("l0", 0, "lock", *hold(t, t + 1, 10**9 + t)),
            worker("l1", 1, "lock", *hold(t + 2, t + 3, 10**9 + t + 2)),
            worker("s0", 0, "sem", *hold(t, t + 1, 1)), worker("s1", 1, "sem", *hold(t, t + 1, 2))]


class Parse(unittest.TestCase):
    def test_open_lost_and_stopped(self):
        w, hs, errs = check.parse_worker("w", [
            "W host=1 id=2 kind=lock key=c/l pid=9", "G 10 5", "S 11 5", "R 20 5 -83 0 1",
            "E 25 acquire -110", "G 30 6"])
        self.assertEqual(w["host"], 1)
        self.assertEqual([h.status for h in hs], ["lost", "open"])
        self.assertTrue(hs[0].stopped)
        self.assertEqual((hs[0].f0, hs[0].f1), (0, 1))
        self.assertEqual(errs, [("acquire", -110)])

    def test_release_without_grant_is_refused(self):
        with self.assertRaises(ValueError):
            check.parse_worker("w", ["W host=0 id=0 kind=lock key=k pid=1", "R 1 2 0 0 0"])


class Exclusion(unittest.TestCase):
    def test_disjoint_holds_pass(self):
        ws = [worker("a", 0, "lock", *hold(1 * S, 2 * S, 1), *hold(3 * S, 4 * S, 3)),
              worker("b", 1, "lock", *hold(2 * S + 1, 3 * S - 1, 2))] + served(5 * S)
        bad, out = run(ws)
        self.assertEqual(bad, 0, out)
        self.assertIn("overlaps (confirmed holds): 0", out)

    def test_overlap_of_confirmed_holds_found(self):
        ws = [worker("a", 0, "lock", *hold(1 * S, 3 * S, 1)),
              worker("b", 1, "lock", *hold(2 * S, 4 * S, 2))] + served(5 * S)
        bad, out = run(ws)
        self.assertEqual(bad, 1, out)
        self.assertIn("VIOLATION exclusion: 1", out)
        self.assertIn("worst 1000.000 ms, from 2.000 s to 2.000 s", out)

    def test_lost_hold_is_no_overlap(self):
        # Its host lost the key; the holder learnt it at the release.
        ws = [worker("a", 0, "lock", *hold(1 * S, 3 * S, 1, rc=-83, f1="1")),
              worker("b", 1, "lock", *hold(2 * S, 4 * S, 2))] + served(5 * S)
        bad, out = run(ws)
        self.assertEqual(bad, 0, out)
        self.assertIn("0 of confirmed holds, 1 of lost ones", out)

    def test_fence_refusing_a_confirmed_hold_is_a_violation(self):
        ws = [worker("a", 0, "lock", *hold(1 * S, 2 * S, 5, f0="1"))] + served(5 * S)
        bad, out = run(ws)
        self.assertIn("VIOLATION fencing refused a confirmed hold: 1", out)


class Tokens(unittest.TestCase):
    def test_regression_in_grant_order_found(self):
        ws = [worker("a", 0, "lock", *hold(1 * S, 2 * S, 7)),
              worker("b", 1, "lock", *hold(3 * S, 4 * S, 6, rc=-83))] + served(5 * S)
        bad, out = run(ws)
        self.assertIn("VIOLATION token order: 1", out)

    def test_equal_token_is_a_regression(self):
        n, _ = check.token_regressions(
            worker("a", 0, "lock", *hold(1, 2, 7), *hold(3, 4, 7))[1])
        self.assertEqual(n, 1)


class Semaphore(unittest.TestCase):
    def test_two_holders_pass_three_fail(self):
        two = [worker("a", 0, "sem", *hold(1 * S, 3 * S, 1)),
               worker("b", 1, "sem", *hold(2 * S, 4 * S, 2))]
        self.assertEqual(check.max_concurrent(sum((w[1] for w in two), []), 2)[:2], (2, 0))

        three = two + [worker("c", 1, "sem", *hold(2 * S + 5, 2 * S + 9, 3))]
        bad, out = run(three + served(5 * S))
        self.assertIn("max concurrent (confirmed holds): 3, over the limit from 2.000 s", out)
        self.assertIn("VIOLATION semaphore limit: 1", out)

    def test_end_and_start_at_one_instant_is_a_handoff(self):
        hs = [worker("a", 0, "sem", *hold(1, 5, 1))[1][0],
              worker("b", 0, "sem", *hold(2, 6, 2))[1][0],
              worker("c", 1, "sem", *hold(5, 9, 3))[1][0]]
        self.assertEqual(check.max_concurrent(hs, 2)[:2], (2, 0))


class Liveness(unittest.TestCase):
    def test_host_unserved_after_heal_found(self):
        heal = 10 * S
        ws = [worker("a", 0, "lock", *hold(11 * S, 12 * S, 5)),
              worker("b", 1, "lock", *hold(5 * S, 6 * S, 4), *hold(25 * S, 26 * S, 6)),
              worker("s0", 0, "sem", *hold(11 * S, 12 * S, 1)),
              worker("s1", 1, "sem", *hold(11 * S, 12 * S, 2))]
        bad, out = run(ws, heal)
        self.assertEqual(bad, 1, out)
        self.assertIn("VIOLATION liveness (lock): 1", out)
        self.assertIn("host 1: first served 15.000 s after the heal", out)

    def test_never_served_found(self):
        heal = 10 * S
        ws = [worker("a", 0, "lock", *hold(11 * S, 12 * S, 5)),
              worker("s0", 0, "sem", *hold(11 * S, 12 * S, 1)),
              worker("s1", 1, "sem", *hold(11 * S, 12 * S, 2))]
        bad, out = run(ws, heal)
        self.assertIn("host 1: never served", out)


class Availability(unittest.TestCase):
    def test_lease_lost_to_a_follower_found(self):
        nem = check.parse_nemesis([
            "%d note minority-fault: 0 lease(s) lost while one follower member was down (h0 0)"
            % S,
            "%d note minority-fault: 2 lease(s) lost while one first-follower member was down"
            " (h0 1, h1 1)" % (2 * S)])
        out = io.StringIO()
        bad = check.judge(CFG, served(5 * S), nem, out)
        self.assertEqual(bad, 2, out.getvalue())
        self.assertIn("2 fault(s) of one etcd follower, 1 with leases lost", out.getvalue())


if __name__ == "__main__":
    unittest.main(verbosity=1)
