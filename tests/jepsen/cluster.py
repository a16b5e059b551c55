# SPDX-License-Identifier: MIT
"""The parts of the fault suite's cluster (docs/jepsen.md): free ports, a real
3-member etcd on loopback, the TCP proxies that stand for each host's network,
and the brokers as hosts. tests/jepsen/run.py drives them."""
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.request

# Every child dies with the harness, whatever ends it (setpriv: util-linux).
PDEATH = ["setpriv", "--pdeathsig", "KILL"]


def wait_for(cond, timeout_s, step_s=0.05):
    """True once cond() is; False when timeout_s passed first."""
    end = time.monotonic() + timeout_s
    while True:
        if cond():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(step_s)


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _port_is_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Ports:
    """Ports below the ephemeral range, as tests/net_fixture.c free_port()
    picks them: a port bind(0) chose could be handed to an outgoing
    connection before the server bound it."""

    def __init__(self):
        lo, hi = _ephemeral_range()
        self.base, self.span = 10000, lo - 10000
        if self.span < 1000:
            self.base, self.span = hi + 1, 65536 - (hi + 1)
        self.next = (os.getpid() * 2654435761 ^ int(time.monotonic() * 1000)) % self.span
        self.given = set()

    def take(self):
        for _ in range(self.span):
            port = self.base + self.next
            self.next = (self.next + 1) % self.span
            if port not in self.given and _port_is_free(port):
                self.given.add(port)
                return port
        raise RuntimeError("no free port in %d-%d" % (self.base, self.base + self.span - 1))


def proc_state(pid):
    """The state letter of /proc/PID/stat ('T' stopped, 'Z' zombie), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def signal_pid(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Etcd:
    """Three members on loopback, each its own process, data dir and log."""

    def __init__(self, rundir, ports):
        self.dir = rundir
        self.cport = [ports.take() for _ in range(3)]
        self.pport = [ports.take() for _ in range(3)]
        self.proc = [None] * 3
        self.cluster = ",".join("m%d=http://127.0.0.1:%d" % (i, p) for i, p in enumerate(self.pport))

    def start(self, i):
        url = "http://127.0.0.1:%d" % self.cport[i]
        purl = "http://127.0.0.1:%d" % self.pport[i]
        log = open(os.path.join(self.dir, "etcd-m%d.log" % i), "ab")
        # A member restarted on its data dir ignores the --initial-* flags.
        self.proc[i] = subprocess.Popen(PDEATH + [
            "etcd", "--name", "m%d" % i, "--data-dir", os.path.join(self.dir, "etcd-m%d" % i),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
            "--initial-cluster", self.cluster, "--initial-cluster-state", "new",
            "--initial-cluster-token", self.dir, "--heartbeat-interval", "50",
            "--election-timeout", "500"], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def start_all(self):
        for i in range(3):
            self.start(i)

    def _post(self, i, path, body, timeout_s=1.0):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.cport[i], path),
                                     data=body.encode() if body is not None else None)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=timeout_s) as r:
            return json.loads(r.read().decode())

    def healthy(self, i):
        try:
            return self._post(i, "/health", None).get("health") == "true"
        except (OSError, ValueError):
            return False

    def wait_healthy(self, members, timeout_s=30):
        return wait_for(lambda: all(self.healthy(i) for i in members), timeout_s, 0.1)

    def leader(self):
        """The leader's index, or None when no running member names one."""
        for i in range(3):
            if not self.running(i):
                continue
            try:
                st = self._post(i, "/v3/maintenance/status", "{}")
            except (OSError, ValueError):
                continue
            ids = {}
            for j in range(3):
                if not self.running(j):
                    continue
                try:
                    ids[self._post(j, "/v3/maintenance/status", "{}")["header"]["member_id"]] = j
                except (OSError, ValueError, KeyError):
                    pass
            if st.get("leader") in ids:
                return ids[st["leader"]]
        return None

    def move_leader_off(self, i, timeout_s=10):
        """Make another member than @i the leader (etcd's MoveLeader, asked
        of the leader); True once it is."""
        lead = self.leader()
        if lead is None:
            return False
        if lead != i:
            return True
        target = next(j for j in range(3) if j != i and self.running(j))
        try:
            tid = self._post(target, "/v3/maintenance/status", "{}")["header"]["member_id"]
            self._post(lead, "/v3/maintenance/transfer-leadership",
                       json.dumps({"targetID": tid}), timeout_s=5)
        except (OSError, ValueError, KeyError):
            pass
        return wait_for(lambda: self.leader() not in (None, i), timeout_s, 0.1)

    def running(self, i):
        return self.proc[i] is not None and self.proc[i].poll() is None

    def signal(self, i, sig):
        if self.running(i):
            signal_pid(self.proc[i].pid, sig)

    def kill(self, i):
        if self.proc[i] is not None:
            signal_pid(self.proc[i].pid, signal.SIGKILL)
            self.proc[i].wait()
            self.proc[i] = None

    def stop_all(self):
        """Kill every member and drop the data dirs (WALs preallocate 64 MB
        each); the logs stay with the records."""
        for i in range(3):
            self.kill(i)
            shutil.rmtree(os.path.join(self.dir, "etcd-m%d" % i), ignore_errors=True)


class Proxy:
    """Each host's way to the etcd members: one listening port per member,
    bytes forwarded as they come while the host is 'up'. 'refuse': every
    connection of the host is reset and new ones are reset at once (a host
    whose packets are rejected). 'blackhole': nothing moves any more and new
    connections are accepted but never forwarded (packets dropped); at the
    heal those connections are reset, as a peer's TCP would time them out."""

    def __init__(self, hosts, targets, ports):
        self.targets = targets
        self.state = ["up"] * hosts
        self.flowing = [threading.Event() for _ in range(hosts)]
        for e in self.flowing:
            e.set()
        self.conns = [set() for _ in range(hosts)]
        self.lock = threading.Lock()
        self.stopping = False
        self.ports = [[ports.take() for _ in targets] for _ in range(hosts)]
        self.listeners = []
        for h in range(hosts):
            for m, port in enumerate(self.ports[h]):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))
                s.listen(64)
                s.settimeout(0.2)
                self.listeners.append(s)
                threading.Thread(target=self._accept, args=(s, h, m), daemon=True).start()

    def endpoints(self, h):
        return "etcd://" + ",".join("127.0.0.1:%d" % p for p in self.ports[h])

    @staticmethod
    def _reset(s):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            s.close()
        except OSError:
            pass

    def _accept(self, lsock, h, m):
        while not self.stopping:
            try:
                c, _ = lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                state = self.state[h]
                if state == "refuse":
                    self._reset(c)
                    continue
                self.conns[h].add(c)
            if state == "blackhole":
                continue  # held, never forwarded; reset at the heal
            threading.Thread(target=self._connect, args=(c, h, m), daemon=True).start()

    def _connect(self, c, h, m):
        up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        up.settimeout(2.0)
        try:
            up.connect(("127.0.0.1", self.targets[m]))
        except OSError:
            self._drop(h, c)
            self._reset(up)
            return
        up.settimeout(None)
        with self.lock:
            if self.state[h] != "up" or c not in self.conns[h]:
                self._reset(up)
                return
            self.conns[h].add(up)
        for a, b in ((c, up), (up, c)):
            threading.Thread(target=self._pump, args=(a, b, h), daemon=True).start()

    def _drop(self, h, *socks):
        with self.lock:
            for s in socks:
                self.conns[h].discard(s)
        for s in socks:
            self._reset(s)

    def _pump(self, src, dst, h):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if data:
                self.flowing[h].wait()
                with self.lock:
                    alive = src in self.conns[h] and dst in self.conns[h]
                if alive:
                    try:
                        dst.sendall(data)
                        continue
                    except OSError:
                        pass
            self._drop(h, src, dst)
            return

    def set(self, h, state):
        """Apply @state ('up', 'refuse', 'blackhole') to host @h's network."""
        with self.lock:
            old, self.state[h] = self.state[h], state
            doomed = list(self.conns[h]) if state == "refuse" or old == "blackhole" else []
            for s in doomed:
                self.conns[h].discard(s)
            if state == "blackhole":
                self.flowing[h].clear()
        for s in doomed:
            self._reset(s)
        if state != "blackhole":
            self.flowing[h].set()

    def stop(self):
        self.stopping = True
        for s in self.listeners:
            s.close()
        for h in range(len(self.conns)):
            self.set(h, "refuse")


class Broker:
    """One host: shmlockd with its own socket and segment, reaching etcd
    through its proxy."""

    def __init__(self, bin_path, rundir, h, endpoints, prefix, ttl_s, margin_ms):
        self.h = h
        self.sock = os.path.join(rundir, "h%d.sock" % h)
        self.shm = "/shmlock-jepsen-%d-h%d" % (os.getpid(), h)
        self.log = os.path.join(rundir, "broker-h%d.log" % h)
        self.argv = PDEATH + [bin_path, "--socket", self.sock, "--shm-name", self.shm,
                              "--log-level", "info", "--cluster", endpoints,
                              "--cluster-prefix", prefix, "--cluster-lease-ttl", str(ttl_s),
                              "--cluster-margin", str(margin_ms), "--cluster-batch", "4"]
        self.proc = None

    def answers(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(self.sock)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def start(self, timeout_s=20):
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        if not wait_for(lambda: self.answers() or self.proc.poll() is not None, timeout_s):
            raise RuntimeError("broker h%d did not come up (log %s)" % (self.h, self.log))
        if self.proc.poll() is not None:
            raise RuntimeError("broker h%d exited with %d (log %s)" %
                               (self.h, self.proc.returncode, self.log))

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            signal_pid(self.proc.pid, sig)

    def kill(self):
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self):
        """A clean stop (SIGTERM), SIGKILL after 10 s; then the segment's
        keeper (a process the broker forked, which outlives it to hand the
        segment to the next broker) is ended by removing its socket file, and
        the segment's name is unlinked."""
        if self.proc is not None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        for path in (self.sock + ".keep", "/dev/shm" + self.shm):
            try:
                os.unlink(path)
            except OSError:
                pass
