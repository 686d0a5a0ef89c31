"""After ACTIVE: BOOTING MODEL → READY with the endpoint and TTFT/TPOT, measured on the node's own endpoint.

The sandbox gives every ACTIVE node an emulated vLLM (labelled as the sandbox model) on its own
loopback address at the model port, so the endpoint is derived exactly as for a real VM.
"""

from __future__ import annotations

import functools
import logging
import re

import pytest
import waiting

from bot.wiring import startup_script_from

CHANNEL = "C0MODEL"


wait_until = functools.partial(waiting.wait_until, timeout=60.0)


def card_bodies(stack) -> list[dict]:
    return [c.body for c in stack.slack.calls if c.method in ("chat.postMessage", "chat.update")]


@pytest.fixture
def stack(make_stack):
    return make_stack(poll_interval="0.2s")


def test_up_ends_ready_with_endpoint_ttft_and_tpot_and_no_secret_anywhere(stack, caplog):
    caplog.set_level(logging.DEBUG)
    slack = stack.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    ready = wait_until(lambda: next((b for b in card_bodies(stack) if "READY" in b["text"]), None))
    texts = [b["text"] for b in card_bodies(stack)]
    booting = next(i for i, t in enumerate(texts) if "BOOTING MODEL" in t)
    assert booting < texts.index(ready["text"])

    # The endpoint is the node's external IP at the model port, and that is where the model answered.
    qr = stack.tpu_sandbox.queued_resources()[0]
    (zone, node_id), base_url = next(iter(stack.node_models.running().items()))
    assert (zone, node_id) == (qr["zone"], qr["node_id"])
    blocks = str(ready["blocks"])
    endpoint = re.search(r"`(http://[0-9.]+:\d+/v1)`", blocks).group(1)
    assert endpoint == base_url and endpoint.endswith(f":{stack.settings.model_port}/v1")

    # One real streamed chat completion was measured; never the raw completions route.
    emulator = stack.node_models.emulator_for(zone, node_id)
    assert len(emulator.requests) == 1
    probe = emulator.requests[0]
    assert probe["stream"] is True and probe["stream_options"] == {"include_usage": True}
    assert probe["messages"][0]["role"] == "user"
    ttft, tpot = (float(x) for x in re.search(r"TTFT / TPOT\*\\n([0-9.]+) ms / ([0-9.]+) ms", blocks).groups())
    assert ttft > 0 and 1.0 < tpot < 200.0
    assert "tokens/s" in blocks and "sandbox" in blocks  # the sandbox model says what it is

    status = slack.slash("status", user="UALICE", channel=CHANNEL).json()
    assert "TTFT" in status["text"] and endpoint in str(status["blocks"])

    # What was sent as startup-script is exactly what `tpubot render-startup-script` prints.
    sent = qr["request"]["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"]
    assert sent == startup_script_from(stack.settings)(None)

    # The HF token is in Secret Manager only: not in metadata, not in Slack, not in any log line.
    token = stack.cloud.world.secrets["hf-token"]
    assert token not in str(qr["request"])
    assert all(token not in str(call.body) for call in stack.slack.calls)
    assert token not in caplog.text
    slack.close()
