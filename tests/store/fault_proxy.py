"""An HTTP proxy on 127.0.0.1 between the storage clients and the Cloud Storage emulator that
injects the faults a test plans: a response dropped after the server applied the request, a 503
or a 429 instead of forwarding, a delay before forwarding. All traffic is on the loopback; every
fault is bounded by its rule's count."""

from __future__ import annotations

import collections
import dataclasses
import http.client
import http.server
import re
import threading
import time
import urllib.parse

_NAME = re.compile(r'"name":\s*"([^"]+)"')
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection"}


@dataclasses.dataclass
class Rule:
    """Inject ``fault`` into the requests whose method is ``method`` and whose path and query
    match ``pattern``: the 1st, (1+every)th, ... of them, ``times`` in all.

    ``fault``: ``"drop"`` (forward, then close the connection without answering), ``"503"`` or
    ``"429"`` (answer that, forwarding nothing), ``"delay"`` (wait ``delay_s``, then forward).
    """

    name: str
    method: str
    pattern: str
    fault: str
    times: int
    every: int = 1
    delay_s: float = 0.3
    seen: int = 0
    injected: int = 0

    def fires(self, method: str, path: str) -> bool:
        if method != self.method or not re.search(self.pattern, urllib.parse.unquote(path)):
            return False
        self.seen += 1
        if self.injected >= self.times or (self.seen - 1) % self.every:
            return False
        self.injected += 1
        return True


class FaultProxy:
    """Serves on 127.0.0.1 (``url``), forwarding to ``upstream`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, upstream: str):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.rules: list[Rule] = []
        self.log: list[tuple[str, str, int | str]] = []  # (method, path, status or fault)
        self.sent: list[tuple[str, str, int]] = []  # (method, path, bytes of the answer's body)
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                proxy._handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any  # noqa: N815 - the http.server API

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def injected(self) -> dict[str, int]:
        return {r.name: r.injected for r in self.rules}

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _fault(self, method: str, path: str) -> Rule | None:
        with self._lock:
            return next((r for r in self.rules if r.fires(method, path)), None)

    def _handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        # A multipart upload names its object in the body's metadata part, not in the URL.
        name = _NAME.search(body[:4096].decode("latin-1"))
        target = h.path + (f" name={name.group(1)}" if name else "")
        rule = self._fault(h.command, target)
        if rule is not None and rule.fault in ("503", "429"):
            self.log.append((h.command, target, rule.fault))
            self._answer(h, int(rule.fault), {"Content-Type": "application/json"},
                         b'{"error": {"code": %s, "message": "injected"}}' % rule.fault.encode())
            return
        if rule is not None and rule.fault == "delay":
            time.sleep(rule.delay_s)
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
            conn.request(h.command, h.path, body=body, headers=headers)
            r = conn.getresponse()
            status, out, data = r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()
        if rule is not None and rule.fault == "drop":  # applied upstream; the answer never arrives
            self.log.append((h.command, target, f"drop {status}"))
            h.close_connection = True
            return
        self.log.append((h.command, target, status))
        self.sent.append((h.command, target, len(data)))
        self._answer(h, status, {k: v for k, v in out.items() if k.lower() not in _HOP}, data)

    @staticmethod
    def _answer(h: http.server.BaseHTTPRequestHandler, status: int, headers: dict[str, str], data: bytes) -> None:
        try:
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up on this connection
            h.close_connection = True


def counted(log, *, pattern: str, method: str = "POST") -> collections.Counter:
    """How often each status (or fault) answered the requests matching ``pattern``."""
    return collections.Counter(s for m, p, s in log if m == method and re.search(pattern, urllib.parse.unquote(p)))
