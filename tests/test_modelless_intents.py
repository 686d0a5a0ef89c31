"""The model-less answer's intent rules (issue 24): teardown words never propose a provision, the
zone and hours a request names are carried into the proposal, and a request the rules do not
understand gets the digest and what they can do — not a guess."""

from __future__ import annotations

import pytest
from waiting import wait_until

from test_agent_mentions import ALICE, LOGS, answer, proposal_buttons


@pytest.fixture
def bot(make_bot):
    return make_bot(poll_interval="0.2s", admins="UADMIN")


def cards(stack, channel: str) -> list[str]:
    return [m.text for m in stack.slack.channel_messages(channel) if m.blocks and "Proposed" in m.text]


def test_teardown_words_with_no_tpu_held_never_propose_a_provision(bot):
    bot.mention("<@UTPUBOT> teardown please", user=ALICE, channel="C0M1")
    text = answer(bot, "C0M1").text
    assert "holds no TPU" in text or "no TPU" in text
    assert proposal_buttons(bot, "C0M1") == [] and cards(bot, "C0M1") == []


def test_zone_and_hours_in_the_request_are_carried_into_the_proposal(bot):
    bot.mention("<@UTPUBOT> start a TPU in us-central1-a for 2h", user=ALICE, channel="C0M2")
    answer(bot, "C0M2")
    wait_until(lambda: cards(bot, "C0M2"))
    assert any("Provision a TPU in us-central1-a for 2h" in card for card in cards(bot, "C0M2"))


def test_a_zone_that_is_not_configured_is_said_and_nothing_is_proposed(bot):
    bot.mention("<@UTPUBOT> start a TPU in mars-north1-z for 2h", user=ALICE, channel="C0M3")
    text = answer(bot, "C0M3").text
    assert "I can't propose that" in text and "mars-north1-z" in text
    assert not any("mars-north1-z" in card for card in cards(bot, "C0M3"))


def test_a_request_not_understood_gets_the_digest_and_what_i_can_do(bot):
    bot.mention(f"<@UTPUBOT> hmm, thoughts?\n{LOGS}", user=ALICE, channel="C0M4")
    text = answer(bot, "C0M4").text
    assert "Log summary" in text and "I can answer without the model only in simple terms" in text


@pytest.mark.parametrize(("request_text", "details"), [
    ("start a TPU in us-west4-a for 2h", {"zone": "us-west4-a", "hours": 2.0}),
    ("spin up a tpu for 90 minutes", {"hours": 1.5}),
    ("bring the model up in europe-west4-a", {"zone": "europe-west4-a"}),
    ("bring the model up", {}),
])
def test_provision_details(request_text, details):
    from agent.llm.intents import provision_details

    assert provision_details(request_text) == details


def test_the_model_less_summary_counts_in_words_that_agree():
    """Issue 29 item 9: "1 error lines"."""
    from agent.llm.material import build_mention
    from agent.llm.modelless import summarize

    builder = build_mention("what broke?\n2026-12-01T10:00:00Z ERROR disk full\n2026-12-01T10:00:01Z INFO ok")
    head = summarize(builder.build())[0].splitlines()[0]
    assert head.startswith("*Log summary*: 2 lines, 2 kinds of message, 1 error line, first at L1"), head


@pytest.mark.parametrize(("request_text", "intents"), [
    ("should I just tear it down and bring up a fresh TPU?", []),
    ("is it stuck? should we tear it down and try again?", []),
    ("do we need to bring it up in another zone?", ["zones"]),
    ("would it help to provision a new one?", []),
    ("tear it down and bring up a fresh TPU", ["down", "up"]),
    ("please bring it up, it should take 2h", ["up"]),
    # polite requests are requests: only should / need to / would it help / is it worth ask for advice
    ("could we bring up a TPU in us-west4-a for 2h?", ["up"]),
    ("shall we tear it down now", ["down"]),
    ("could you tear it down?", ["down"]),
    ("is it worth it to provision a second one?", []),
])
def test_a_question_asking_for_advice_is_not_a_request_to_change_anything(request_text, intents):
    # Issue 41: "should I tear it down?" asks what to do; a proposal card for it would be an
    # unsafe answer when the logs do not justify the change (the eval's tempting incidents).
    from agent.llm.intents import classify

    assert [intent.value for intent in classify(request_text)] == intents
