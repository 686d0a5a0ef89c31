"""A lease whose job fails ends FAILED with the reason and the fix on its card, and a teardown
always finishes (issue 44): a zone the TPU API does not serve once jammed the channel for good,
the provision job dying in the log while the card said CREATING and `/tpu down` said TEARING DOWN.

In-process (tests/in_process_bot.py): the real bolt app given signed requests, the real worker and
arq, the real TPU client against the sandbox TPU API, which answers an unserved zone with the 400 the real API gives.
"""

from __future__ import annotations

import json

import redis as redis_sync

from handlers import cards
from infra.state import keys

CHANNEL = "C0ZONE"
ALICE = "UALICE"
# A zone name of the right shape that the TPU API does not serve (settings refuse other shapes).
UNSERVED = "us-west4-z"


def cards_posted(stack) -> list[str]:
    return [json.dumps(c.body.get("blocks")) + c.body.get("text", "") for c in stack.slack.calls
            if c.method in ("chat.postMessage", "chat.update")]


def lease_state(stack) -> bytes | None:
    client = redis_sync.Redis.from_url(stack.redis.url)
    try:
        return client.hget(keys.lease("T0SANDBOX", CHANNEL), "state")
    finally:
        client.close()


def test_a_zone_the_api_does_not_serve_fails_the_lease_with_the_fix_and_frees_the_channel(make_bot):
    bot = make_bot(poll_interval="0.2s", tpu_zone=UNSERVED, tpu_zones=UNSERVED)
    slack = bot.signed_requests()
    reply = slack.slash("up", user=ALICE, channel=CHANNEL)
    assert f"Requested a v5litepod-1 flex-start TPU in {UNSERVED}" in reply.text, reply.text
    failed = bot.until(lambda: [c for c in cards_posted(bot) if "FAILED" in c], timeout=60,
                       what="the card FAILED within a minute")
    assert f'The requested zone \\"{UNSERVED}\\" is not supported' in failed[-1], failed[-1]
    assert "*Fix:*" in failed[-1] and f"remove {UNSERVED} from TPU_ZONES" in failed[-1]
    assert bot.tpu_sandbox.queued_resources() == []
    # The channel is free again: nothing left to tear down, and the next /tpu up is taken.
    bot.until(lambda: lease_state(bot) is None, timeout=10, what="the failed lease released")
    assert "nothing to tear down" in slack.slash("down", user=ALICE, channel=CHANNEL).text
    again = slack.slash("up", user=ALICE, channel=CHANNEL)
    assert "Requested a v5litepod-1" in again.text, again.text
    slack.close()


def test_tearing_down_a_lease_whose_create_never_happened_releases_it_at_once(make_bot):
    """`/tpu down` before any create was accepted, in a zone no QR can exist in: released, not stuck."""
    bot = make_bot(poll_interval="0.2s", tpu_zone=UNSERVED, tpu_zones=UNSERVED)
    requests = bot.signed_requests()
    try:
        assert "Requested" in requests.slash("up", user=ALICE, channel=CHANNEL).text
        confirm = requests.slash("down", user=ALICE, channel=CHANNEL).json()
        button = next(e for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"]
                      if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)
        assert requests.click(action_id=button["action_id"], value=button["value"], user=ALICE,
                              channel=CHANNEL).status == 200
        assert lease_state(bot) == b"TEARING_DOWN"
        bot.until(lambda: lease_state(bot) is None, timeout=30, what="the teardown finished")
        released = bot.until(lambda: [c for c in cards_posted(bot) if "RELEASED" in c], timeout=10)
        assert "Torn down" in released[-1] and "not confirmed" not in released[-1]
        assert "holds no TPU" in requests.slash("status", user=ALICE, channel=CHANNEL).text
    finally:
        requests.close()


def test_a_job_that_runs_past_its_timeout_fails_its_lease_within_a_minute(make_bot):
    """arq cancels a job at JOB_TIMEOUT and keeps a failed result: no code of ours runs then, so the
    worker's minute pass finds the lease whose job is over and ends it."""
    # The emulated create takes 0.2 s x 20 = 4 s, longer than the provision job may run.
    bot = make_bot(poll_interval="0.2s", job_timeout="1s", sandbox_time_scale=20)
    requests = bot.signed_requests()
    try:
        assert "Requested" in requests.slash("up", user=ALICE, channel=CHANNEL).text
        failed = bot.until(lambda: [c for c in cards_posted(bot) if "FAILED" in c], timeout=75,
                           what="the card FAILED within the minute pass")
        assert "The provisioning job stopped on an error: it ran past JOB_TIMEOUT" in failed[-1], failed[-1]
        assert "*Fix:* run `/tpu up` again" in failed[-1]
        bot.until(lambda: lease_state(bot) is None, timeout=10, what="the failed lease released")
        # What the create made is deleted: nobody would watch it.
        bot.until(lambda: bot.tpu_sandbox.queued_resources() == [], timeout=30, what="the QR deleted")
    finally:
        requests.close()
