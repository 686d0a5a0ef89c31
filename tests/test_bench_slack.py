"""`/tpu bench`: a READY channel's endpoint is swept by the worker, the PNG chart is uploaded
(files_upload_v2) into the status card's thread, and `/tpu cost` then shows $/M tokens.

Driven in-process (tests/in_process_bot.py): signed slash commands into the bolt app, the worker
run until the card, the upload and the table reach the Slack stand-in."""

from __future__ import annotations

import pytest
import redis

CHANNEL = "C0BENCH"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def bot(make_bot):
    return make_bot(poll_interval="0.2s")


def card_ts(stack) -> str | None:
    for call in stack.slack.calls_to("chat.update"):
        if call.body.get("channel") == CHANNEL and "READY" in call.body.get("text", ""):
            return call.body["ts"]
    return None


def test_bench_uploads_the_chart_to_the_card_thread_and_feeds_cost(bot):
    slack = bot.signed_requests()
    before = slack.slash("cost", user="UALICE", channel=CHANNEL).json()["text"]
    assert "per million output tokens" not in before

    slack.slash("up", user="UALICE", channel=CHANNEL)
    thread = bot.until(lambda: card_ts(bot), timeout=90.0)

    ack = slack.slash("bench", user="UALICE", channel=CHANNEL).json()
    assert ack["response_type"] == "ephemeral" and "Benchmarking" in ack["text"], ack

    done = bot.until(lambda: next((c for c in bot.slack.calls_to("files.completeUploadExternal")
                                   if c.body.get("thread_ts") == thread), None), timeout=90.0)
    assert done.body["channel_id"] == CHANNEL
    uploads = [u for u in bot.slack.uploads.values() if u["shared"] and u["shared"]["thread_ts"] == thread]
    assert len(uploads) == 1 and uploads[0]["filename"].endswith(".png")
    assert uploads[0]["data"].startswith(PNG_MAGIC) and len(uploads[0]["data"]) == uploads[0]["length"]

    table = bot.until(lambda: next((m for m in bot.slack.channel_messages(CHANNEL)
                                    if m.thread_ts == thread and "Benchmark" in m.text), None), timeout=90.0)
    for context in ("128", "1024"):
        assert context in table.text
    assert "out tok/s" in table.text and "/tpu cost" in table.text

    after = slack.slash("cost", user="UALICE", channel=CHANNEL).json()["text"]
    assert "per million output tokens* at concurrency 1" in after
    assert "per million output tokens* at the best measured batch" in after

    # Same lease, second click: the deterministic job id queues nothing new, and says so.
    again = slack.slash("bench", user="UALICE", channel=CHANNEL).json()["text"]
    assert "already running or ran" in again
    bot.settle()  # a second job, had one been queued, would have run and uploaded by now
    assert len(bot.slack.calls_to("files.completeUploadExternal")) == 1
    slack.close()


def test_bench_without_a_ready_model_says_so_and_queues_nothing(bot):
    slack = bot.signed_requests()
    answer = slack.slash("bench", user="UALICE", channel=CHANNEL).json()
    assert answer["response_type"] == "ephemeral"
    assert "No READY model in this channel" in answer["text"] and "/tpu up" in answer["text"]
    state = redis.Redis.from_url(bot.settings.redis_url)
    try:
        assert not state.keys("arq:*bench:*")  # no bench job, queued or finished
    finally:
        state.close()
    assert not bot.slack.calls_to("files.getUploadURLExternal")
    slack.close()


def test_bench_takes_no_arguments(bot):
    slack = bot.signed_requests()
    answer = slack.slash("bench fast", user="UALICE", channel=CHANNEL).json()
    assert "`/tpu bench` takes no arguments" in answer["text"]
    slack.close()
