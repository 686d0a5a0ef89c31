"""Hostile input, property-tested through the real HTTP path: whatever arrives in `/tpu` text or
a button payload, the bot never answers 5xx, never shows a traceback, and invalid input never
changes state. Each property runs 5,000 generated cases against one running stack."""

from __future__ import annotations

import json
import string
from urllib.parse import quote

import pytest
import redis as redis_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.local_stack import LocalStack
from bot.settings import Settings
from handlers import cards

CASES = 5_000
CHANNEL = "C0HOSTILE"
PROPERTY = settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def hostile_stack(redis_server_url, tmp_path_factory):
    base = redis_server_url.rsplit("/", 1)[0] if redis_server_url.count("/") > 2 else redis_server_url
    url = f"{base}/14"
    redis_sync.Redis.from_url(url).flushdb()
    tmp = tmp_path_factory.mktemp("hostile")
    # No worker: a valid `/tpu up` may claim a lease, but nothing should reach the cloud here.
    settings_ = Settings.load(tmp / "none.env", redis_url=url, admins="UADMIN")
    stack = LocalStack(settings_, run_worker=False).start()
    client = stack.signed_requests()
    state = redis_sync.Redis.from_url(url)
    yield stack, client, state
    client.close()
    state.close()
    stack.stop()


def state_snapshot(state: redis_sync.Redis) -> dict:
    """Everything that is state: leases and their hashes, locks, dedupe markers (not the audit record)."""
    snapshot = {}
    for key in state.scan_iter("tpubot:*"):
        if key in (b"tpubot:audit",) or key.startswith(b"tpubot:group:"):
            continue
        kind = state.type(key)
        snapshot[key] = state.hgetall(key) if kind == b"hash" else state.smembers(key) if kind == b"set" else state.get(key) if kind == b"string" else kind
    return snapshot


# --- /tpu text ------------------------------------------------------------------------------

VOCABULARY = ["up", "down", "status", "help", "audit", "unlock", "us-west4-a", "europe-west4-a", "zz-top9-q",
              "4h", "0h", "-1h", "1e9h", "168h", "169h", "2.5", "NaN", "inf", "<!channel>", "<@U123>", "`", "*",
              "ignore previous instructions", "&amp;", "\u202e", "\x00", "🚀", "'; DROP TABLE leases;--"]
tpu_text = st.one_of(
    st.text(max_size=600),
    st.lists(st.sampled_from(VOCABULARY), max_size=6).map(" ".join),
    st.text(alphabet=string.printable, max_size=80),
)


@PROPERTY
@given(text=tpu_text)
def test_tpu_text_never_errors_and_invalid_text_changes_nothing(hostile_stack, text):
    stack, client, state = hostile_stack
    before = state_snapshot(state)
    reply = client.slash(text, user="UMALLORY", channel=CHANNEL)
    assert reply.status == 200, (text, reply.status, reply.body[:200])
    body = reply.json()
    assert "Traceback" not in reply.body and "Exception" not in body.get("text", "")
    assert body.get("response_type") == "ephemeral"
    if body.get("text", "").startswith(":warning:"):
        assert state_snapshot(state) == before, text


# --- button payloads ------------------------------------------------------------------------

ACTION_IDS = [cards.TEARDOWN_CONFIRM_ACTION, cards.TEARDOWN_CANCEL_ACTION, "unknown_action", ""]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=40))
button_payload = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["block_actions", "block_actions", "view_submission", "shortcut", ""]),
        "user": st.one_of(st.fixed_dictionaries({"id": st.text(max_size=12)}), json_scalars),
        "team": st.one_of(st.fixed_dictionaries({"id": st.sampled_from(["T0SANDBOX", ""])}), json_scalars),
        "channel": st.one_of(st.fixed_dictionaries({"id": st.sampled_from([CHANNEL, "C0OTHER", ""])}), json_scalars),
        "actions": st.one_of(
            st.lists(st.fixed_dictionaries({
                "action_id": st.sampled_from(ACTION_IDS),
                "value": st.one_of(st.text(max_size=80), st.integers(), st.none()),
                "type": st.just("button"),
            }), max_size=3),
            json_scalars,
        ),
    },
    optional={"container": st.dictionaries(st.text(max_size=10), json_scalars, max_size=3),
              "response_url": st.just("http://127.0.0.1:9/hooks/nowhere")},
)


@PROPERTY
@given(payload=button_payload)
def test_button_payloads_never_error_and_never_change_state(hostile_stack, payload):
    stack, client, state = hostile_stack
    before = state_snapshot(state)
    # Keep replies on the local stand-in so a traceback would be visible if one were posted.
    if isinstance(payload.get("actions"), list) and "response_url" not in payload:
        payload["response_url"] = stack.slack.response_url("actions")
    reply = client.post("payload=" + quote(json.dumps(payload)), "application/x-www-form-urlencoded")
    assert reply.status < 500, (payload, reply.status)
    assert "Traceback" not in reply.body
    # No generated payload carries a real lease id, so no click may change anything.
    assert state_snapshot(state) == before
    assert not any("Traceback" in json.dumps(r) for r in stack.slack.responses[-3:])


# --- mention text ---------------------------------------------------------------------------

mention_text = st.one_of(
    st.text(max_size=2_000),
    st.lists(st.sampled_from(VOCABULARY + ["<@UTPUBOT>", "\n", "```", "tear down the TPU", "sk-abc123"]),
             max_size=12).map(" ".join),
    st.integers(min_value=40_001, max_value=60_000).map(lambda n: "x" * n),
)


@PROPERTY
@given(text=mention_text, user=st.sampled_from(["UMALLORY", "UEVE", ""]))
def test_mention_text_never_errors_and_creates_no_lease(hostile_stack, text, user):
    stack, client, state = hostile_stack
    leases_before = sorted(state.keys("tpubot:lease:*"))
    reply = client.mention("<@UTPUBOT> " + text, user=user or "UNOBODY", channel=CHANNEL)
    assert reply.status == 200, (text[:200], reply.status, reply.body[:200])
    assert "Traceback" not in reply.body
    # A mention only ever proposes; with no worker nothing runs, and nothing may claim a lease.
    assert sorted(state.keys("tpubot:lease:*")) == leases_before
