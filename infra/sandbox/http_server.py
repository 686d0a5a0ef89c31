"""The stdlib HTTP server the sandbox emulators (Slack, TPU, Logging, project APIs) serve on,
its life on a background thread (`ServerThread`), the same for each of them, and the handler
each answers with (`handler_class`: one method of the emulator, `_serve_http`, for every request).

Two settings differ from `ThreadingHTTPServer`'s defaults, both for a busy machine running many
stacks: a listen backlog of 128 instead of 5 (a burst of the bot's calls — the TPU emulator
speaks HTTP/1.0, one connection per call — would otherwise see dropped SYNs, retried by the
kernel only after 1 s and 3 s), and a 0.05 s shutdown poll instead of 0.5 s, so that stopping
a stack does not wait half a second per emulator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

SHUTDOWN_POLL_SECONDS = 0.05


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request's body, by its Content-Length."""
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def reply(handler: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str,
          headers: dict[str, str] | None = None) -> None:
    """One whole answer: status, content type, any extra headers, the length, the body."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def handler_class(serve: Callable[[BaseHTTPRequestHandler], None],
                  methods: Iterable[str] = ("GET", "POST", "PUT", "DELETE", "PATCH"), *,
                  timeout: float | None = 30, protocol: str = "HTTP/1.1") -> type[BaseHTTPRequestHandler]:
    """A handler that answers `methods` with `serve(handler)` (any other gets the stdlib's 501) and logs
    nothing: the emulators record their requests; stderr noise helps nobody. HTTP/1.1 keeps connections
    alive (the google clients reuse them); `timeout` frees an idle one's thread after that long."""
    def answer(self: BaseHTTPRequestHandler) -> None:
        serve(self)

    def log_message(self: BaseHTTPRequestHandler, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    return type("Handler", (BaseHTTPRequestHandler,), {"protocol_version": protocol, "timeout": timeout,
                                                      "log_message": log_message,
                                                      **{f"do_{method}": answer for method in methods}})


class SandboxHTTPServer(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that hung up before its answer (a process the sandbox killed, a timed-out probe) is
        not the emulator's error: no traceback on stderr for it. Anything else is printed as before."""
        import sys

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class ServerThread:
    """One emulator's server: bound at construction (its address is known from then on), served
    on a background thread by `start`, closed by `stop`; both may be called again to no effect."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], name: str) -> None:
        self.server = SandboxHTTPServer(address, handler)
        self.name = name
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def root(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"  # an AF_INET address: its host is a str

    def start(self) -> ServerThread:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self.server.serve_forever, name=self.name, daemon=True,
                                            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS})
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:  # shutdown() waits for serve_forever(), so only once it ran
            self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


class LazyServed:
    """`start`, `stop` and `with` for an emulator bound only when started (and bound afresh when started
    again after a stop); the class says what it serves with (`_handler`) and what it is called."""

    _http: ServerThread | None
    _address: tuple[str, int]
    _what: str  # "TPU sandbox": its thread's name, and what an error says is not running

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def start(self) -> str:
        """Start serving on a background thread; returns the base URL (`http://127.0.0.1:PORT`)."""
        if self._http is None:
            name = self._what.replace(" ", "-").lower()
            self._http = ServerThread(self._address, self._handler(), name).start()
        return self.base_url

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()
            self._http = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._http is None:
            raise RuntimeError(f"the {self._what} is not running; call start() first")
        return self._http.root
