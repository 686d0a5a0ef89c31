"""READY means correct (issue 28): a model that answers fast but wrong is DEGRADED, not READY.

Before READY the boot asks the node's vLLM one question with a known answer and makes one
request that must come back as a parsed tool call. The sandbox node models two faults a real
deployment has had (infra/sandbox/vllm/server.py MODEL_FAULTS): garbage text, and tool calls
left as text by a server whose tool parser did not run.
"""

from __future__ import annotations

import asyncio

import pytest
import redis as redis_sync

from infra.model_correctness import check_known_answer
from infra.sandbox.vllm import LatencyModel, VllmEmulator
from infra.state import keys

CHANNEL = "C0DEGRADED"
TEAM = "T0SANDBOX"  # the signed requests' team


def card_bodies(stack) -> list[dict]:
    return [c.body for c in stack.slack.calls if c.method in ("chat.postMessage", "chat.update")]


def lease_hash(stack, channel: str) -> dict[str, str]:
    client = redis_sync.Redis.from_url(stack.redis.url, decode_responses=True)
    try:
        return client.hgetall(keys.lease(TEAM, channel))
    finally:
        client.close()


def degraded_card(bot) -> dict:
    settled = ("DEGRADED", "READY", "FAILED")
    card = bot.until(lambda: next((b for b in reversed(card_bodies(bot))
                                   if any(f"· {s}" in b["blocks"][0]["text"]["text"] for s in settled)), None),
                     what="the model's boot settled")
    assert "DEGRADED" in card["text"], card["text"]
    return card


def up_with_fault(make_bot, fault: str, **settings):
    bot = make_bot(poll_interval="0.2s", **settings)
    bot.node_models.model_fault = fault
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    return bot, slack


def test_garbage_answers_give_degraded_with_the_reason_and_the_clocks_of_ready(make_bot):
    bot, slack = up_with_fault(make_bot, "garbage_text", idle_teardown_minutes="0.25",
                               idle_check_interval="0.5s")
    card = degraded_card(bot)
    blocks = str(card["blocks"])
    assert "the answer to a known question was wrong" in card["text"].lower()
    assert "expected 42" in blocks and "leave MODEL_IMPL_TYPE unset" in blocks
    assert "*Fix:*" in blocks and "TTFT / TPOT" in blocks  # the figures were measured as for READY
    lease = lease_hash(bot, CHANNEL)
    assert lease["state"] == "DEGRADED" and float(lease["deadline"]) > 0
    # The clocks run as for READY: the card shows the deadline and the idle clock, and an unused
    # DEGRADED TPU is torn down when idle, exactly as a READY one is.
    assert "Cloud deadline" in blocks and "*Idle*" in blocks
    status = slack.slash("status", user="UALICE", channel=CHANNEL).json()
    assert "DEGRADED" in str(status) and "known question" in str(status)
    bot.until(lambda: bot.tpu_sandbox.queued_resources() == [], what="the idle DEGRADED TPU torn down")
    assert any("Idle TPU" in b["text"] for b in card_bodies(bot))
    slack.close()


def test_tool_calls_returned_as_text_give_degraded_with_the_parser_fix(make_bot):
    bot, slack = up_with_fault(make_bot, "tool_calls_as_text")
    card = degraded_card(bot)
    blocks = str(card["blocks"])
    assert "tool calls come back as text" in card["text"].lower()
    assert "--enable-auto-tool-choice --tool-call-parser gemma4" in blocks
    assert "known question" not in blocks  # the plain answer was right: only the failed check is named
    slack.close()


def test_a_mention_in_a_degraded_channel_is_not_sent_to_its_model(make_bot):
    bot, slack = up_with_fault(make_bot, "tool_calls_as_text")
    degraded_card(bot)
    (zone, node_id), _ = next(iter(bot.node_models.running().items()))
    emulator = bot.node_models.emulator_for(zone, node_id)
    before = len(emulator.requests)
    slack.mention("<@UTPUBOT> status?", user="UALICE", channel=CHANNEL)
    answer = bot.until(lambda: next((m for m in bot.slack.channel_messages(CHANNEL)
                                     if not m.streaming and "_Made without the model" in m.text), None),
                       what="the model-less answer")
    assert "DEGRADED" in answer.text and "tool calls come back as text" in answer.text.lower()
    assert len(emulator.requests) == before  # not one request reached the DEGRADED model
    assert not any("_Answered by" in m.text for m in bot.slack.channel_messages(CHANNEL))
    slack.close()


@pytest.mark.parametrize("reply, right", [("The answer is 42.", True), ("42", True), ("**42**", True),
                                          ("142", False), ("0.42", False), ("42.5", False), ("4 2", False)])
def test_the_known_answer_counts_only_as_the_whole_number(reply, right):
    with VllmEmulator(latency=LatencyModel.instant(), script=[reply]) as emulator:
        failure = asyncio.run(check_known_answer(emulator.base_url, emulator.model))
        assert emulator.requests[0]["temperature"] == 0 and not emulator.requests[0]["stream"]
    assert (failure is None) is right, failure
    if failure is not None:
        assert "expected 42" in failure.what and repr(reply) in failure.what
