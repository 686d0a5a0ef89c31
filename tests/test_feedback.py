"""Feedback (issue 32) through the bolt app and the worker, in-process (tests/in_process_bot.py):
every answer gets 👍/👎 buttons; a click keeps the clicker's latest vote with the answer, its model
and its input's digest; and `tpubot feedback --json` reports the ratio from the same Redis."""

from __future__ import annotations

import json
import time

import redis as redis_sync
from typer.testing import CliRunner

from bot.cli import app
from handlers.feedback_buttons import ASK_TEXT, FEEDBACK_DOWN_ACTION, FEEDBACK_UP_ACTION
from waiting import wait_until

ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"
CHANNEL = "C0RATE"
LOGS = "\n".join(["2024-05-01 10:00:0%d ERROR rpc to worker 3 failed: DEADLINE_EXCEEDED" % n for n in range(5)])


def ts_ago(seconds: float) -> str:
    """A message ts that many seconds before now: follow-ups end FOLLOWUP_MAX_AGE after a thread
    starts, so a fixed ts would turn a reply into an unanswered one as the calendar moves on."""
    return f"{time.time() - seconds:.6f}"

def buttons(bot, thread_ts: str):
    return bot.until(lambda: next((m for m in bot.slack.channel_messages(CHANNEL)
                                   if m.thread_ts == thread_ts and m.text == ASK_TEXT), None),
                     timeout=30.0, what="the feedback buttons under the answer")


def click(bot, action: str, answer_id: str, user: str, message_ts: str) -> str:
    before = len(bot.slack.responses)
    reply = bot.signed_requests().click(action_id=action, value=answer_id, user=user, channel=CHANNEL,
                                        message_ts=message_ts, is_ephemeral=False)
    assert reply.status == 200
    # The reply is bolt's lazy listener's, which the in-process dispatch finishes before it returns: no worker.
    wait_until(lambda: len(bot.slack.responses) > before, what="the click's reply")
    return str(bot.slack.responses[-1].get("text", ""))


def test_votes_on_an_answer_are_kept_with_its_model_and_digest_and_reported(make_bot, monkeypatch):
    bot = make_bot(agent_use_model=False)
    ts = ts_ago(60)
    assert bot.signed_requests().mention(f"<@UTPUBOT> what failed?\n{LOGS}", user=ALICE, channel=CHANNEL,
                                         ts=ts).status == 200
    message = buttons(bot, ts)
    elements = message.blocks[0]["elements"]
    assert [e["action_id"] for e in elements] == [FEEDBACK_UP_ACTION, FEEDBACK_DOWN_ACTION]
    answer_id = elements[0]["value"]

    assert click(bot, FEEDBACK_UP_ACTION, answer_id, BOB, message.ts) == "Thanks: recorded :+1:."
    assert click(bot, FEEDBACK_DOWN_ACTION, answer_id, CAROL, message.ts).startswith("Thanks: recorded :-1:. What should")
    assert click(bot, FEEDBACK_UP_ACTION, answer_id, BOB, message.ts) == "You already rated this answer :+1:."
    assert click(bot, FEEDBACK_UP_ACTION, "0123456789abcdef", BOB, message.ts).startswith("That answer is too old")

    state = redis_sync.Redis.from_url(bot.settings.redis_url)
    answer = {k.decode(): v.decode() for k, v in state.hgetall(f"tpubot:answer:{answer_id}").items()}
    assert answer["model"] == "model-less" and len(answer["prompt_digest"]) == 16
    assert "Log summary" in answer["text"] and answer["channel"] == CHANNEL
    votes = {k.decode(): v.decode().split("|")[0] for k, v in state.hgetall(f"tpubot:answer-votes:{answer_id}").items()}
    assert votes == {BOB: "up", CAROL: "down"}
    state.close()

    monkeypatch.setenv("REDIS_URL", bot.settings.redis_url)
    result = CliRunner().invoke(app, ["feedback", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["answers"], report["up"], report["down"], report["ratio"]) == (1, 1, 1, 0.5)
    assert report["models"] == [{"model": "model-less", "up": 1, "down": 1, "ratio": 0.5}]
    text = CliRunner().invoke(app, ["feedback"]).output
    assert "model-less: 1 up, 1 down (50% useful)" in text


def test_a_mention_whose_logs_match_one_rated_useful_says_it_was_seen_before(make_bot):
    """Memory covers mentions too: an answered mention with logs is kept by its top templates, a 👍
    ends it, and a later mention with the same errors (other times) links to that thread."""
    bot = make_bot(agent_use_model=False)
    first, second = ts_ago(90_100), ts_ago(100)
    assert bot.signed_requests().mention(f"<@UTPUBOT> what failed?\n{LOGS}", user=ALICE, channel=CHANNEL,
                                         ts=first).status == 200
    message = buttons(bot, first)
    # Not ended yet: another look at the same errors is not pointed at an incident nobody closed.
    early = ts_ago(90_000)
    assert bot.signed_requests().mention(f"<@UTPUBOT> and now?\n{LOGS}", user=CAROL, channel=CHANNEL,
                                         ts=early).status == 200
    buttons(bot, early)
    assert not [m for m in bot.slack.channel_messages(CHANNEL) if m.thread_ts == early and "Seen before" in m.text]
    assert click(bot, FEEDBACK_UP_ACTION, message.blocks[0]["elements"][0]["value"], BOB, message.ts) \
        == "Thanks: recorded :+1:."
    later = LOGS.replace("2024-05-01", "2024-05-09")
    assert bot.signed_requests().mention(f"<@UTPUBOT> this again?\n{later}", user=CAROL, channel=CHANNEL,
                                         ts=second).status == 200
    seen = bot.until(lambda: next((m for m in bot.slack.channel_messages(CHANNEL)
                                   if m.thread_ts == second and "Seen before" in m.text), None),
                     timeout=30.0, what="the seen-before note in the second thread")
    assert f"<#{CHANNEL}>" in seen.text and f"p{first.replace('.', '')}" in seen.text
    assert not [m for m in bot.slack.channel_messages(CHANNEL) if m.thread_ts == first and "Seen before" in m.text]


def test_a_thumbs_down_with_a_reply_is_exported_as_an_eval_case(make_bot, monkeypatch, tmp_path):
    from test_cli_output import documented_keys
    from test_followups import reply_event

    from agent.evals.cases import parse_incident

    bot = make_bot(agent_use_model=False)
    ts = ts_ago(60)
    assert bot.signed_requests().mention(f"<@UTPUBOT> why did the rpc fail?\n{LOGS}", user=ALICE, channel=CHANNEL,
                                         ts=ts).status == 200
    message = buttons(bot, ts)
    said = click(bot, FEEDBACK_DOWN_ACTION, message.blocks[0]["elements"][0]["value"], CAROL, message.ts)
    assert said.startswith("Thanks: recorded :-1:.") and "Reply in this thread" in said
    correction = 'worker 3 was drained for the "kernel" upgrade; DEADLINE_EXCEEDED is expected there'
    reply_event(bot.signed_requests(), bot.slack, correction, user=CAROL, thread_ts=ts, channel=CHANNEL)
    bot.until(lambda: any(m.thread_ts == ts and m.text.startswith(":memo: Kept with your :-1:")
                          for m in bot.slack.channel_messages(CHANNEL)), timeout=30.0, what="the correction acknowledged")

    monkeypatch.setenv("REDIS_URL", bot.settings.redis_url)
    out = tmp_path / "cases"
    result = CliRunner().invoke(app, ["feedback", "--export-evals", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list(report) == documented_keys()["feedback --export-evals DIR"]
    [path] = report["written"]
    text = open(path, encoding="utf-8").read()
    incident = parse_incident(text, path)  # a valid incident as written: the eval runs it
    assert incident.mention == "why did the rpc fail?" and incident.logs == tuple(LOGS.splitlines())
    assert incident.kind == "feedback" and set(incident.forbidden) == {"provision", "teardown"}
    assert f"#   {correction}" in text  # what a right answer says, for a person to turn into facts
    ran = CliRunner().invoke(app, ["eval", "--cases", str(out), "--only-cases", "--arms", "modelless", "--json"])
    assert ran.exit_code == 0, ran.output
    assert [case["case"] for case in json.loads(ran.stdout)["cases"]] == [incident.id]
    # Exporting again rewrites the same file: one per rated answer.
    again = CliRunner().invoke(app, ["feedback", "--export-evals", str(out)])
    assert again.exit_code == 0 and "Wrote 1 incident file" in again.output


def test_a_thumbs_down_on_an_answer_without_logs_asks_for_no_correction(make_bot):
    bot = make_bot(agent_use_model=False)
    ts = ts_ago(60)
    assert bot.signed_requests().mention("<@UTPUBOT> what is the status?", user=ALICE, channel=CHANNEL,
                                         ts=ts).status == 200
    message = buttons(bot, ts)
    # No logs were kept with it, so no eval case could be made: nothing is asked of the clicker.
    assert click(bot, FEEDBACK_DOWN_ACTION, message.blocks[0]["elements"][0]["value"], CAROL, message.ts) \
        == "Thanks: recorded :-1:."
