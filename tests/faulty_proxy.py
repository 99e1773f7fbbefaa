"""A fault-injecting TCP proxy for the integration tests' object store (no package on the registries
does this for a plain TCP endpoint in-process, so it is written here).

:class:`FaultyProxy` listens on 127.0.0.1 and forwards every connection to a target port (moto's S3
server), in threads of the test process. :meth:`FaultyProxy.fail` makes it fail for a while:

* ``reset``: every chunk a client sends meanwhile gets its connection reset (TCP RST), the
  request unanswered (and an upload already under way cut short: the server sees a truncated
  body);
* ``error``: every chunk a client sends meanwhile is answered ``503 Service Unavailable`` with
  S3's ``ServiceUnavailable`` error document, then the connection is closed.

Faults are checked per chunk, not per connection, so requests on kept-alive connections fail too.
:attr:`FaultyProxy.injected` counts the faults injected, per mode.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import Counter
from contextlib import suppress

HOST = "127.0.0.1"
_CHUNK = 1 << 16
_S3_UNAVAILABLE = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ServiceUnavailable</Code>"
                   b"<Message>injected by the test proxy</Message></Error>")
MODES = ("reset", "error")


class FaultyProxy:
    """A TCP proxy from a free port on 127.0.0.1 to ``target_port``, failing on demand."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server((HOST, 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._fault: tuple[str, float] | None = None
        self._faults_left: int | None = None
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self.injected: Counter[str] = Counter()
        self._acceptor = threading.Thread(target=self._accept, name="faulty-proxy", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def fail(self, mode: str, seconds: float, times: int | None = None) -> None:
        """Fail every request in ``mode`` (:data:`MODES`) for the next ``seconds``.

        With ``times``, the fault also ends after that many injected faults: a blip that does not
        race the client's (jittered) retry delays against the clock.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        with self._lock:
            self._fault = (mode, time.monotonic() + seconds)
            self._faults_left = times

    def heal(self) -> None:
        """Forward everything again."""
        with self._lock:
            self._fault = None

    def _current_fault(self) -> str | None:
        with self._lock:
            if self._fault is None or time.monotonic() >= self._fault[1]:
                self._fault = None
                return None
            mode = self._fault[0]
            self.injected[mode] += 1
            if self._faults_left is not None:
                self._faults_left -= 1
                if self._faults_left <= 0:
                    self._fault = None
            return mode

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closed = True
        with suppress(OSError):
            self._listener.close()
        with self._lock:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            with suppress(OSError):
                sock.close()
        self._acceptor.join(timeout=5)

    # ---------------------------------------------------------------- forwarding
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._sockets.update(socks)

    def _serve(self, client: socket.socket) -> None:
        self._track(client)
        try:
            upstream = socket.create_connection((HOST, self.target_port), timeout=10)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        self._track(upstream)
        back = threading.Thread(target=self._pump_back, args=(upstream, client), daemon=True)
        back.start()
        try:
            while True:
                data = client.recv(_CHUNK)
                if not data:
                    break
                fault = self._current_fault()
                if fault == "reset":
                    _reset(client)
                    break
                if fault == "error":
                    _answer_unavailable(client)
                    break
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _reset(upstream)
            with suppress(OSError):
                client.close()
            back.join(timeout=5)
            with self._lock:
                self._sockets.difference_update((client, upstream))

    @staticmethod
    def _pump_back(upstream: socket.socket, client: socket.socket) -> None:
        try:
            while data := upstream.recv(_CHUNK):
                client.sendall(data)
        except OSError:
            pass
        with suppress(OSError):
            client.shutdown(socket.SHUT_WR)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST (linger 0) rather than a FIN."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with suppress(OSError):
        sock.close()


def _answer_unavailable(client: socket.socket) -> None:
    """Answer S3's 503 ``ServiceUnavailable`` (which botocore retries) and close."""
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(_S3_UNAVAILABLE)}\r\nConnection: close\r\n\r\n").encode()
    with suppress(OSError):
        client.sendall(head + _S3_UNAVAILABLE)
    with suppress(OSError):
        client.close()
