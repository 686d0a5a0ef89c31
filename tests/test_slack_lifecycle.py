"""/tpu up, status and down end to end.

The real bolt app behind a real HTTP server (uvicorn) receives signed requests; the worker runs
real arq jobs against a real Redis-protocol server; the real google TPU clients talk to the
sandbox emulator over HTTP; Slack's Web API is the local stand-in that records every call.
"""

from __future__ import annotations

import json
import time

import pytest
import redis as redis_sync
from waiting import wait_until

from agent.lease.reconcile import LOCK_SCOPE
from handlers import cards
from infra.sandbox.slack_requests import sign
from infra.sandbox.tpu_api import ZoneBehaviour
from infra.state import keys
from infra.state.leases import Lease

CHANNEL = "C0TEST"
ALICE, BOB = "UALICE", "UBOB"


@pytest.fixture
def stack_settings():
    return {"poll_interval": "0.2s", "admins": "UADMIN"}


def card_texts(stack) -> list[str]:
    return [c.body.get("text", "") for c in stack.slack.calls if c.method in ("chat.postMessage", "chat.update")]


def redis_keys(stack) -> list[bytes]:
    """State keys; the audit stream is a record of attempts, not state, and the worker's own
    start-up reconcile pass holds its lock for as long as that pass takes (long on a loaded machine)."""
    housekeeping = {b"tpubot:audit", keys.lock(*LOCK_SCOPE).encode()}
    client = redis_sync.Redis.from_url(stack.redis.url)
    try:
        return sorted(k for k in client.keys("tpubot:*") if k not in housekeeping)
    finally:
        client.close()


# --- request verification ---------------------------------------------------------------


def test_signed_request_is_accepted(slack):
    reply = slack.slash("help", user=ALICE, channel=CHANNEL)
    assert reply.status == 200
    assert "/tpu up [zone] [duration]" in reply.text


@pytest.mark.parametrize(
    "kind",
    ["bad_signature", "stale_timestamp", "missing_headers"],
)
def test_unsigned_or_stale_requests_get_401(stack, slack, kind):
    body = slack.slash_body("up", user=ALICE, channel=CHANNEL)
    if kind == "bad_signature":
        reply = slack.post(body, "application/x-www-form-urlencoded", signature="v0=" + "0" * 64)
    elif kind == "stale_timestamp":
        old = str(int(time.time()) - 301)
        reply = slack.post(body, "application/x-www-form-urlencoded", timestamp=old,
                           signature=sign(stack.signing_secret, old, body))
    else:
        import httpx

        reply_raw = httpx.post(slack.events_url, content=body, headers={"content-type": "application/x-www-form-urlencoded"})
        assert reply_raw.status_code == 401
        reply = None
    if reply is not None:
        assert reply.status == 401
    assert redis_keys(stack) == []
    assert stack.tpu_sandbox.queued_resources() == []


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("launch", "Unknown subcommand `launch`"),
        ("up europe-north9-z", "is not one of the configured zones"),
        ("up 0h", "0s is shorter than the shortest lease, 10m"),
        ("up 200h", "8d8h is longer than the longest lease, 7d"),
        ("up us-west4-a us-central1-a", "Give one zone"),
        ("up 2h 3h", "Give the duration once"),
        ("up banana", "neither a zone"),
        ("up us-west4a", "is not a zone name: a zone is its region, a dash and a letter, so write `us-west4-a`"),
        ("status now", "`/tpu status` takes no arguments"),
        ("down please", "`/tpu down` takes no arguments"),
        ("x" * 600, "at most 500"),
        # bolt 1.30 reads any form body containing "payload" as an empty interaction (a 404)
        ("up payload", "neither a zone"),
    ],
)
def test_bad_input_names_the_problem_and_changes_nothing(stack, slack, text, fragment):
    reply = slack.slash(text, user=ALICE, channel=CHANNEL)
    assert reply.status == 200
    body = reply.json()
    assert body["response_type"] == "ephemeral"
    assert fragment in body["text"]
    assert "Usage" in body["text"] or "Try" in body["text"]
    assert redis_keys(stack) == []
    assert stack.tpu_sandbox.queued_resources() == []


@pytest.mark.parametrize("text", ["status <!here>", "help <!everyone> now", "zones <!channel>", "down <@U0EVE|eve>",
                                  "spend <!here>", "runbook <!here> zzqx", "unlock <#C0OTHER|general> <!here>",
                                  "budget clear <!everyone>", "budget set 5 <!here>", "budget <!channel>",
                                  "up <!here>", "spend chart <!everyone>"])
def test_a_usage_error_shows_broadcast_and_mention_tokens_inert(stack, slack, text):
    """Slack renders `<!here>` in a reply as @here; escaped (& < > as Slack's formatting reference
    asks), the person sees what they typed and nobody is mentioned."""
    reply = slack.slash(text, user=ALICE, channel=CHANNEL).json()
    typed = [token for token in text.split() if token.startswith("<")]
    assert typed and all(token not in reply["text"] for token in typed), reply["text"]
    assert all(token.replace("<", "&lt;").replace(">", "&gt;") in reply["text"] for token in typed), reply["text"]
    assert redis_keys(stack) == []


def slack_encoded(typed: str) -> str:
    """What Slack sends for characters a person typed (its formatting reference: & < > as entities)."""
    return typed.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@pytest.mark.parametrize("typed", ["us<west&4", "a&b>c", "&lt;", "<!here>", "x&amp;y"])
def test_echoed_text_as_slack_sends_it_shows_as_typed_never_escaped_twice(stack, slack, typed):
    """Slack escapes what a person types before it reaches us; escaping it again showed them `&amp;lt;`
    (rendered `&lt;`) for the `<` they typed."""
    reply = slack.slash(f"up {slack_encoded(typed)}", user=ALICE, channel=CHANNEL).json()
    assert f"`{slack_encoded(typed)}` is neither a zone" in reply["text"], reply["text"]
    assert redis_keys(stack) == []


def test_escaping_is_idempotent_and_leaves_nothing_slack_renders():
    from infra.mrkdwn import escape, in_code

    for text in ("a < b & c", "<!here> AT&T", "&lt;!channel&gt;", "&amp;lt;", "a &gt b &", "`<@U0EVE>`"):
        once = escape(text)
        assert escape(once) == once and in_code(in_code(text)) == in_code(text)
        assert "<" not in once and ">" not in once and "&amp;amp;" not in once
    assert escape("a &lt; b &amp; c") == "a &lt; b &amp; c"  # as Slack sent it: shown as typed
    assert escape("AT&T <!here>") == "AT&amp;T &lt;!here&gt;"


def test_a_command_that_says_payload_is_answered_and_still_needs_a_signature(stack, slack):
    assert "takes no arguments, but got `payload`" in slack.slash("help payload", user=ALICE, channel=CHANNEL).text
    body = slack.slash_body("up payload", user=ALICE, channel=CHANNEL)
    forged = slack.post(body, "application/x-www-form-urlencoded", signature="v0=" + "0" * 64)
    assert forged.status == 401
    assert redis_keys(stack) == []


def test_down_without_a_lease_changes_nothing(stack, slack):
    reply = slack.slash("down", user=ALICE, channel=CHANNEL)
    assert "nothing to tear down" in reply.text
    assert redis_keys(stack) == []


@pytest.mark.parametrize("written, hours", [("90m", 1.5), ("1h30m", 1.5), ("2h", 2.0), ("2", 2.0), ("4hrs", 4.0)])
def test_up_takes_durations_as_settings_write_them(written, hours):
    from handlers.commands import parse

    assert parse(f"up {written}").args == {"zone": None, "hours": hours}
    assert parse(f"UP us-west4-a {written}").args == {"zone": "us-west4-a", "hours": hours}


def test_up_90m_runs_for_an_hour_and_a_half(stack, slack):
    reply = slack.slash("up 90m", user=ALICE, channel=CHANNEL)
    assert reply.status == 200 and "for 1h30m" in reply.text, reply.text


# --- the lifecycle ----------------------------------------------------------------------


def test_up_status_down_lifecycle(stack, slack):
    reply = slack.slash("up", user=ALICE, channel=CHANNEL)
    assert reply.status == 200 and "Requested a v5litepod-1 flex-start TPU in us-west4-a" in reply.text

    # The card is posted once and walks through the QR states to ACTIVE.
    wait_until(lambda: any("ACTIVE" in t for t in card_texts(stack)))
    texts = card_texts(stack)
    assert len(stack.slack.calls_to("chat.postMessage")) == 1
    order = ["CREATING", "ACTIVE"]
    positions = [next(i for i, t in enumerate(texts) if s in t) for s in order]
    assert positions == sorted(positions)
    qrs = stack.tpu_sandbox.queued_resources()
    assert len(qrs) == 1 and qrs[0]["state"] == "ACTIVE"

    status = slack.slash("status", user=BOB, channel=CHANNEL).json()
    fields = str(status["blocks"])
    assert "ACTIVE" in fields and "us-west4-a" in fields and "<@UALICE>" in fields and "Endpoint" in fields

    # A second /tpu up names the holder and creates nothing.
    second = slack.slash("up", user=BOB, channel=CHANNEL)
    assert "held by <@UALICE>" in second.text
    assert len(stack.tpu_sandbox.queued_resources()) == 1

    # Down asks for confirmation with a "Tear down" button.
    confirm = slack.slash("down", user=ALICE, channel=CHANNEL).json()
    button = next(e for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"]
                  if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)
    assert "Tear down" in button["text"]["text"]

    # A click by someone who is neither holder nor admin changes nothing.
    slack.click(action_id=button["action_id"], value=button["value"], user=BOB, channel=CHANNEL, label="Tear down")
    assert stack.slack.wait_for(lambda: any("Only <@UALICE>" in r.get("text", "") for r in stack.slack.responses))
    assert stack.tpu_sandbox.queued_resources()[0]["state"] == "ACTIVE"
    assert "ACTIVE" in slack.slash("status", user=ALICE, channel=CHANNEL).json()["text"]

    # The holder's click deletes the QR and releases the lease.
    slack.click(action_id=button["action_id"], value=button["value"], user=ALICE, channel=CHANNEL, label="Tear down")
    wait_until(lambda: stack.tpu_sandbox.queued_resources() == [])
    wait_until(lambda: "holds no TPU" in slack.slash("status", user=ALICE, channel=CHANNEL).text)
    assert stack.slack.wait_for(lambda: any("RELEASED" in str(c.body.get("blocks")) for c in stack.slack.calls_to("chat.update")))
    receipt = wait_until(lambda: [c for c in stack.slack.calls_to("chat.postMessage") if c.body.get("thread_ts")])
    assert "Torn down by <@UALICE>" in receipt[0].body["text"]

    # A replayed click after release is harmless.
    slack.click(action_id=button["action_id"], value=button["value"], user=ALICE, channel=CHANNEL, label="Tear down")
    assert stack.slack.wait_for(lambda: any("already gone" in r.get("text", "") for r in stack.slack.responses))


def test_admin_may_tear_down_someone_elses_tpu(stack, slack):
    slack.slash("up us-west4-a 1h", user=ALICE, channel=CHANNEL)
    wait_until(lambda: any("ACTIVE" in t for t in card_texts(stack)))
    confirm = slack.slash("down", user="UADMIN", channel=CHANNEL).json()
    button = next(e for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"])
    slack.click(action_id=button["action_id"], value=button["value"], user="UADMIN", channel=CHANNEL)
    wait_until(lambda: stack.tpu_sandbox.queued_resources() == [])


def test_down_by_non_holder_is_denied_before_any_card(stack, slack):
    slack.slash("up", user=ALICE, channel=CHANNEL)
    reply = slack.slash("down", user=BOB, channel=CHANNEL)
    assert "Only <@UALICE>" in reply.text
    assert "blocks" not in reply.json() or all(b["type"] != "actions" for b in reply.json()["blocks"])


def test_a_click_is_acked_only_once_its_teardown_is_recorded_and_queued(make_stack, redis_url):
    """process_before_response: the ack means the work is durable; the reply follows it."""
    stack = make_stack(run_worker=False, admins="UADMIN")
    requests = stack.signed_requests()
    try:
        requests.slash("up", user=ALICE, channel=CHANNEL)
        confirm = requests.slash("down", user=ALICE, channel=CHANNEL).json()
        button = next(e for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"]
                      if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)
        ack = requests.click(action_id=button["action_id"], value=button["value"], user=ALICE, channel=CHANNEL)
        assert ack.status == 200
        client = redis_sync.Redis.from_url(redis_url)
        try:
            # Read at once, with no waiting: nothing may still be in flight once Slack has its 200.
            assert client.hget(f"tpubot:lease:T0SANDBOX:{CHANNEL}", "state") == b"TEARING_DOWN"
            assert client.exists(f"arq:job:teardown:{button['value']}")
        finally:
            client.close()
        assert stack.slack.wait_for(lambda: any("Tearing down" in r.get("text", "") for r in stack.slack.responses))
    finally:
        requests.close()

def test_a_job_that_meets_a_busy_channel_lock_goes_on_soon_after_a_live_holder_lets_go(stack, slack):
    """The lock's TTL (60 s) is for a dead holder; a teardown finishing as the next up starts must not cost it."""
    client = redis_sync.Redis.from_url(stack.redis.url)
    lock = keys.lock("T0SANDBOX", CHANNEL)
    try:
        assert client.set(lock, "another-job", nx=True, px=60_000)
        slack.slash("up", user=ALICE, channel=CHANNEL)
        lease_id = client.hget(keys.lease("T0SANDBOX", CHANNEL), "lease_id").decode()
        wait_until(lambda: client.exists(f"arq:retry:provision:{lease_id}"), what="the provision job's first try")
        assert stack.tpu_sandbox.queued_resources() == []
        client.delete(lock)
        wait_until(lambda: [q for q in stack.tpu_sandbox.queued_resources() if q["state"] == "ACTIVE"], timeout=20,
                   what="provisioning within seconds of the lock's release, not at its TTL")
    finally:
        client.close()


def test_a_30_minute_lease_waiting_for_capacity_reads_as_30_minutes_not_the_queue_deadline():
    # Seen: a 30 m lease's card said "Valid until … (in 3h59m)": the 4 h queueing deadline
    # (VALID_UNTIL_DURATION), labelled so that it read as the lease's end.
    now = 1_796_079_600.0
    lease = Lease(lease_id="L30", team="T1", channel="C1", holder="UALICE", zone="us-west1-c", qr_id="q", node_id="n",
                  state="WAITING_FOR_RESOURCES", created_at=now, state_since=now, run_seconds=1800,
                  valid_until=now + 4 * 3600)
    fields = dict(cards.lease_fields(lease, now=now + 30))
    assert fields["Run time"] == "30m, counted from when the TPU starts"
    assert "Valid until" not in fields
    assert fields["Waits for capacity until"] == f"{cards.clock(now + 4 * 3600)} (in 3h59m); none by then → FAILED"


def test_a_queued_resource_that_fails_while_waiting_fails_the_lease_and_is_deleted(stack, slack):
    """The watcher's FAILED path: out of valid-until time with no capacity, the QR turns FAILED;
    the lease fails with the reason and the QR, which still holds quota, is deleted."""
    zone = stack.settings.tpu_zone
    stack.tpu_sandbox.set_zone(zone, ZoneBehaviour.NO_CAPACITY)
    client = redis_sync.Redis.from_url(stack.redis.url)
    lease_key = keys.lease("T0SANDBOX", CHANNEL)
    try:
        slack.slash(f"up {zone}", user=ALICE, channel=CHANNEL)
        wait_until(lambda: client.hget(lease_key, "state") == b"WAITING_FOR_RESOURCES", timeout=20,
                   what="the lease waiting for capacity, its QR watched")
        stack.tpu_sandbox.fast_forward(stack.settings.valid_until_duration.total_seconds() + 1)
        wait_until(lambda: stack.tpu_sandbox.queued_resources() == [], timeout=20, what="the FAILED QR deleted")
        wait_until(lambda: client.hget(lease_key, "state") in (None, b"FAILED"), timeout=20, what="the lease failed")
    finally:
        client.close()
    failed_cards = [json.dumps(c.body.get("blocks")) for c in stack.slack.calls
                    if c.method == "chat.update" and "FAILED" in c.body.get("text", "")]
    assert failed_cards and "capacity" in failed_cards[-1].lower(), failed_cards
