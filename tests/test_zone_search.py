"""`/tpu up` without a zone searches best-known-first; configuration errors stop the search.

In-process (tests/in_process_bot.py): signed slash commands to the real bolt app, real arq jobs,
the real TPU clients against the TPU emulator set up like the world the seed met (44 zones with
quota, only us-west4-a accepting flex-start v5litepod-1, europe-west4-a as the configured default).
"""

from __future__ import annotations

import pytest

from handlers import cards
from infra.sandbox.world import (
    SEED_DEFAULT_ZONE,
    SEED_V5E_ZONES,
    SEED_ZONES,
    seed_world,
)


CHANNEL = "C0ZONES"
ALICE = "UALICE"


def card_texts(stack) -> list[str]:
    return [c.body.get("text", "") for c in stack.slack.calls if c.method in ("chat.postMessage", "chat.update")]


def last_card(stack) -> dict:
    return [c.body for c in stack.slack.calls if c.method in ("chat.postMessage", "chat.update")][-1]


def start(make_bot, world=None, **settings):
    bot = make_bot(world=world, poll_interval="0.2s", **settings)
    return bot, bot.signed_requests()


@pytest.fixture
def seed(make_bot):
    bot, slack = start(make_bot, world=seed_world(), tpu_zones=",".join(SEED_ZONES), tpu_zone=SEED_DEFAULT_ZONE)
    yield bot, slack
    slack.close()


def tear_down(bot, slack) -> None:
    confirm = slack.slash("down", user=ALICE, channel=CHANNEL).json()
    button = next(e for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"]
                  if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)
    slack.click(action_id=button["action_id"], value=button["value"], user=ALICE, channel=CHANNEL, label="Tear down")
    bot.until(lambda: bot.tpu_sandbox.queued_resources() == [])
    bot.until(lambda: "holds no TPU" in slack.slash("status", user=ALICE, channel=CHANNEL).text)


def test_seed_world_search_ends_in_us_west4_a_and_the_next_up_goes_there_first(seed):
    bot, slack = seed
    reply = slack.slash("up", user=ALICE, channel=CHANNEL)
    assert f"TPU in {SEED_DEFAULT_ZONE}" in reply.text and "best-known other zones" in reply.text

    bot.until(lambda: any("READY" in t for t in card_texts(bot)))
    attempts = list(bot.tpu_sandbox.create_attempts)
    assert attempts[-1] == ("us-west4-a", "accepted")
    tried = [a.zone for a in attempts]
    # Cold: the configured default first, then only zones that list v5litepod-1 at all (no blind tries).
    assert tried[0] == SEED_DEFAULT_ZONE
    assert set(tried) <= set(SEED_V5E_ZONES) and len(tried) == len(set(tried)) <= len(SEED_V5E_ZONES)
    assert all(outcome == "flex_start_rejected" for _, outcome in attempts[:-1])
    qr = bot.tpu_sandbox.queued_resources()
    assert [q["zone"] for q in qr] == ["us-west4-a"]

    # The scoreboard shows it: us-west4-a ranks first, the rejecting zones are skipped for days.
    zones = slack.slash("zones", user=ALICE, channel=CHANNEL).json()
    table = zones["blocks"][1]["text"]["text"]
    assert table.splitlines()[1].lstrip("`").startswith("1. us-west4-a")
    assert "flex_start_unsupported" in table and "tries us-west4-a first" in zones["text"]

    tear_down(bot, slack)
    before = len(bot.tpu_sandbox.create_attempts)
    reply = slack.slash("up", user=ALICE, channel=CHANNEL)
    assert "TPU in us-west4-a" in reply.text  # the request side already knows where it goes
    bot.until(lambda: len([q for q in bot.tpu_sandbox.queued_resources() if q["state"] == "ACTIVE"]) == 1)
    assert bot.tpu_sandbox.create_attempts[before:] == [("us-west4-a", "accepted")]  # first attempt


def test_missing_network_stops_the_search_and_names_the_setting(make_bot):
    bot, slack = start(make_bot, world=seed_world(), tpu_zones=",".join(SEED_ZONES),
                       tpu_zone=SEED_DEFAULT_ZONE, network="no-such-vpc")
    try:
        slack.slash("up", user=ALICE, channel=CHANNEL)
        bot.until(lambda: any("FAILED" in t for t in card_texts(bot)))
        assert len(bot.tpu_sandbox.create_attempts) <= 3
        assert {outcome for _, outcome in bot.tpu_sandbox.create_attempts} == {"network_not_found"}
        failed = str(last_card(bot)["blocks"])
        assert "NETWORK" in failed and "no-such-vpc" in failed and "configuration problem" in failed
        assert "capacity" not in failed.lower()
        assert bot.tpu_sandbox.queued_resources() == []
        # The channel is free again: the failure was recorded, nothing is held.
        bot.until(lambda: "holds no TPU" in slack.slash("status", user=ALICE, channel=CHANNEL).text)
    finally:
        slack.close()


def test_the_same_unclassified_error_in_three_zones_is_a_configuration_problem(make_bot):
    bot, slack = start(make_bot)
    try:
        # An error nobody classified, from every zone (only the flex-start create route is affected).
        bot.tpu_sandbox.inject_failures(20, 400, "Cloud TPU received a bad request. The node spec is not "
                                                 "acceptable for this project. [EID: 0x7fa1]",
                                        path_contains="/v2alpha1/")
        slack.slash("up", user=ALICE, channel=CHANNEL)
        bot.until(lambda: any("FAILED" in t for t in card_texts(bot)))
        failed = str(last_card(bot)["blocks"])
        assert "same error came back from 3 zones" in failed and "tpubot doctor" in failed
        creates = [r for r in bot.tpu_sandbox.requests if r.method == "POST" and "/v2alpha1/" in r.path]
        assert len(creates) == 3
    finally:
        slack.close()


def test_an_explicit_zone_is_tried_alone_and_its_error_explained(make_bot):
    bot, slack = start(make_bot)  # default world: europe-west4-a rejects flex-start
    try:
        reply = slack.slash("up europe-west4-a", user=ALICE, channel=CHANNEL)
        assert "best-known" not in reply.text
        bot.until(lambda: any("FAILED" in t for t in card_texts(bot)))
        assert [a.zone for a in bot.tpu_sandbox.create_attempts] == ["europe-west4-a"]
        failed = str(last_card(bot)["blocks"])
        assert "FLEX_START provisioning model is not supported" in failed and "without a zone searches" in failed
    finally:
        slack.close()
