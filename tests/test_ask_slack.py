"""`/tpu ask …` in Slack: acknowledged at once, answered by the worker through the command's
response_url with the model's text and its timings; without a READY model it says so."""

from __future__ import annotations

import functools

import waiting

CHANNEL = "C0ASK"

wait_until = functools.partial(waiting.wait_until, timeout=90.0)


def ready(stack) -> bool:
    return any(call.body.get("channel") == CHANNEL and "READY" in call.body.get("text", "")
               for call in stack.slack.calls_to("chat.update"))


def answer_to(stack, needle: str) -> dict | None:
    return next((r for r in stack.slack.responses if needle in r.get("text", "")), None)


def test_ask_answers_through_the_response_url_with_timings(stack):
    slack = stack.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    wait_until(lambda: ready(stack))

    ack = slack.slash("ask what is a TPU?", user="UALICE", channel=CHANNEL).json()
    assert ack["response_type"] == "ephemeral" and "Asking this channel's model" in ack["text"], ack

    answer = wait_until(lambda: answer_to(stack, 'I received: "what is a TPU?"'))
    assert answer["response_type"] == "ephemeral"
    for figure in ("TTFT", "TPOT", "tok/s", "prompt +", "output tokens", "this channel's TPU"):
        assert figure in answer["text"], answer["text"]


def test_ask_without_a_ready_model_says_so(stack):
    slack = stack.signed_requests()
    ack = slack.slash("ask anyone there?", user="UALICE", channel=CHANNEL).json()
    assert "Asking" in ack["text"]
    answer = wait_until(lambda: answer_to(stack, "No model to ask"))
    assert "/tpu up" in answer["text"]


def test_ask_without_a_question_is_a_usage_error(stack):
    ack = stack.signed_requests().slash("ask", user="UALICE", channel=CHANNEL).json()
    assert "needs a question" in ack["text"] and "/tpu ask <question>" in ack["text"]
    assert not stack.slack.responses


def test_ask_names_the_sandbox_model_not_a_setting_nobody_set(make_stack):
    """Issue 29 item 9: the shell's own sandbox model was credited to "GEMMA_BASE_URL"."""
    from infra.sandbox.vllm import LatencyModel, VllmEmulator

    with VllmEmulator(latency=LatencyModel.instant()) as emulator:
        stack = make_stack(poll_interval="0.2s", gemma_base_url=emulator.base_url)
        slack = stack.signed_requests()
        slack.slash("ask are you there?", user="UALICE", channel=CHANNEL)
        answer = wait_until(lambda: answer_to(stack, "TTFT"))
        slack.close()
    assert "via the sandbox model (a heuristic stand-in, not Gemma)" in answer["text"], answer["text"]
    assert "GEMMA_BASE_URL" not in answer["text"]
