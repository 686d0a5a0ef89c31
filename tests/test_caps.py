"""Oversized input is capped with a message that says so."""

from __future__ import annotations

import functools

import pytest
import waiting


CHANNEL = "C0CAPS"


wait_until = functools.partial(waiting.wait_until, timeout=60.0)


@pytest.fixture
def stack(make_stack):
    return make_stack(agent_use_model=False)


def thread_texts(stack) -> str:
    return "\n".join(m.text for m in stack.slack.messages if m.thread_ts)


def test_oversized_paste_is_read_up_to_the_cap_and_the_reply_says_so(stack):
    slack = stack.signed_requests()
    paste = "\n".join(f"2026-11-29T10:00:{i % 60:02d}Z ERROR worker-{i % 7} disk full on /dev/sda{i % 3}"
                      for i in range(1200))
    assert len(paste) > 45_000
    slack.mention(f"<@UTPUBOT> summarize these logs\n{paste}", user="UALICE", channel=CHANNEL)
    text = wait_until(lambda: "I read the first 40,000" in thread_texts(stack) and thread_texts(stack))
    assert f"Your message is {len('<@UTPUBOT> summarize these logs') + 1 + len(paste):,} characters" in text
    assert "disk full" in text
    slack.close()


def test_oversized_file_is_refused_with_the_limit(stack):
    from handlers.mention_job import MAX_FILE_BYTES

    info = stack.slack.add_file("F0BIG", "huge.log", b"x")
    info["size"] = MAX_FILE_BYTES + 1  # files.info reports the real size before any download
    slack = stack.signed_requests()
    slack.mention("<@UTPUBOT> what happened?", user="UALICE", channel=CHANNEL, files=[info])
    text = wait_until(lambda: "Could not read huge.log" in thread_texts(stack) and thread_texts(stack))
    assert f"the limit is {MAX_FILE_BYTES:,}" in text
    slack.close()
