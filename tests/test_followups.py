"""Follow-ups (issue 32) through the bolt app and the worker, in-process (tests/in_process_bot.py):
a plain reply in a thread the bot answered is answered without a mention, with the thread (the
earlier answer included) as its context; a reply in a thread the bot never joined, by a
non-member, after "stop", or in a thread older than FOLLOWUP_MAX_AGE is not."""

from __future__ import annotations

import json
import time

import pytest
import redis as redis_sync

from infra.sandbox.vllm import LatencyModel, VllmEmulator

ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"
CHANNEL = "C0FOLLOW"
BOT = "UTPUBOT"


@pytest.fixture(scope="module")
def emu():
    with VllmEmulator(latency=LatencyModel.instant()) as emulator:
        yield emulator


@pytest.fixture
def bot(make_bot, emu):
    emu.requests.clear()
    running = make_bot(gemma_base_url=emu.base_url, agent_stream=False)
    yield running
    assert emu.pending_turns == 0, "the test left scripted turns unused"


def reply_event(requests, slack, text: str, *, user: str, thread_ts: str, channel: str = CHANNEL):
    """A person's plain reply in a thread: in the sandbox's conversation, and as Slack's message event."""
    ts = slack.add_message(channel, text, user=user, thread_ts=thread_ts)
    response = requests.event({"type": "message", "user": user, "text": text, "ts": ts, "thread_ts": thread_ts,
                               "channel": channel, "channel_type": "channel", "team": "T0SANDBOX"})
    assert response.status == 200
    return ts


def answers(slack, thread_ts: str) -> list:
    return [m for m in slack.channel_messages(CHANNEL) if m.thread_ts == thread_ts and m.user == BOT
            and "_Answered by" in m.text]


def job_seen(state: redis_sync.Redis, ts: str) -> bool:
    """The web queued a job for message `ts` (still queued, running or finished)."""
    job = f"mention:T0SANDBOX:{CHANNEL}:{ts}"
    return bool(state.exists(f"arq:job:{job}", f"arq:result:{job}", f"arq:in-progress:{job}"))


def ask(bot, emu, text: str = "why did the RPCs time out?") -> str:
    """A mention the bot answers; returns its ts (the thread)."""
    emu.push_turns("The RPC to worker 3 hit DEADLINE_EXCEEDED after 8 s.")
    ts = bot.slack.add_message(CHANNEL, f"<@{BOT}> {text}", user=ALICE)
    assert bot.signed_requests().mention(f"<@{BOT}> {text}", user=ALICE, channel=CHANNEL, ts=ts).status == 200
    bot.until(lambda: answers(bot.slack, ts), timeout=30.0, what="the mention's answer")
    return ts


def test_a_reply_in_a_thread_the_bot_answered_is_answered_with_the_earlier_answer_in_context(bot, emu):
    thread_ts = ask(bot, emu)
    emu.push_turns("Raise the RPC deadline to 30 s, then watch worker 3.")
    reply_event(bot.signed_requests(), bot.slack, "what should we change?", user=BOB, thread_ts=thread_ts)
    bot.until(lambda: len(answers(bot.slack, thread_ts)) == 2, timeout=30.0, what="the follow-up's answer")
    assert "Raise the RPC deadline" in answers(bot.slack, thread_ts)[-1].text
    prompt = json.dumps(emu.requests[-1]["messages"])
    assert "what should we change?" in prompt
    assert "The RPC to worker 3 hit DEADLINE_EXCEEDED" in prompt  # the bot's earlier answer, as thread context


def test_a_reply_in_a_thread_the_bot_never_joined_is_not_answered(bot, emu):
    state = redis_sync.Redis.from_url(bot.settings.redis_url)
    root = bot.slack.add_message(CHANNEL, "deploy of v2 is rolling", user=ALICE)
    ts = reply_event(bot.signed_requests(), bot.slack, "it looks slow, what went wrong?", user=BOB, thread_ts=root)
    assert not job_seen(state, ts)  # the web decides before its ack: nothing was queued
    assert bot.slack.calls_to("chat.postMessage") == []
    state.close()


def test_stop_ends_the_following_and_later_replies_are_not_answered(bot, emu):
    state = redis_sync.Redis.from_url(bot.settings.redis_url)
    thread_ts = ask(bot, emu)
    reply_event(bot.signed_requests(), bot.slack, "Thanks, done!", user=BOB, thread_ts=thread_ts)
    bot.until(lambda: any("stopped following this thread" in m.text for m in bot.slack.channel_messages(CHANNEL)),
              timeout=30.0, what="the stop acknowledged")
    later = reply_event(bot.signed_requests(), bot.slack, "one more thing?", user=BOB, thread_ts=thread_ts)
    assert not job_seen(state, later)
    assert len(answers(bot.slack, thread_ts)) == 1
    state.close()


def test_a_non_member_reply_is_not_answered(bot, emu):
    state = redis_sync.Redis.from_url(bot.settings.redis_url)
    thread_ts = ask(bot, emu)
    bot.slack.members[CHANNEL] = [ALICE, BOT]  # Carol reads the public channel without having joined it
    ts = reply_event(bot.signed_requests(), bot.slack, "and the cause?", user=CAROL, thread_ts=thread_ts)
    bot.until(lambda: state.exists(f"arq:result:mention:T0SANDBOX:{CHANNEL}:{ts}"), timeout=30.0,
              what="the follow-up job ran")
    assert bot.slack.calls_to("conversations.members")
    assert len(answers(bot.slack, thread_ts)) == 1
    state.close()


def test_a_reply_in_a_thread_older_than_followup_max_age_is_not_answered(make_bot):
    bot = make_bot(followup_max_age="1h", agent_use_model=False)
    state = redis_sync.Redis.from_url(bot.settings.redis_url)
    old = f"{time.time() - 7200:.6f}"  # a thread begun two hours ago, answered now
    assert bot.signed_requests().mention(f"<@{BOT}> status?", user=ALICE, channel=CHANNEL, ts=old).status == 200
    bot.until(lambda: any(m.thread_ts == old and "Made without the model" in m.text
                          for m in bot.slack.channel_messages(CHANNEL)), timeout=30.0, what="the mention's answer")
    ts = f"{time.time():.6f}"
    response = bot.signed_requests().event({"type": "message", "user": BOB, "text": "and now?", "ts": ts,
                                            "thread_ts": old, "channel": CHANNEL, "team": "T0SANDBOX"})
    assert response.status == 200 and not job_seen(state, ts)
    state.close()
