"""A transient error in a lease's job is retried, never the end of a running TPU (review of issues 43/44).

A 503 from the TPU API that outlasts the client's own retries, or a Redis blip, inside the watch or
boot job once ended the lease as a failed job would: FAILED, released, and its queued resource
deleted — a TPU that was running fine. In-process (tests/in_process_bot.py): the real bolt app given
signed requests, the real worker and arq, the real TPU client against the sandbox TPU API answering
503 as Google does.
"""

from __future__ import annotations

import pytest

CHANNEL = "C0BLIP"
ALICE = "UALICE"


@pytest.fixture
def bot(make_bot):
    return make_bot(poll_interval="0.2s")


@pytest.fixture
def slack(bot):
    requests = bot.signed_requests()
    yield requests
    requests.close()


def card_headers(stack) -> list[str]:
    return [block["text"]["text"] for c in stack.slack.calls if c.method in ("chat.postMessage", "chat.update")
            for block in c.body.get("blocks") or [] if block.get("type") == "header"]


def status(slack) -> str:
    return slack.slash("status", user=ALICE, channel=CHANNEL).text


def settled(bot, slack) -> str:
    """The status once the lease is READY or has FAILED (a failure fails the test at once, not at a timeout)."""
    def final() -> str:
        text = status(slack)
        return text if "READY" in text or "FAILED" in text else ""

    return bot.until(final, timeout=90, interval=0.2, what="the lease READY or FAILED")


def deletes(bot) -> list:
    return [r for r in list(bot.tpu_sandbox.requests) if r.method == "DELETE"]


def test_a_503_that_outlasts_the_clients_retries_in_the_watch_job_is_retried_not_torn_down(bot, slack):
    # The watch job reads the node when the QR turns ACTIVE; the client tries 3 times, so 6 answers
    # of 503 fail that read twice over.
    bot.tpu_sandbox.inject_failures(6, http_status=503, path_contains="/nodes/")
    slack.slash("up", user=ALICE, channel=CHANNEL)
    assert "READY" in settled(bot, slack)
    assert not bot.tpu_sandbox._injected, "the 503s were all served"
    assert [qr["state"] for qr in bot.tpu_sandbox.queued_resources()] == ["ACTIVE"]
    assert not deletes(bot)
    assert not [h for h in card_headers(bot) if h.endswith("FAILED")]


def test_a_503_that_outlasts_the_clients_retries_in_the_boot_job_is_retried_not_torn_down(bot, slack):
    slack.slash("up", user=ALICE, channel=CHANNEL)
    bot.until(lambda: "BOOTING MODEL" in status(slack), timeout=60, interval=0.02, what="the model booting")
    bot.tpu_sandbox.inject_failures(6, http_status=503, path_contains="/nodes/")
    assert "READY" in settled(bot, slack)
    assert [qr["state"] for qr in bot.tpu_sandbox.queued_resources()] == ["ACTIVE"]
    assert not deletes(bot)
    assert not [h for h in card_headers(bot) if h.endswith("FAILED")]
