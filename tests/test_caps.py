"""Oversized input is capped with a message that says so."""

from __future__ import annotations

import functools

import pytest
import waiting


CHANNEL = "C0CAPS"


wait_until = functools.partial(waiting.wait_until, timeout=60.0)


@pytest.fixture
def bot(make_bot):
    return make_bot(agent_use_model=False)


def thread_texts(stack) -> str:
    return "\n".join(m.text for m in stack.slack.messages if m.thread_ts)


def test_oversized_paste_is_read_up_to_the_cap_and_the_reply_says_so(bot):
    paste = "\n".join(f"2026-11-29T10:00:{i % 60:02d}Z ERROR worker-{i % 7} disk full on /dev/sda{i % 3}"
                      for i in range(1200))
    assert len(paste) > 45_000
    bot.mention(f"<@UTPUBOT> summarize these logs\n{paste}", user="UALICE", channel=CHANNEL)
    text = wait_until(lambda: "more than the 40,000 I read" in thread_texts(bot) and thread_texts(bot))
    assert f"Your message is {len('<@UTPUBOT> summarize these logs') + 1 + len(paste):,} characters" in text
    assert "disk full" in text


def long_paste_with_one_error(lines: int = 2000, error_at: int = 1235) -> str:
    """Issue 29 item 4: a paste past Slack's 40,000 characters whose only ERROR is far down."""
    rows = [f"2026-11-29T10:{i // 60 % 60:02d}:{i % 60:02d}Z INFO request {i} served in {i % 90} ms by web-{i % 4}"
            for i in range(1, lines + 1)]
    rows[error_at - 1] = "2026-11-29T10:20:35Z ERROR database connection refused: too many clients"
    return "\n".join(rows)


def answer_of(stack) -> str:
    return next((m.text for m in stack.slack.messages if m.thread_ts and "Log summary" in m.text
                 or m.thread_ts and "heuristic stand-in" in m.text), "")


@pytest.mark.parametrize("with_model", [False, True], ids=["no-model", "sandbox-model"])
def test_a_long_paste_is_never_a_clean_bill_of_health(make_bot, with_model):
    from infra.sandbox.vllm import LatencyModel, VllmEmulator

    paste = long_paste_with_one_error()
    assert len(paste) > 40_000 and paste.index("ERROR") > 40_000
    with VllmEmulator(latency=LatencyModel.instant()) as emulator:
        settings = {"gemma_base_url": emulator.base_url} if with_model else {"agent_use_model": False}
        bot = make_bot(**settings)
        bot.mention(f"<@UTPUBOT> any errors in these logs?\n{paste}", user="UALICE", channel=CHANNEL)
        text = wait_until(lambda: answer_of(bot))
    # The answer opens with how much was read, and never calls the unread part clean.
    first = text.splitlines()[0]
    assert first.startswith(":warning: Your message is") and "nothing after line" in first, text
    assert "of 2,001 lines" in first
    assert "no errors in those" in text or "no warnings or errors in those lines" in text, text
    assert "L1235" not in text


def test_oversized_file_is_refused_with_the_limit(bot):
    from handlers.mention_job import MAX_FILE_BYTES

    info = bot.slack.add_file("F0BIG", "huge.log", b"x")
    info["size"] = MAX_FILE_BYTES + 1  # files.info reports the real size before any download
    bot.mention("<@UTPUBOT> what happened?", user="UALICE", channel=CHANNEL, files=[info])
    text = wait_until(lambda: "Could not read huge.log" in thread_texts(bot) and thread_texts(bot))
    assert f"the limit is {MAX_FILE_BYTES:,}" in text
