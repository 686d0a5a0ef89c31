"""Hostile input, property-tested through the real HTTP path: whatever arrives in `/tpu` text or
a button payload, the bot never answers 5xx, never shows a traceback, and invalid input never
changes state. Each property runs 5,000 generated cases against one running stack."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import string
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote, urlencode

import httpx
import pytest
import redis as redis_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alert_payloads import keyspace_digest
from conftest import claimed_database
from bot.local_stack import LocalStack
from bot.settings import Settings
from handlers import cards
from handlers.alerts import ALERT_ACK_ACTION, ALERT_TEARDOWN_ACTION
from handlers.commands import SUBCOMMANDS
from handlers.payload_guard import MAX_NESTING
from handlers.proposal_buttons import PROPOSAL_CONFIRM_ACTION, PROPOSAL_DISMISS_ACTION

CASES = 5_000
CHANNEL = "C0HOSTILE"
PROPERTY = settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def hostile_stack(redis_server_url, database_numbers, tmp_path_factory):
    # Claimed for the module, as each test's database is: another pytest session on this server
    # (another checkout) must not flush it, nor this module flush theirs.
    with claimed_database(redis_server_url, database_numbers, "hostile") as url:
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
    """Everything that is state: leases and their hashes, locks, dedupe markers (not the audit record).
    Pipelined (keys, their types, their values: three round trips), as the property tests take one
    before and after each of 15,000 cases."""
    keys = [key for key in state.keys("tpubot:*") if key != b"tpubot:audit" and not key.startswith(b"tpubot:group:")]
    pipe = state.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    kinds = pipe.execute()
    readers = {b"hash": pipe.hgetall, b"set": pipe.smembers, b"string": pipe.get}
    for key, kind in zip(keys, kinds):
        readers.get(kind, pipe.type)(key)  # any other kind is recorded by its type
    return dict(zip(keys, pipe.execute()))


# --- /tpu text ------------------------------------------------------------------------------

VOCABULARY = ["up", "down", "status", "help", "audit", "unlock", "us-west4-a", "europe-west4-a", "zz-top9-q",
              "4h", "0h", "-1h", "1e9h", "168h", "169h", "2.5", "NaN", "inf", "<!channel>", "<@U123>", "`", "*",
              "ignore previous instructions", "&amp;", "\u202e", "\x00", "🚀", "'; DROP TABLE leases;--"]
tpu_text = st.one_of(
    st.text(max_size=600),
    st.lists(st.sampled_from(VOCABULARY), max_size=6).map(" ".join),
    st.text(alphabet=string.printable, max_size=80),
)


# --- generated hostile requests, per family -------------------------------------------------
# A fixed seed, ≥ 5,000 cases, the real bolt app behind the real HTTP server. Every family
# counts its cases, 5xx answers, tracebacks in the captured logs, and writes by the requests
# it rejected (a digest of the whole Redis keyspace, the audit stream included, before and after).

SEED = 20261202
LEASE_CHANNEL = "C0LEASED"
BODY_MARKER = "HOSTILEBODYMARKER"
ALL_ACTIONS = [cards.TEARDOWN_CONFIRM_ACTION, cards.TEARDOWN_CANCEL_ACTION, PROPOSAL_CONFIRM_ACTION,
               PROPOSAL_DISMISS_ACTION, ALERT_TEARDOWN_ACTION, ALERT_ACK_ACTION]


class CapturedLogs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if record.exc_info:
            line += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(line)


@contextlib.contextmanager
def captured_logs() -> Iterator[CapturedLogs]:
    """Every log line of this process while the block runs, at INFO, and bolt's at DEBUG (bolt
    logs rejected bodies at INFO: nothing may reach it to log)."""
    logs = CapturedLogs()
    root, bolt = logging.getLogger(), logging.getLogger("slack_bolt")
    saved = root.level, bolt.level
    root.addHandler(logs)
    root.setLevel(logging.INFO)
    bolt.setLevel(logging.DEBUG)
    try:
        yield logs
    finally:
        root.removeHandler(logs)
        root.setLevel(saved[0])
        bolt.setLevel(saved[1])


def state_digest(state: redis_sync.Redis) -> str:
    """As keyspace_digest, without the audit stream (an authorisation denial is audited on purpose)."""
    return hashlib.sha256(repr(sorted(state_snapshot(state).items())).encode()).hexdigest()


class Raw:
    """Signed and unsigned requests as bytes, over one keep-alive connection."""

    def __init__(self, url: str, secret: str, hooks: str) -> None:
        self.url, self.secret, self.hooks = url, secret, hooks
        self.http = httpx.Client(timeout=30)

    def send(self, body: bytes, *, content_type="application/x-www-form-urlencoded", headers=None, signed=True,
             timestamp: str | None = None) -> httpx.Response:
        ts = timestamp if timestamp is not None else str(int(time.time()))
        pairs = [("content-type", content_type)]
        if signed:
            mac = hmac_sig(self.secret, ts, body)
            pairs += [("x-slack-request-timestamp", ts), ("x-slack-signature", mac)]
        pairs += list(headers or [])
        return self.http.post(self.url, content=body, headers=pairs)


def hmac_sig(secret: str, ts: str, body: bytes) -> str:
    import hmac as hmac_
    return "v0=" + hmac_.new(secret.encode(), b"v0:" + ts.encode("latin-1") + b":" + body, hashlib.sha256).hexdigest()


def command(channel: str | None, text: str, user: str, response_url: str, team: str = "T0SANDBOX") -> bytes:
    fields = {"team_id": team, "user_id": user, "command": "/tpu", "text": text, "response_url": response_url,
              "trigger_id": "1.2.x", "api_app_id": "A0TPUBOT"}
    if channel is not None:
        fields["channel_id"] = channel
    return urlencode(fields).encode()


def click(action_id: str, value, user: str, channel: str, response_url: str, team: str = "T0SANDBOX") -> bytes:
    payload = {"type": "block_actions", "user": {"id": user, "team_id": team}, "team": {"id": team},
               "channel": {"id": channel}, "api_app_id": "A0TPUBOT", "response_url": response_url,
               "container": {"type": "message", "channel_id": channel, "message_ts": "1.1"},
               "actions": [{"action_id": action_id, "type": "button", "block_id": "b", "value": value}]}
    return ("payload=" + quote(json.dumps(payload))).encode()


def odd_shape(rng: random.Random, hooks: str) -> tuple[bytes, str]:
    """A signed body whose shape Slack would never send."""
    junk = rng.choice([None, 1, -1, 2.5, "", "x", [], [1], {}, {"id": 5}, True])
    choice = rng.randrange(7)
    if choice == 0:  # interactions other than block_actions, fields missing or of the wrong type
        payload = {"type": rng.choice(["view_submission", "shortcut", "message_action", "view_closed",
                                       "block_suggestion", "interactive_message", "nonsense", junk])}
        for name in ("user", "team", "channel", "view", "message", "callback_id", "trigger_id", "actions", "container"):
            if rng.random() < 0.5:
                payload[name] = rng.choice([junk, {"id": junk}, {"id": "U1"}, [junk]])
        return ("payload=" + quote(json.dumps(payload))).encode(), "application/x-www-form-urlencoded"
    if choice == 1:  # event as a string, list or wrong object
        event = rng.choice(["app_mention", ["app_mention"], junk, {"type": junk}, {"type": "app_mention", "text": junk}])
        envelope = {"type": "event_callback", "team_id": "T0SANDBOX", "event_id": f"Ev{rng.randrange(10**9)}",
                    "event": event}
        return json.dumps(envelope).encode(), "application/json"
    if choice == 2:  # files that are not a list of objects
        event = {"type": "app_mention", "user": "UMALLORY", "text": "<@UTPUBOT> why", "ts": "1.2",
                 "channel": CHANNEL, "files": rng.choice(["f", 1, [1], ["x"], {"id": "F1"}, [None], [[]]])}
        envelope = {"type": "event_callback", "team_id": "T0SANDBOX", "event_id": f"Ev{rng.randrange(10**9)}",
                    "event": event, "authorizations": [{"user_id": "UTPUBOT"}]}
        return json.dumps(envelope).encode(), "application/json"
    if choice == 3:  # a command without channel_id (or user_id)
        body = command(None, rng.choice(["status", "up", "down", ""]), rng.choice(["UMALLORY", ""]), hooks)
        return body, "application/x-www-form-urlencoded"
    if choice == 4:  # JSON that is not an envelope
        return json.dumps(rng.choice([junk, [junk], {"type": junk}, {"type": "url_verification"}])).encode(), \
            "application/json"
    if choice == 5:  # a payload field that is not JSON or not an object
        return ("payload=" + quote(rng.choice(["{", "[]", "1", "null", '"x"', "{}"]))).encode(), \
            "application/x-www-form-urlencoded"
    payload = {"type": "block_actions", "user": rng.choice([junk, {"id": "U1"}]), "actions": rng.choice([junk, [junk]]),
               "team": junk, "channel": junk}
    return ("payload=" + quote(json.dumps(payload))).encode(), "application/x-www-form-urlencoded"


# The fields bolt reads before any listener runs (slack_bolt/request/internals.py build_context,
# listener_matcher/builtins.py, logger/messages.py _build_filtered_body), and our listeners after it.
JUNK = [None, 1, -1, 2.5, "", "x", [], [1], [None], {}, {"id": 5}, {"id": {"a": 1}}, True, [{"a": 1}],
        {"type": None}, [[]], {"team": 5}]
INTERACTION_TYPES = ["block_actions", "block_suggestion", "message_action", "shortcut", "view_submission",
                     "view_closed", "workflow_step_edit", "interactive_message", "dialog_submission", ""]


def valid_interaction(kind: str, hooks: str) -> dict:
    payload = {"type": kind, "user": {"id": "UMALLORY", "team_id": "T0SANDBOX"}, "team": {"id": "T0SANDBOX"},
               "channel": {"id": CHANNEL}, "api_app_id": "A0TPUBOT", "response_url": hooks, "trigger_id": "1.2.x",
               "callback_id": "cb", "container": {"type": "message", "channel_id": CHANNEL, "message_ts": "1.1"},
               "message": {"type": "message", "user": "UTPUBOT", "ts": "1.1", "text": "x"},
               "view": {"id": "V1", "type": "modal", "callback_id": "cb", "state": {"values": {}}}}
    if kind == "block_actions":
        payload["actions"] = [{"action_id": "unknown_action", "block_id": "b", "type": "button", "value": "v"}]
    if kind == "block_suggestion":
        payload.update(action_id="a", block_id="b", value="v")
    return payload


def valid_event() -> dict:
    return {"type": "event_callback", "team_id": "T0SANDBOX", "api_app_id": "A0TPUBOT",
            "event_id": "Ev" + uuid.uuid4().hex[:10], "authorizations": [{"team_id": "T0SANDBOX", "user_id": "UTPUBOT"}],
            "event": {"type": "reaction_added", "user": "UMALLORY", "reaction": "eyes", "event_ts": "1.2",
                      "item": {"type": "message", "channel": CHANNEL, "ts": "1.1"}}}


INTERACTION_PATHS = [("view",), ("actions",), ("team",), ("user",), ("channel",), ("enterprise",), ("message",),
                     ("container",), ("callback_id",), ("action_id",), ("block_id",), ("response_urls",),
                     ("type",), ("user", "id"), ("user", "team_id"), ("team", "id"), ("channel", "id"),
                     ("container", "channel_id"), ("message", "user"), ("view", "callback_id")]
EVENT_PATHS = [("event",), ("team",), ("user",), ("channel",), ("enterprise",), ("authorizations",), ("type",),
               ("event", "type"), ("event", "user"), ("event", "channel"), ("event", "item"), ("event", "message"),
               ("event", "previous_message"), ("event", "subtype"), ("event", "item", "channel"),
               ("authorizations", 0, "team"), ("authorizations", 0, "user"), ("event", "team")]


def with_junk(body: dict, path: tuple, junk) -> dict:
    """`body` (a copy) with the value at `path` replaced by `junk`; missing steps are made."""
    body = json.loads(json.dumps(body))
    target = body
    for step, following in zip(path, path[1:]):
        kind = list if isinstance(following, int) else dict  # what the next step indexes
        if isinstance(target, list):
            while len(target) <= step:
                target.append({})
        if not isinstance(target[step] if isinstance(target, list) else target.get(step), kind):
            target[step] = [{}] if kind is list else {}
        target = target[step]
    target[path[-1]] = junk
    return body


def bolt_field_case(rng: random.Random, hooks: str) -> tuple[bytes, str]:
    """A signed body with one to three of the fields bolt (or a listener) reads set to junk."""
    if rng.random() < 0.6:
        body = valid_interaction(rng.choice(INTERACTION_TYPES), hooks)
        for path in rng.sample(INTERACTION_PATHS, rng.randint(1, 3)):
            body = with_junk(body, path, rng.choice(JUNK))
        if isinstance(body.get("response_url"), str) or "response_url" not in body:
            body["response_url"] = hooks
        return ("payload=" + quote(json.dumps(body))).encode(), "application/x-www-form-urlencoded"
    body = valid_event()
    for path in rng.sample(EVENT_PATHS, rng.randint(1, 3)):
        body = with_junk(body, path, rng.choice(JUNK))
    return json.dumps(body).encode(), "application/json"


def nested(depth: int, opener: str) -> str:
    return '{"a":' * depth + "1" + "}" * depth if opener == "{" else "[" * depth + "]" * depth


def deep_case(rng: random.Random, hooks: str) -> tuple[bytes, str]:
    """A signed body nested deeper than any Slack payload, somewhere bolt or a listener looks."""
    depth = rng.choice([MAX_NESTING + 1, 100, 500, 1_000, 5_000, 20_000])
    deep = nested(depth, rng.choice("[{"))
    if rng.random() < 0.5:
        where = rng.choice(["event", "blocks", "authorizations", "extra"])
        event = '{"type":"app_mention","user":"UMALLORY","channel":"%s","ts":"1.2","text":"hi","blocks":%s}' % (
            CHANNEL, deep if where == "blocks" else "[]")
        envelope = ('{"type":"event_callback","team_id":"T0SANDBOX","event_id":"Ev%d","event":%s,'
                    '"authorizations":%s,"extra":%s}') % (rng.randrange(10**9), deep if where == "event" else event,
                                                         deep if where == "authorizations" else "[]",
                                                         deep if where == "extra" else "0")
        return envelope.encode(), "application/json"
    where = rng.choice(["view", "actions", "state", "message"])
    payload = ('{"type":"block_actions","user":{"id":"UMALLORY"},"team":{"id":"T0SANDBOX"},"channel":{"id":"%s"},'
               '"response_url":"%s","actions":%s,"view":%s,"state":%s,"message":%s}') % (
        CHANNEL, hooks, deep if where == "actions" else '[{"action_id":"unknown_action"}]',
        deep if where == "view" else "{}", deep if where == "state" else "{}", deep if where == "message" else "{}")
    return ("payload=" + quote(payload)).encode(), "application/x-www-form-urlencoded"


ECHO_CHANNEL = "C0ECHO"
# Tokens a person can type that Slack renders: broadcasts, mentions, channels, dates, links. Each
# carries its own label, so the bot's rendering of an id it parsed (`<@U0EVIL>`) is told apart
# from the person's text echoed back.
RENDERED_TOKENS = ["<!here>", "<!channel>", "<!everyone>", "<!here|here>", "<@U0EVIL|eve>", "<#C0EVIL|general>",
                   "<!subteam^S0EVIL|@sre>", "<!date^1700000000^{date}|x>", "<https://evil.example|click>"]


def mrkdwn_texts(reply: dict) -> list[str]:
    """Every string in a reply that Slack renders as mrkdwn (plain_text renders no token)."""
    found = [reply.get("text", "")] if reply.get("mrkdwn", True) else []

    def walk(node) -> None:
        if isinstance(node, dict):
            if node.get("type") == "mrkdwn" and isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(reply.get("blocks", []))
    walk(reply.get("attachments", []))
    return found


def echoed_tokens(reply: dict, sent: list[str]) -> list[str]:
    texts = mrkdwn_texts(reply)
    return [token for token in sent if any(token in text for text in texts)]


@pytest.fixture(scope="module")
def leased(hostile_stack):
    """A lease held by UALICE in LEASE_CHANNEL (no worker: claimed, never provisioned)."""
    stack, client, state = hostile_stack
    reply = client.slash("up us-west4-a 1h", user="UALICE", channel=LEASE_CHANNEL)
    assert reply.status == 200, reply.body
    lease_id = state.hget(f"tpubot:lease:T0SANDBOX:{LEASE_CHANNEL}", "lease_id")
    assert lease_id, reply.body
    return lease_id.decode()


# ~40 s alone; timed out at the default 300 s once on a contended 2-core machine after the 15,000 property cases.
@pytest.mark.timeout(900)
def test_generated_hostile_requests_answer_4xx_or_200_and_rejected_ones_write_nothing(hostile_stack, leased):
    stack, _, state = hostile_stack
    hooks = stack.slack.response_url("actions")
    raw = Raw(f"{stack.web_url}/slack/events", stack.signing_secret, hooks)
    logs = CapturedLogs()
    root, bolt = logging.getLogger(), logging.getLogger("slack_bolt")
    saved = root.level, bolt.level
    root.addHandler(logs)
    root.setLevel(logging.INFO)
    bolt.setLevel(logging.DEBUG)  # bolt logs rejected bodies at INFO: nothing may reach it to log
    rng = random.Random(SEED)
    figures: dict[str, dict[str, int]] = {}
    now = int(time.time())

    def case(family: str, send, *, refused_by_auth: bool = False) -> httpx.Response:
        counts = figures.setdefault(family, {"cases": 0, "5xx": 0, "tracebacks": 0, "rejected": 0, "writes": 0,
                                             "echoes": 0})
        digest = state_digest if refused_by_auth else keyspace_digest
        before, lines = digest(state), len(logs.lines)
        response = send()
        counts["cases"] += 1
        counts["5xx"] += response.status_code >= 500
        text = response.text
        rejected = response.status_code >= 400 or refused_by_auth or ":warning:" in text or ":no_entry:" in text
        if rejected:
            counts["rejected"] += 1
            counts["writes"] += digest(state) != before
        counts["tracebacks"] += any("Traceback" in line for line in logs.lines[lines:]) or "Traceback" in text
        return response

    try:
        for _ in range(700):  # timestamp forms
            ts = rng.choice([f"{now}.5", f"{now}.0", "1e9", f"-{now}", "", "abc", "0x10", f"{now}e0", "1_700_000_000",
                             "v0",  str(now - 301), str(now + 301), "9" * 40, "NaN", "inf", f"{now},{now}",
                             str(rng.randrange(10**12)), "-0", "+" + str(now)])
            case("timestamp forms", lambda ts=ts: raw.send(command(CHANNEL, "status", "UMALLORY", hooks), timestamp=ts))
        for _ in range(500):  # encodings
            junk = bytes(rng.randrange(128, 256) for _ in range(rng.randrange(1, 40)))
            body = rng.choice([b"payload=" + junk, b"text=" + junk + b"&channel_id=C1", junk,
                               b'{"type":"event_callback","event":"' + junk + b'"}', "é".encode("latin-1")])
            ctype = rng.choice(["application/x-www-form-urlencoded", "application/json",
                                "application/x-www-form-urlencoded; charset=latin-1"])
            case("encodings", lambda body=body, ctype=ctype: raw.send(body, content_type=ctype, signed=rng.random() < 0.7))
        for _ in range(500):  # duplicated headers
            body = command(CHANNEL, "status", "UMALLORY", hooks)
            ts = str(int(time.time()))
            good = hmac_sig(stack.signing_secret, ts, body)
            dup = rng.choice([[("x-slack-signature", good)], [("x-slack-request-timestamp", ts)],
                              [("x-slack-signature", "v0=" + "0" * 64)], [("x-slack-request-timestamp", "1")]])
            case("duplicated headers", lambda body=body, ts=ts, dup=dup: raw.send(body, timestamp=ts, headers=dup))
        for _ in range(400):  # oversized headers
            size = rng.choice([100, 1_000, 8_000, 20_000, 70_000])
            extra = rng.choice([[("x-slack-signature", "v0=" + "a" * size)], [("x-slack-request-timestamp", "1" * size)],
                                [("x-junk", "j" * size)], [(f"x-h{i}", "v") for i in range(size // 100)]])
            case("oversized headers", lambda extra=extra: raw.send(command(CHANNEL, "status", "UMALLORY", hooks),
                                                                   signed=rng.random() < 0.5, headers=extra))
        for _ in range(600):  # tampered bodies: signed, then one byte changed
            body = bytearray(rng.choice([command(CHANNEL, "up us-west4-a 1h", "UMALLORY", hooks),
                                         click(cards.TEARDOWN_CONFIRM_ACTION, leased, "UALICE", LEASE_CHANNEL, hooks)]))
            ts = str(int(time.time()))
            mac = hmac_sig(stack.signing_secret, ts, bytes(body))
            body[rng.randrange(len(body))] ^= 1 << rng.randrange(7)
            case("tampered bodies", lambda body=body, ts=ts, mac=mac: raw.http.post(raw.url, content=bytes(body), headers={
                "content-type": "application/x-www-form-urlencoded", "x-slack-request-timestamp": ts,
                "x-slack-signature": mac}))
        for _ in range(900):  # odd payload shapes, signed
            body, ctype = odd_shape(rng, hooks)
            case("odd payload shapes", lambda body=body, ctype=ctype: raw.send(body, content_type=ctype))
        for _ in range(700):  # forged action values, from a channel with no lease
            value = rng.choice([leased, leased + "x", "", "p" + "0" * 16, "../../etc", "1" * 200, "lease:" + leased,
                                json.dumps({"lease_id": leased}), "%00", "\u202e", leased.upper()])
            action = rng.choice(ALL_ACTIONS)
            case("forged action values", lambda action=action, value=value: raw.send(click(action, value, "UMALLORY", CHANNEL, hooks)),
                 refused_by_auth=True)
        for _ in range(300):  # a teardown click from a non-holder
            action = rng.choice([cards.TEARDOWN_CONFIRM_ACTION, ALERT_TEARDOWN_ACTION])
            case("non-holder teardown clicks", lambda action=action: raw.send(
                click(action, leased, rng.choice(["UMALLORY", "UEVE"]), LEASE_CHANNEL, hooks)), refused_by_auth=True)
        for _ in range(300):  # the holder, naming this lease from another channel (or team)
            channel, team = rng.choice([(CHANNEL, "T0SANDBOX"), ("C0OTHER", "T0SANDBOX"), (LEASE_CHANNEL, "T0OTHER")])
            action = rng.choice([cards.TEARDOWN_CONFIRM_ACTION, ALERT_TEARDOWN_ACTION, PROPOSAL_CONFIRM_ACTION])
            case("another channel's lease", lambda action=action, channel=channel, team=team: raw.send(
                click(action, leased, "UALICE", channel, hooks, team)),
                 refused_by_auth=True)
        for _ in range(1_200):  # the fields bolt reads, of the wrong type or null
            body, ctype = bolt_field_case(rng, hooks)
            case("bolt's fields, wrong types", lambda body=body, ctype=ctype: raw.send(body, content_type=ctype))
        for _ in range(300):  # nesting deeper than any Slack payload
            body, ctype = deep_case(rng, hooks)
            response = case("deep nesting", lambda body=body, ctype=ctype: raw.send(body, content_type=ctype))
            assert response.status_code == 400, (len(body), response.status_code, response.text)
        subcommands = sorted({sub.usage.split()[1] for sub in SUBCOMMANDS if len(sub.usage.split()) > 1})
        for _ in range(600):  # /tpu text with tokens Slack would render, echoed back in usage errors and replies
            words = rng.sample(RENDERED_TOKENS, rng.randint(1, 3)) + rng.sample(
                ["2h", "us-west4-a", "set", "5", "clear", "chart", "2026-13", "x", "now"], rng.randint(0, 2))
            rng.shuffle(words)
            text = " ".join([rng.choice(subcommands + ["", "nonsense"]), *words]).strip()
            user = rng.choice(["UMALLORY", "UADMIN"])
            response = case("echoed /tpu text", lambda text=text, user=user: raw.send(
                command(ECHO_CHANNEL, text, user, hooks)))
            if response.status_code == 200:
                echoes = echoed_tokens(response.json(), [w for w in words if w in RENDERED_TOKENS])
                figures["echoed /tpu text"]["echoes"] += bool(echoes)
                assert not echoes, (text, echoes, response.json().get("text", "")[:300])
        for _ in range(300):  # response_url hosts
            url = rng.choice(["https://evil.example/hooks", "http://hooks.slack.com/commands/T/1/x",
                              "https://hooks.slack.com.evil.example/x", "https://evil.example@127.0.0.2/x",
                              "http://169.254.169.254/computeMetadata/v1/", "file:///etc/passwd", "", "hooks.slack.com",
                              "https://hooks.slack.com:99999/x", "http://[::1/x"])
            body = rng.choice([command(CHANNEL, "status", "UMALLORY", url),
                               click(cards.TEARDOWN_CANCEL_ACTION, leased, "UALICE", LEASE_CHANNEL, url)])
            response = case("response_url hosts", lambda body=body: raw.send(body))
            assert response.status_code == 400, (url, response.status_code, response.text)
        for size in (500_000, 1024 * 1024 + 1, 3 * 1024 * 1024):  # bodies over and under the cap, unsigned
            body = ("text=" + BODY_MARKER * (size // len(BODY_MARKER))).encode()
            for signed in (False, False):
                response = case("body sizes", lambda body=body, signed=signed: raw.send(body, signed=signed))
                assert response.status_code == (413 if size > 1024 * 1024 else 401), (size, response.status_code)
    finally:
        root.removeHandler(logs)
        root.setLevel(saved[0])
        bolt.setLevel(saved[1])
        raw.http.close()
    print("\nhostile requests (seed %d):" % SEED)
    print(f"  {'family':<28} {'cases':>6} {'5xx':>4} {'tracebacks':>10} {'rejected':>8} {'writes':>6} {'echoes':>6}")
    for family, counts in figures.items():
        print(f"  {family:<28} {counts['cases']:>6} {counts['5xx']:>4} {counts['tracebacks']:>10} "
              f"{counts['rejected']:>8} {counts['writes']:>6} {counts['echoes']:>6}")
    assert sum(c["cases"] for c in figures.values()) >= 5_000
    bad = {f: c for f, c in figures.items() if c["5xx"] or c["tracebacks"] or c["writes"] or c["echoes"]}
    assert not bad, bad
    assert not any(BODY_MARKER in line for line in logs.lines), "a request body reached the logs"
    # The lease is untouched by every click above.
    assert b"TEARING_DOWN" not in repr(state_snapshot(state)).encode()


def test_view_null_and_deep_nesting_answer_400_with_one_line_and_no_traceback(hostile_stack):
    """The bodies the probe answered with a 500: `view: null` (bolt's unhandled-request logger calls
    view.get on it) and an event nested 1,000 and 5,000 levels deep (Python's json recursed)."""
    stack, _, state = hostile_stack
    hooks = stack.slack.response_url("actions")
    raw = Raw(f"{stack.web_url}/slack/events", stack.signing_secret, hooks)
    bodies = [(("payload=" + quote(json.dumps({"type": kind, "view": None, "user": {"id": "UMALLORY"},
                                                "team": {"id": "T0SANDBOX"}}))).encode(), "application/x-www-form-urlencoded")
              for kind in ("block_suggestion", "message_action", "workflow_step_edit", "")]
    for depth in (1_000, 5_000):
        bodies.append((('{"type":"event_callback","team_id":"T0SANDBOX","event_id":"EvDeep%d","event":%s}'
                        % (depth, nested(depth, "{"))).encode(), "application/json"))
        bodies.append((("payload=" + quote('{"type":"block_actions","user":{"id":"UMALLORY"},"actions":%s}'
                                           % nested(depth, "["))).encode(), "application/x-www-form-urlencoded"))
    with captured_logs() as logs, contextlib.closing(raw.http):
        for body, ctype in bodies:
            before, seen = keyspace_digest(state), len(logs.lines)
            response = raw.send(body, content_type=ctype)
            ours = [line for line in logs.lines[seen:] if not line.startswith("HTTP Request:")]  # the test's client
            assert response.status_code == 400, (body[:80], response.status_code, response.text)
            assert response.json()["error"] in ("malformed view", f"malformed nesting (deeper than {MAX_NESTING} levels)")
            assert len(ours) == 1 and ours[0].startswith("refused a signed Slack request"), ours
            assert "Traceback" not in ours[0] and "Traceback" not in response.text
            assert keyspace_digest(state) == before
        # The deepest shapes Slack sends still pass: a rich_text list and a quote (built with slack_sdk's
        # models) in an edited message's blocks, inside an attachment.
        from slack_sdk.models.blocks import (RichTextBlock, RichTextElementParts, RichTextListElement,
                                             RichTextQuoteElement, RichTextSectionElement)
        rich = RichTextBlock(elements=[
            RichTextListElement(style="bullet", indent=1, elements=[RichTextSectionElement(elements=[
                RichTextElementParts.Text(text="step", style={"bold": True})])]),
            RichTextQuoteElement(elements=[RichTextElementParts.Text(text="quoted", style={"italic": True})])]).to_dict()
        message = {"type": "message", "user": "UMALLORY", "ts": "1.1", "text": "x", "blocks": [rich],
                   "attachments": [{"id": 1, "blocks": [rich]}]}
        envelope = {"type": "event_callback", "team_id": "T0SANDBOX", "event_id": "EvRich1",
                    "event": {"type": "message", "subtype": "message_changed", "channel": CHANNEL, "ts": "1.2",
                              "message": message, "previous_message": message}}
        response = raw.send(json.dumps(envelope).encode(), content_type="application/json")
        assert response.status_code == 200, response.text


def test_a_dismiss_click_from_another_channel_or_team_leaves_the_proposal(hostile_stack):
    stack, client, state = hostile_stack
    key = "tpubot:proposal:p00000000dismiss"
    record = {"id": "p00000000dismiss", "action": "provision", "args": {"zone": "us-west4-a"}, "team": "T0SANDBOX",
              "channel": CHANNEL, "proposed_for": "UALICE", "lease_id": "", "created_at": time.time(),
              "label": "Provision"}
    state.set(key, json.dumps(record), ex=600)
    audit_before = state.xlen("tpubot:audit")
    for channel, team in (("C0OTHER", "T0SANDBOX"), (CHANNEL, "T0OTHER")):
        other = stack.signed_requests(team=team)
        try:
            reply = other.click(action_id=PROPOSAL_DISMISS_ACTION, value=record["id"], user="UMALLORY", channel=channel)
        finally:
            other.close()
        assert reply.status == 200, reply.body
        assert state.exists(key), (channel, team)
    assert state.xlen("tpubot:audit") == audit_before
    reply = client.click(action_id=PROPOSAL_DISMISS_ACTION, value=record["id"], user="UMALLORY", channel=CHANNEL)
    assert reply.status == 200 and not state.exists(key)


def test_unsigned_bodies_over_and_under_the_cap_are_refused_and_never_logged(hostile_stack):
    stack, _, _ = hostile_stack
    logs = CapturedLogs()
    root, bolt = logging.getLogger(), logging.getLogger("slack_bolt")
    saved = root.level, bolt.level
    root.addHandler(logs)
    root.setLevel(logging.INFO)
    bolt.setLevel(logging.DEBUG)  # as a deployment at INFO would have it, and lower
    try:
        with httpx.Client(timeout=30) as http:
            for size, status in ((500_000, 401), (2 * 1024 * 1024, 413)):
                body = ("text=" + BODY_MARKER * (size // len(BODY_MARKER))).encode()
                response = http.post(f"{stack.web_url}/slack/events", content=body,
                                     headers={"content-type": "application/x-www-form-urlencoded",
                                              "x-slack-request-timestamp": str(int(time.time())),
                                              "x-slack-signature": "v0=" + "0" * 64})
                assert response.status_code == status, (size, response.status_code)
    finally:
        root.removeHandler(logs)
        root.setLevel(saved[0])
        bolt.setLevel(saved[1])
    assert not any(BODY_MARKER in line for line in logs.lines)


# --- property tests (after the generated suite: its keyspace digest is cheaper on a database they have
# not filled yet; pytest-xdist's --dist loadfile, in addopts, runs this whole file on one worker, in order)

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


# The web's reason when a mention's queueing outlasted the ack budget (handlers/late_answers.py): it
# answers 500 so that Slack sends the event again, which on a busy machine is the design, not the text's fault.
ACK_BUDGET_RAN_OUT = "TimeoutError: the answer was not queued within the ack budget"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def retry_reasons() -> Iterator[list[str]]:
    """The lines the web logs when it leaves a request for Slack to retry."""
    handler, logger = _Lines(), logging.getLogger("handlers.slack_app")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(min(logger.getEffectiveLevel(), logging.WARNING))
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def mention_as_slack_sends_it(client, retry_reasons: list[str], text: str, user: str):
    """A mention, sent again as Slack does (the same event, `x-slack-retry-num`, three retries at most)
    while the web answers 500 because the ack budget ran out; any other answer is the one returned."""
    ts, event_id = f"{time.time():.6f}", f"Ev{uuid.uuid4().hex[:12].upper()}"
    for retry_num in range(4):
        seen = len(retry_reasons)
        reply = client.mention(text, user=user, channel=CHANNEL, ts=ts, event_id=event_id, retry_num=retry_num or None)
        if reply.status != 500 or not any(ACK_BUDGET_RAN_OUT in line for line in retry_reasons[seen:]):
            break
    return reply


@PROPERTY
@given(text=mention_text, user=st.sampled_from(["UMALLORY", "UEVE", ""]))
def test_mention_text_never_errors_and_creates_no_lease(hostile_stack, retry_reasons, text, user):
    stack, client, state = hostile_stack
    leases_before = sorted(state.keys("tpubot:lease:*"))
    reply = mention_as_slack_sends_it(client, retry_reasons, "<@UTPUBOT> " + text, user or "UNOBODY")
    assert reply.status == 200, (text[:200], reply.status, reply.body[:200])
    assert "Traceback" not in reply.body
    # A mention only ever proposes; with no worker nothing runs, and nothing may claim a lease.
    assert sorted(state.keys("tpubot:lease:*")) == leases_before

