"""`/tpu ask …` in Slack: acknowledged at once, answered by the worker through the command's
response_url with the model's text and its timings; without a READY model it says so.

Driven in-process (tests/in_process_bot.py): signed slash commands into the bolt app, the worker
run until the answer reaches the Slack stand-in's response_url."""

from __future__ import annotations

import pytest

CHANNEL = "C0ASK"


@pytest.fixture
def bot(make_bot):
    return make_bot(poll_interval="0.2s")


def ready(stack) -> bool:
    return any(call.body.get("channel") == CHANNEL and "READY" in call.body.get("text", "")
               for call in stack.slack.calls_to("chat.update"))


def answer_to(stack, needle: str) -> dict | None:
    return next((r for r in stack.slack.responses if needle in r.get("text", "")), None)


def test_ask_answers_through_the_response_url_with_timings(bot):
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    bot.until(lambda: ready(bot), timeout=90.0)

    ack = slack.slash("ask what is a TPU?", user="UALICE", channel=CHANNEL).json()
    assert ack["response_type"] == "ephemeral" and "Asking this channel's model" in ack["text"], ack

    answer = bot.until(lambda: answer_to(bot, 'I received: "what is a TPU?"'), timeout=90.0)
    assert answer["response_type"] == "ephemeral"
    for figure in ("TTFT", "TPOT", "tok/s", "prompt +", "output tokens", "this channel's TPU"):
        assert figure in answer["text"], answer["text"]


def test_ask_without_a_ready_model_says_so(bot):
    slack = bot.signed_requests()
    ack = slack.slash("ask anyone there?", user="UALICE", channel=CHANNEL).json()
    assert "Asking" in ack["text"]
    answer = bot.until(lambda: answer_to(bot, "No model to ask"), timeout=90.0)
    assert "/tpu up" in answer["text"]


def test_ask_without_a_question_is_a_usage_error(bot):
    ack = bot.signed_requests().slash("ask", user="UALICE", channel=CHANNEL).json()
    assert "needs a question" in ack["text"] and "/tpu ask <question>" in ack["text"]
    assert not bot.slack.responses


def test_ask_names_the_sandbox_model_not_a_setting_nobody_set(make_bot):
    """Issue 29 item 9: the shell's own sandbox model was credited to "GEMMA_BASE_URL"."""
    from infra.sandbox.vllm import LatencyModel, VllmEmulator

    with VllmEmulator(latency=LatencyModel.instant()) as emulator:
        bot = make_bot(poll_interval="0.2s", gemma_base_url=emulator.base_url)
        slack = bot.signed_requests()
        slack.slash("ask are you there?", user="UALICE", channel=CHANNEL)
        answer = bot.until(lambda: answer_to(bot, "TTFT"), timeout=90.0)
        slack.close()
    assert "via the sandbox model (a heuristic stand-in, not Gemma)" in answer["text"], answer["text"]
    assert "GEMMA_BASE_URL" not in answer["text"]
