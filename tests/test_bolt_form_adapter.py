"""bot/bolt_form_adapter.py and the slack_bolt behaviour it was written against (1.30.0).

The first two tests pin what bolt does, not what we do: when one fails, bolt changed under the
adapter — if it now parses a form that says "payload" right, delete the adapter; if it stopped
taking parsed bodies, or checks signatures on them, the adapter must change before it is used.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlencode

import pytest
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.error import BoltError
from slack_sdk.signature import SignatureVerifier

from bot.bolt_form_adapter import ParsedFormDispatch, form_bolt_misreads

SECRET = "adapter-test-signing-secret"
FORM = {"command": "/tpu", "text": "up payload", "user_id": "U0ALICE", "channel_id": "C0CHANNEL",
        "team_id": "T0TEAM", "trigger_id": "1.2.3", "response_url": "https://hooks.slack.com/commands/T0TEAM/1/x"}
RAW = urlencode(FORM).encode()


def command_app(seen: list[str]) -> AsyncApp:
    """A real bolt app with one /tpu listener that records the text it was given."""

    async def authorize() -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=None, team_id="T0TEAM", bot_user_id="U0BOT", bot_id="B0BOT",
                               bot_token="xoxb-adapter-test")

    app = AsyncApp(signing_secret=SECRET, authorize=authorize, process_before_response=True)

    @app.command("/tpu")
    async def tpu(ack, command) -> None:
        seen.append(command["text"])
        await ack("ok")

    return app


def signed_headers(raw: bytes, secret: str = SECRET) -> dict[str, str]:
    timestamp = str(int(time.time()))
    return {"content-type": "application/x-www-form-urlencoded", "x-slack-request-timestamp": timestamp,
            "x-slack-signature": SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=raw)}


def test_bolt_still_reads_a_form_that_says_payload_as_an_empty_body():
    request = AsyncBoltRequest(body=RAW.decode(), headers={"content-type": "application/x-www-form-urlencoded"})
    assert request.body == {}, "bolt now parses this form right: delete bot/bolt_form_adapter.py"
    assert form_bolt_misreads(RAW) == FORM
    assert form_bolt_misreads(urlencode({**FORM, "text": "up"}).encode()) is None  # bolt reads it right
    assert form_bolt_misreads(b"payload=" + urlencode({"x": "{}"}).encode()) is None  # an interaction


async def test_bolt_takes_a_parsed_body_only_in_socket_mode_and_checks_no_signature_on_it():
    with pytest.raises(BoltError):
        AsyncBoltRequest(body=FORM, headers={})  # the HTTP path takes raw bodies only
    seen: list[str] = []
    response = await command_app(seen).async_dispatch(AsyncBoltRequest(body=FORM, headers={}, mode="socket_mode"))
    # Unsigned and dispatched: why the adapter checks the signature before it hands bolt a body.
    assert (response.status, seen) == (200, ["up payload"])


async def test_the_adapter_dispatches_a_signed_form_and_refuses_a_badly_signed_one(caplog):
    seen: list[str] = []
    adapter = ParsedFormDispatch(command_app(seen), SECRET)
    signed = await adapter.dispatch(RAW, signed_headers(RAW))
    assert (signed.status_code, seen) == (200, ["up payload"])
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    forged = await adapter.dispatch(RAW, signed_headers(RAW, secret="not-the-secret"))
    assert (forged.status_code, seen) == (401, ["up payload"])
    assert "payload" not in caplog.text  # refused before bolt, which would log the body
