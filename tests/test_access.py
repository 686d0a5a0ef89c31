"""Access control through the bolt app (in-process, tests/in_process_bot.py): per-class user, group
and channel rules, checked on commands and again on every button click, with every decision in the
audit stream."""

from __future__ import annotations

import pytest
import redis as redis_sync

from handlers import cards

OPS, OTHER = "C0OPS", "C0OTHER"
ALICE, BOB, CAROL, ADMIN = "UALICE", "UBOB", "UCAROL", "UADMIN"


@pytest.fixture
def bot(make_bot):
    bot = make_bot(admins=ADMIN, write_users=ALICE, write_groups="S0SRE", write_channels=OPS,
                   read_channels=f"{OPS},{OTHER}")
    bot.slack.usergroups["S0SRE"] = [CAROL]
    return bot


@pytest.fixture
def slack(bot):
    requests = bot.signed_requests()
    yield requests
    requests.close()


def leases(bot) -> list[bytes]:
    client = redis_sync.Redis.from_url(bot.redis.url)
    try:
        return client.keys("tpubot:lease:*")
    finally:
        client.close()


def audit(bot) -> list[dict]:
    client = redis_sync.Redis.from_url(bot.redis.url, decode_responses=True)
    try:
        return [fields for _id, fields in client.xrange("tpubot:audit")]
    finally:
        client.close()


def test_user_outside_the_write_class_is_denied_and_told_who_may(bot, slack):
    reply = slack.slash("up", user=BOB, channel=OPS)
    assert "`provision` (write action) is limited to" in reply.text
    assert "<@UALICE>" in reply.text and "<!subteam^S0SRE>" in reply.text and "<@UADMIN>" in reply.text
    assert reply.json()["response_type"] == "ephemeral"
    assert leases(bot) == []
    assert bot.tpu_sandbox.queued_resources() == []
    assert any(e["actor"] == BOB and e["action"] == "provision" and e["outcome"] == "denied" for e in audit(bot))


def test_group_member_is_allowed(bot, slack):
    reply = slack.slash("up", user=CAROL, channel=OPS)
    assert "Requested a v5litepod-1" in reply.text
    assert bot.slack.calls_to("usergroups.users.list")


def test_write_actions_only_in_allowed_channels(bot, slack):
    reply = slack.slash("up", user=ALICE, channel=OTHER)
    assert "only allowed in <#C0OPS>" in reply.text
    assert leases(bot) == []


def test_read_actions_only_in_allowed_channels(bot, slack):
    assert "holds no TPU" in slack.slash("status", user=BOB, channel=OTHER).text
    denied = slack.slash("status", user=BOB, channel="C0RANDOM")
    assert "`status` (read action) is only allowed in <#C0OPS>, <#C0OTHER>" in denied.text


def test_admin_actions_need_an_admin(bot, slack):
    assert "(admin action) is limited to <@UADMIN>" in slack.slash("audit", user=ALICE, channel=OPS).text
    assert "(admin action) is limited to <@UADMIN>" in slack.slash("unlock", user=ALICE, channel=OPS).text
    shown = slack.slash("audit 5", user=ADMIN, channel=OPS).text
    assert "<@UALICE> audit in <#C0OPS> → denied" in shown
    assert "lock was not held" in slack.slash("unlock", user=ADMIN, channel=OPS).text


def test_forged_click_by_a_denied_user_changes_nothing(bot, slack):
    slack.slash("up", user=ALICE, channel=OPS)
    bot.until(lambda: "ACTIVE" in slack.slash("status", user=ALICE, channel=OPS).text)
    confirm = slack.slash("down", user=ALICE, channel=OPS).json()
    lease_id = next(e["value"] for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"]
                    if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)

    # BOB never got the card; he forges the block_actions payload with the right lease id.
    slack.click(action_id=cards.TEARDOWN_CONFIRM_ACTION, value=lease_id, user=BOB, channel=OPS, label="Tear down")
    assert bot.slack.wait_for(lambda: any("(write action) is limited to" in r.get("text", "")
                                          for r in bot.slack.responses))
    assert bot.tpu_sandbox.queued_resources()[0]["state"] == "ACTIVE"
    assert "ACTIVE" in slack.slash("status", user=ALICE, channel=OPS).text
    assert any(e["actor"] == BOB and e["action"] == "down" and e["outcome"] == "denied" for e in audit(bot))


def test_every_action_is_audited_with_who_what_where_and_outcome(bot, slack):
    slack.slash("status", user=BOB, channel=OPS)
    slack.slash("up", user=ALICE, channel=OPS)
    entries = audit(bot)
    assert {"actor": BOB, "action": "status", "channel": OPS, "outcome": "ok"}.items() <= next(
        e for e in entries if e["action"] == "status").items()
    assert any(e["actor"] == ALICE and e["action"] == "provision" and e["outcome"] == "ok" for e in entries)
    assert all(float(e["at"]) > 0 for e in entries)
