"""The App Home tab: a signed `app_home_opened` event → one `views.publish` with the leases.

In-process (tests/in_process_bot.py: the real bolt app given signed requests, real worker jobs
against the TPU emulator, real Redis); the rendering's block budget is checked on the pure view
function.
"""

from __future__ import annotations

import json

import pytest
import redis as redis_sync

from agent.actions import REGISTRY, ActionResult
from agent.actions.workspace_actions import LeaseRows
from handlers.home_view import MAX_HOME_BLOCKS, home_view
from infra.state import keys
from infra.state.leases import Lease

ALICE, BOB = "UALICE", "UBOB"
OPS, ML = "C0OPS", "C0ML"


@pytest.fixture
def bot(make_bot):
    return make_bot(poll_interval="0.2s", admins="UADMIN")


@pytest.fixture
def slack(bot):
    requests = bot.signed_requests()
    yield requests
    requests.close()


def published(bot) -> list[dict]:
    views = []
    for call in bot.slack.calls_to("views.publish"):
        view = call.body.get("view")
        views.append({"user_id": call.body.get("user_id"), "view": json.loads(view) if isinstance(view, str) else view})
    return views


def view_text(view: dict) -> str:
    return json.dumps(view["blocks"])


def leases(bot) -> list[Lease]:
    client = redis_sync.Redis.from_url(bot.redis.url)
    try:
        return [Lease.from_redis(client.hgetall(key)) for key in client.smembers(keys.lease_index())]
    finally:
        client.close()


def test_app_home_lists_the_workspace_leases_and_the_scoreboard(bot, slack):
    assert slack.slash("up", user=ALICE, channel=OPS).status == 200
    # ACTIVE before BOB asks, as when people type: the zone search ranks a zone with a request
    # accepted but not yet ACTIVE after the untried ones, so BOB's accepted request in us-west4-a
    # would send ALICE's search to a zone the price table does not have (no "Cost so far").
    bot.until(lambda: {lease.channel for lease in leases(bot) if lease.active_at} == {OPS})
    assert slack.slash("up us-west4-a 2h", user=BOB, channel=ML).status == 200
    bot.until(lambda: {lease.channel for lease in leases(bot) if lease.active_at} == {OPS, ML})

    reply = slack.event({"type": "app_home_opened", "user": BOB, "channel": "D0BOB", "tab": "home"})
    assert reply.status == 200
    home = bot.until(lambda: published(bot))[0]

    assert home["user_id"] == BOB
    view = home["view"]
    assert view["type"] == "home" and len(view["blocks"]) <= MAX_HOME_BLOCKS
    text = view_text(view)
    for needle in (f"<#{OPS}>", f"<#{ML}>", f"<@{ALICE}>", f"<@{BOB}>", "us-west4-a", "Deadline", "Cost so far"):
        assert needle in text, needle
    # The scoreboard comes from the `zones` action; a build without it says so instead.
    assert ("Zone scoreboard" in text and "us-west4-a" in text) if "zones" in REGISTRY else "not available" in text
    sections = [b for b in view["blocks"] if b["type"] == "section" and "fields" in b]
    assert len(sections) == 2
    for section in sections:
        fields = {f["text"].split("\n", 1)[0]: f["text"].split("\n", 1)[1] for f in section["fields"]}
        assert "ACTIVE" in fields["*State*"] or "READY" in fields["*State*"] or "MODEL" in fields["*State*"]
        assert fields["*Cost so far*"].startswith("$")  # billed from ACTIVE at the flex-start rate
        assert "UTC" in fields["*Deadline*"]


def test_messages_tab_and_other_teams_are_not_shown(bot, slack):
    slack.slash("up", user=ALICE, channel=OPS)
    other = bot.signed_requests(team="T0OTHER")
    try:
        # The Messages tab publishes nothing; a later Home open in another team publishes once.
        other.event({"type": "app_home_opened", "user": BOB, "channel": "D0BOB", "tab": "messages"})
        other.event({"type": "app_home_opened", "user": BOB, "channel": "D0BOB", "tab": "home"})
        home = bot.until(lambda: published(bot))[0]
    finally:
        other.close()
    assert f"<#{OPS}>" not in view_text(home["view"])
    assert "No channel in this workspace holds a TPU" in view_text(home["view"])
    assert len(published(bot)) == 1


def test_home_view_stays_within_slacks_block_limit():
    rows = [{"lease_id": f"l{i}", "channel": f"C{i:04d}", "holder": "U1", "state": "ACTIVE", "zone": "us-west4-a",
             "deadline": 2_000_000_000.0, "cost_so_far": 0.5} for i in range(150)]
    zones = ("z", [{"type": "header", "text": {"type": "plain_text", "text": "Zone scoreboard"}},
                   {"type": "section", "text": {"type": "mrkdwn", "text": "table"}}])
    view = home_view(ActionResult.done("150 TPU leases", payload=LeaseRows(rows)), zones, now=1_999_990_000.0)
    assert len(view["blocks"]) == MAX_HOME_BLOCKS
    text = view_text(view)
    shown = text.count("*Channel*")
    assert shown == MAX_HOME_BLOCKS - 4 - 2
    assert f"and {150 - shown} more leases" in text and "Zone scoreboard" in text
