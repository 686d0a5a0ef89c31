"""The sandbox's Socket Mode endpoint against slack_sdk, which reads what Slack sends: the hello,
envelopes that SocketModeRequest.from_dict takes, acknowledgements recorded by envelope id."""

from __future__ import annotations

import json

import pytest
from slack_sdk.socket_mode.request import SocketModeRequest
from websockets.sync.client import connect

from infra.sandbox.socket_mode import SocketModeSandbox


@pytest.fixture
def socket_mode():
    sandbox = SocketModeSandbox().start()
    yield sandbox
    sandbox.stop()


def test_a_connection_gets_a_hello_then_envelopes_slack_sdk_reads_and_its_acks_are_recorded(socket_mode):
    with connect(socket_mode.url) as app:
        hello = json.loads(app.recv(timeout=10))
        assert hello["type"] == "hello" and hello["num_connections"] == 1
        assert hello["connection_info"] == {"app_id": "A0TPUBOT"} and "host" in hello["debug_info"]
        for kind in ("events_api", "slash_commands", "interactive"):
            envelope_id = socket_mode.send(kind, {"type": kind}, accepts_response_payload=kind != "events_api")
            request = SocketModeRequest.from_dict(json.loads(app.recv(timeout=10)))
            assert request is not None and request.type == kind and request.envelope_id == envelope_id
            assert request.payload == {"type": kind} and request.accepts_response_payload == (kind != "events_api")
            if kind == "events_api":
                assert request.retry_attempt == 0 and request.retry_reason == ""
            app.send(json.dumps({"envelope_id": envelope_id, "payload": {"text": "ok"}}))
            assert socket_mode.wait(lambda envelope_id=envelope_id: envelope_id in socket_mode.acks, 10)
            assert socket_mode.acks[envelope_id]["payload"] == {"text": "ok"}
    assert socket_mode.wait(lambda: socket_mode.connections == 0 and socket_mode.closed == 1, 10)


def test_only_slacks_envelope_types_are_sent_and_only_on_an_open_connection(socket_mode):
    with pytest.raises(ValueError, match="slash_commands"):
        socket_mode.send("block_actions", {})
    with pytest.raises(RuntimeError, match="no Socket Mode connection"):
        socket_mode.send("events_api", {})
