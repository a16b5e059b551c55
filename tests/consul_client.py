#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Debian's python3-consul against shmlockd's Consul-compatible API
(tests/it_consul.c runs it): sessions, a lock with acquire/release, leader
election with a blocking query, a session's TTL renew. With
"PORT discover KEY NAME VALUE": leader discovery of a holder from elsewhere
(KEY's value and its session's Name). Exits non-zero on the first
mismatch."""
import sys
import threading

import consul

port = int(sys.argv[1])
c = consul.Consul(host="127.0.0.1", port=port)


def check(cond, what):
    if not cond:
        print("consul_client.py: FAILED:", what, file=sys.stderr)
        sys.exit(1)


def discover(key, name, value):
    """Consul's leader discovery: read the key, then its Session's info.
    The holder (shmlock lock) may still be starting: wait for it with a
    blocking query, 20 s at most in all."""
    index, e = c.kv.get(key)
    for _ in range(20):
        if e is not None and "Session" in e:
            break
        index, e = c.kv.get(key, index=index, wait="1s")
    check(e is not None and "Session" in e, "%s is not held: %r" % (key, e))
    check(e["Value"] == value.encode(), "the leader's value %r" % e)
    index, info = c.session.info(e["Session"])
    check(info is not None, "no info for session %s" % e["Session"])
    check(info["ID"] == e["Session"] and info["Name"] == name, "session info %r" % info)
    print("consul_client.py: leader %s is %s (%s) on %s" % (key, info["Name"], value,
                                                            info["Node"]))
    sys.exit(0)


if len(sys.argv) == 6 and sys.argv[2] == "discover":
    discover(sys.argv[3], sys.argv[4], sys.argv[5])


# Sessions
a = c.session.create(name="leader-a", lock_delay=0, ttl=30)
b = c.session.create(name="leader-b", lock_delay=0, behavior="delete")
check(len(a) == 36 and a != b, "session ids")
index, info = c.session.info(a)
check(info["Name"] == "leader-a" and info["TTL"] == "30s", "session info %r" % info)
check(c.session.renew(a)["ID"] == a, "renew")
index, sessions = c.session.list()
check({s["ID"] for s in sessions} == {a, b}, "session list")

# A lock: one holder at a time
check(c.kv.put("locks/job", "a", acquire=a) is True, "a acquires")
check(c.kv.put("locks/job", "b", acquire=b) is False, "b is refused")
index, e = c.kv.get("locks/job")
check(e["Session"] == a and e["Value"] == b"a" and e["LockIndex"] == 1, "entry %r" % e)
check(c.kv.put("locks/job", "", release=b) is False, "b cannot release")
check(c.kv.put("locks/job", "", release=a) is True, "a releases")
check(c.kv.put("locks/job", "b", acquire=b) is True, "b acquires")

# Leader election: a follower blocks on the key until the leader goes
check(c.kv.put("service/web/leader", "a", acquire=a) is True, "a leads")
index, e = c.kv.get("service/web/leader")
seen = {}


def follower():
    idx = index
    while True:
        idx, cur = c.kv.get("service/web/leader", index=idx, wait="20s")
        if cur is None or "Session" not in cur:
            seen["free"] = idx
            return


t = threading.Thread(target=follower)
t.start()
c.session.destroy(a)  # the leader dies
t.join(30)
check("free" in seen, "the follower saw the leader go")
check(c.kv.put("service/web/leader", "b", acquire=b) is True, "b leads")
index, e = c.kv.get("service/web/leader")
check(e["Session"] == b, "b is the leader")

# CAS, recurse, delete
index, e = c.kv.get("service/web/leader")
check(c.kv.put("cfg/x", "1", cas=0) is True, "cas create")
check(c.kv.put("cfg/x", "2", cas=0) is False, "cas create again")
index, x = c.kv.get("cfg/x")
check(c.kv.put("cfg/x", "2", cas=x["ModifyIndex"]) is True, "cas update")
index, keys = c.kv.get("", keys=True)
check("cfg/x" in keys and "locks/job" in keys, "keys %r" % keys)
check(c.kv.delete("cfg", recurse=True) is True, "delete")
index, x = c.kv.get("cfg/x")
check(x is None, "deleted")

# behavior delete: b's keys go with it
c.session.destroy(b)
index, e = c.kv.get("locks/job")
check(e is None, "behavior delete dropped b's key")
print("consul_client.py: ok")
