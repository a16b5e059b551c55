#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Drive headless Chromium over the DevTools protocol for tests/it_ui.c.

Standard library only (Debian's /usr/bin/python3): a WebSocket client of
its own (RFC 6455, client frames masked, no extensions) over a socket.

    cdp.py CHROMIUM PROFILE_DIR

starts Chromium with its own profile and an ephemeral debugging port (read
back from PROFILE_DIR/DevToolsActivePort), then answers one line per
command read from stdin:

    goto URL          navigate                                   -> ok
    wait MS EXPR      evaluate EXPR until truthy, at most MS ms  -> ok | timeout JSON
    eval EXPR         evaluate once                               -> JSON of the value
    shot PATH         PNG screenshot of the page                 -> ok
    dom PATH          the page's outerHTML into PATH              -> ok
    quit

Chromium dies with this script (PR_SET_PDEATHSIG), which dies with the test.
"""
import base64
import ctypes
import http.client
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time


def die_with_parent():
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


class WebSocket:
    def __init__(self, url):
        m = re.match(r'ws://([^/:]+):(\d+)(/.*)', url)
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.s = socket.create_connection((host, port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f'GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n'
                        'Upgrade: websocket\r\nConnection: Upgrade\r\n'
                        f'Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n')
                       .encode())
        buf = b''
        while b'\r\n\r\n' not in buf:
            chunk = self.s.recv(4096)
            if not chunk:
                raise EOFError('handshake')
            buf += chunk
        head, self.rest = buf.split(b'\r\n\r\n', 1)
        if b' 101 ' not in head.split(b'\r\n')[0]:
            raise RuntimeError('no WebSocket upgrade: %r' % head[:80])

    def _frame(self, op, data):
        hdr = bytearray([0x80 | op])
        n = len(data)
        if n < 126:
            hdr.append(0x80 | n)
        elif n < 65536:
            hdr.append(0x80 | 126)
            hdr += struct.pack('>H', n)
        else:
            hdr.append(0x80 | 127)
            hdr += struct.pack('>Q', n)
        mask = os.urandom(4)
        hdr += mask
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.s.sendall(bytes(hdr) + body)

    def send(self, text):
        self._frame(1, text.encode())

    def _read(self, n):
        while len(self.rest) < n:
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise EOFError('connection closed')
            self.rest += chunk
        d, self.rest = self.rest[:n], self.rest[n:]
        return d

    def recv(self):
        msg = b''
        while True:
            b0, b1 = self._read(2)
            op, n = b0 & 0xf, b1 & 0x7f
            if n == 126:
                n = struct.unpack('>H', self._read(2))[0]
            elif n == 127:
                n = struct.unpack('>Q', self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if op == 8:
                raise EOFError('closed by Chromium')
            if op == 9:
                self._frame(10, data)
                continue
            if op == 10:
                continue
            msg += data
            if b0 & 0x80:
                return msg.decode()


class Browser:
    def __init__(self, chromium, profile):
        os.makedirs(profile, exist_ok=True)
        portfile = os.path.join(profile, 'DevToolsActivePort')
        if os.path.exists(portfile):
            os.unlink(portfile)
        self.proc = subprocess.Popen(
            [chromium, '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
             '--disable-dev-shm-usage', '--hide-scrollbars', '--window-size=1280,900',
             '--user-data-dir=' + profile, '--remote-debugging-port=0', 'about:blank'],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent)
        end = time.monotonic() + 20
        port = None
        while time.monotonic() < end and port is None:
            try:
                with open(portfile) as f:
                    port = int(f.readline())
            except (OSError, ValueError):
                if self.proc.poll() is not None:
                    raise RuntimeError('chromium exited with %d' % self.proc.returncode)
                time.sleep(0.05)
        if port is None:
            raise RuntimeError('chromium did not open its debugging port')
        ws = None
        while time.monotonic() < end and not ws:
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
            c.request('GET', '/json/list')
            pages = [t for t in json.loads(c.getresponse().read()) if t.get('type') == 'page']
            c.close()
            ws = pages[0]['webSocketDebuggerUrl'] if pages else None
            if not ws:
                time.sleep(0.05)
        self.ws = WebSocket(ws)
        self.id = 0
        self.call('Page.enable')

    def call(self, method, params=None):
        self.id += 1
        self.ws.send(json.dumps({'id': self.id, 'method': method, 'params': params or {}}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get('id') == self.id:
                if 'error' in m:
                    raise RuntimeError('%s: %s' % (method, m['error']))
                return m['result']

    def eval(self, expr):
        r = self.call('Runtime.evaluate', {'expression': expr, 'returnByValue': True})
        if 'exceptionDetails' in r:
            return None
        return r['result'].get('value')

    def close(self):
        self.proc.kill()
        self.proc.wait()


def main():
    b = Browser(sys.argv[1], sys.argv[2])
    out = sys.stdout
    try:
        for line in sys.stdin:
            cmd, _, arg = line.rstrip('\n').partition(' ')
            if cmd == 'goto':
                b.call('Page.navigate', {'url': arg})
                reply = 'ok'
            elif cmd == 'wait':
                ms, _, expr = arg.partition(' ')
                end = time.monotonic() + int(ms) / 1000
                reply = None
                while reply is None:
                    v = b.eval(expr)
                    if v not in (None, False, 0, ''):
                        reply = 'ok'
                    elif time.monotonic() >= end:
                        reply = 'timeout ' + json.dumps(v)
                    else:
                        time.sleep(0.05)
            elif cmd == 'eval':
                reply = json.dumps(b.eval(arg))
            elif cmd == 'shot':
                png = b.call('Page.captureScreenshot', {'format': 'png'})['data']
                with open(arg, 'wb') as f:
                    f.write(base64.b64decode(png))
                reply = 'ok'
            elif cmd == 'dom':
                with open(arg, 'w') as f:
                    f.write(b.eval('document.documentElement.outerHTML') or '')
                reply = 'ok'
            elif cmd == 'quit':
                break
            else:
                reply = 'error unknown command'
            out.write(reply.replace('\n', ' ') + '\n')
            out.flush()
    finally:
        b.close()


if __name__ == '__main__':
    main()
