"""A local stand-in for Slack's Socket Mode endpoint, the WebSocket `apps.connections.open` hands out.

Slack's side of the protocol (docs.slack.dev/apis/events-api/using-socket-mode): on each connection
a `hello` (`num_connections`, `debug_info`, `connection_info.app_id`); then envelopes, each
`{"envelope_id", "type": events_api | slash_commands | interactive, "payload",
"accepts_response_payload"}` (`retry_attempt` and `retry_reason` on events_api), the payload being
what the HTTP request's body would carry; the app acknowledges one with `{"envelope_id", "payload"?}`.
slack_sdk reads envelopes by those keys (slack_sdk/socket_mode/request.py, `SocketModeRequest.from_dict`)
and answers Slack's and its own pings (`sdk-ping-pong:…`), which the server here answers with pongs.
It sends what a test gives it: no retry of an envelope left unacknowledged, no `disconnect` message.
"""

from __future__ import annotations

import json
import secrets
import threading
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

APP_ID = "A0TPUBOT"
ENVELOPE_TYPES = frozenset({"events_api", "slash_commands", "interactive"})


class SocketModeSandbox:
    def __init__(self, host: str = "127.0.0.1", app_id: str = APP_ID) -> None:
        self.app_id = app_id
        self.acks: dict[str, dict] = {}  # envelope id → the app's acknowledgement
        self.closed = 0  # connections the app closed or lost
        self._open: list[ServerConnection] = []
        self._changed = threading.Condition()
        self._server: Server = serve(self._connection, host, 0)
        self._thread = threading.Thread(target=self._server.serve_forever, name="socket-mode-sandbox", daemon=True)

    def start(self) -> SocketModeSandbox:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        with self._changed:
            still_open = list(self._open)
        for connection in still_open:  # as Slack does when it ends a session: the app reconnects
            connection.close()
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"ws://{host}:{port}/link/?ticket={secrets.token_hex(8)}&app_id={self.app_id}"

    @property
    def connections(self) -> int:
        with self._changed:
            return len(self._open)

    def wait(self, predicate, timeout: float) -> bool:
        """Wait until `predicate()` (read under the lock) holds; False at `timeout`."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def send(self, kind: str, payload: dict[str, Any], *, accepts_response_payload: bool = False) -> str:
        """Send an envelope on the newest connection; its id, which the app's ack carries."""
        if kind not in ENVELOPE_TYPES:
            raise ValueError(f"Socket Mode sends {sorted(ENVELOPE_TYPES)}, not {kind!r}")
        envelope_id = secrets.token_hex(16)
        envelope: dict[str, Any] = {"envelope_id": envelope_id, "type": kind, "payload": payload,
                                    "accepts_response_payload": accepts_response_payload}
        if kind == "events_api":
            envelope.update(retry_attempt=0, retry_reason="")
        with self._changed:
            if not self._open:
                raise RuntimeError("no Socket Mode connection is open")
            connection = self._open[-1]
        connection.send(json.dumps(envelope))
        return envelope_id

    def _connection(self, connection: ServerConnection) -> None:
        with self._changed:
            self._open.append(connection)
            count = len(self._open)
            self._changed.notify_all()
        try:
            connection.send(json.dumps({
                "type": "hello", "num_connections": count,
                "debug_info": {"host": "applink-sandbox", "build_number": 1, "approximate_connection_time": 18060},
                "connection_info": {"app_id": self.app_id},
            }))
            for raw in connection:
                message = json.loads(raw)
                if isinstance(message, dict) and "envelope_id" in message:
                    with self._changed:
                        self.acks[message["envelope_id"]] = message
                        self._changed.notify_all()
        except ConnectionClosed:
            pass
        finally:
            with self._changed:
                self._open.remove(connection)
                self.closed += 1
                self._changed.notify_all()
