#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A fixed-count client for profiling the broker's network paths
(scripts/netcpu-profile.sh): N threads, one connection each, acquire+release
over dflockd's TCP protocol or the HTTP API, own keys or one shared key; or
(connect) a new HTTP connection per op, one GET /v1/stats on it.

Phases, so that the profiler counts only the measured ops: connect and warm
up, print "ready" and wait for a line on stdin; run OPS ops per client,
print "done" and wait for a line; close.

usage: netcpu-drive.py tcp|http|connect PORT CLIENTS OPS own|shared [WARM]
"""
import socket
import sys
import threading

proto, port, nclients, ops, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5]
warm = int(sys.argv[6]) if len(sys.argv) > 6 else 50
shared = keys == "shared"


class Client:
    def __init__(self, idx):
        self.s = None
        self.buf = b""
        self.key = "prof-shared" if shared else "prof-%d" % idx
        self.session = None
        if proto == "connect":
            return  # a connection per op
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if proto == "http":
            st, body = self.http(b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Content-Length: 0\r\n\r\n")
            assert st == 200, body
            self.session = body.split(b'"session_id":"')[1].split(b'"')[0].decode()

    def line(self):
        while b"\n" not in self.buf:
            d = self.s.recv(4096)
            if not d:
                raise EOFError
            self.buf += d
        ln, self.buf = self.buf.split(b"\n", 1)
        return ln

    def http(self, req):
        self.s.sendall(req)
        while b"\r\n\r\n" not in self.buf:
            d = self.s.recv(4096)
            if not d:
                raise EOFError
            self.buf += d
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        n = 0
        for h in head.split(b"\r\n")[1:]:
            k, v = h.split(b":", 1)
            if k.strip().lower() == b"content-length":
                n = int(v)
        while len(rest) < n:
            d = self.s.recv(4096)
            if not d:
                raise EOFError
            rest += d
        self.buf = rest[n:]
        return int(head.split(b" ")[1]), rest[:n]

    def op(self):
        if proto == "connect":
            self.s = socket.create_connection(("127.0.0.1", port))
            self.buf = b""
            st, rb = self.http(b"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               b"Connection: close\r\n\r\n")
            self.s.close()
            self.s = None
            assert st == 200, (st, rb)
            return
        t = 10 if shared else 0
        if proto == "tcp":
            self.s.sendall(b"l\n%s\n%d\n" % (self.key.encode(), t))
            ln = self.line().split()
            assert ln[0] == b"ok", ln
            self.s.sendall(b"r\n%s\n%s\n" % (self.key.encode(), ln[1]))
            ln = self.line()
            assert ln == b"ok", ln
            return
        body = b'{"acquire_timeout_s":%d}' % t
        hdr = ("Host: 127.0.0.1\r\nX-Dflockd-Session: %s\r\nContent-Type: application/json\r\n"
               % self.session).encode()
        st, rb = self.http(b"POST /v1/locks/%s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
                           % (self.key.encode(), hdr, len(body), body))
        assert st == 200 and b'"status":"ok"' in rb, rb
        tok = rb.split(b'"token":"')[1].split(b'"')[0]
        body = b'{"token":"%s"}' % tok
        st, rb = self.http(b"POST /v1/locks/%s/release HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
                           % (self.key.encode(), hdr, len(body), body))
        assert st == 204, rb


def run(clients, n):
    errs = []

    def body(c):
        try:
            for _ in range(n):
                c.op()
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(repr(e))
    th = [threading.Thread(target=body, args=(c,)) for c in clients]
    for t in th:
        t.start()
    for t in th:
        t.join()
    if errs:
        sys.exit("netcpu-drive: " + errs[0])


clients = [Client(i) for i in range(nclients)]
run(clients, warm)
print("ready", flush=True)
sys.stdin.readline()
run(clients, ops)
print("done", flush=True)
sys.stdin.readline()
for c in clients:
    if c.s:
        c.s.close()
