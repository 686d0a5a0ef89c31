"""Alert webhooks (issue 32) through the real web app (in process: tests/in_process_bot.py) and the
real worker: each vendor's
payload, authenticated as that vendor does it, opens a thread in the routed channel of the
sandbox Slack with a digest of the sandbox Cloud Logging entries; a repeat edits it; a resolve
closes it; bad credentials are a 401 that writes nothing; a replay queues nothing; a storm
opens at most ALERT_STORM_THREADS threads and counts the rest.

Payload shapes follow the vendors' published ones (tests/alert_payloads.py names each source)."""

from __future__ import annotations

import base64
import json
import time
from datetime import datetime, timezone

import pytest
import redis as redis_sync

from alert_payloads import (AM_TOKEN, CH_ALL, CH_API, CH_TPU, CM_TOKEN, PD_SECRET, ROUTES, alert_bot, alertmanager,
                            answered, basic, cloud_monitoring, iso, keyspace_digest, pagerduty, pd_signature, roots,
                            send_am, send_cm, send_pd, thread, web_only_bot)
from infra.sandbox.vllm import LatencyModel, VllmEmulator

__all__ = ["alert_bot", "web_only_bot"]  # fixtures


@pytest.mark.parametrize("source", ["alertmanager", "cloud-monitoring", "pagerduty"])
def test_an_alert_opens_a_thread_with_the_log_digest_a_repeat_edits_it_and_a_resolve_closes_it(alert_bot, source):
    bot, http, _ = alert_bot
    slack = bot.slack
    if source == "alertmanager":
        send, first, repeat, resolve, channel = (send_am, alertmanager(), alertmanager(severity="critical", extra="1"),
                                                 alertmanager(status="resolved"), CH_TPU)
    elif source == "cloud-monitoring":
        first, resolve = cloud_monitoring(), cloud_monitoring(state="closed")
        repeat = {**first, "incident": {**first["incident"], "observed_value": "0.01"}}
        send, channel = send_cm, CH_TPU
    else:
        send, channel = send_pd, CH_API
        first, repeat = pagerduty(), pagerduty(event_id="ev-2", event_type="incident.escalated")
        resolve = pagerduty(event_id="ev-3", event_type="incident.resolved")

    response = send(http, first)
    assert response.status_code == 202, response.text
    assert response.json()["channel"] == channel
    [root] = bot.until(lambda: roots(slack, channel), what="the incident's thread opened")
    assert ":rotating_light: *FIRING*" in root.text and source in root.text
    answer = bot.until(lambda: answered(slack, channel, root.ts), timeout=60, what="the investigation's answer")
    if source == "pagerduty":
        # A PagerDuty incident names no resource: the channel's own TPU is read, and it holds none.
        assert "No logs were read: This channel holds no TPU" in answer.text
    else:
        # The sandbox Cloud Logging's TPU node was read for the alert's window and digested.
        assert "from the alert's resource tpu_worker node_id=tpubot-v5e zone=us-west4-a" in answer.text
        assert "*Log summary*" in answer.text and "error line" in answer.text
        query = bot.logging_emulator.requests[-1]["filter"]
        assert 'resource.type="tpu_worker"' in query and 'resource.labels.node_id="tpubot-v5e"' in query
    assert any(m.blocks and "Bring the model up" in json.dumps(m.blocks) for m in thread(slack, channel, root.ts))

    assert send(http, repeat).status_code == 202
    # Alertmanager and Cloud Monitoring send a firing incident again; PagerDuty reports what changed.
    again = ":arrow_double_up: Escalated" if source == "pagerduty" else f"Still firing: {source} sent it again 1 time"
    bot.until(lambda: again in roots(slack, channel)[0].text, what="the repeat edited the first message")
    assert len(roots(slack, channel)) == 1

    assert send(http, resolve).status_code == 202
    bot.until(lambda: roots(slack, channel)[0].text.startswith(":white_check_mark: *RESOLVED*"),
              what="the resolve edited the first message")
    bot.until(lambda: any("Resolved at" in m.text for m in thread(slack, channel, root.ts)), what="resolved in the thread")
    assert len(roots(slack, channel)) == 1
    # Only the routed channel heard of it.
    others = {CH_TPU, CH_API, CH_ALL} - {channel}
    assert all(not slack.channel_messages(other) for other in others)


def test_a_critical_alert_pages_the_channels_oncall_and_a_warning_does_not(alert_bot):
    bot, http, state = alert_bot
    slack = bot.slack
    state.set(f"tpubot:oncall:T0SANDBOX:{CH_TPU}", json.dumps(["<!subteam^S0SRE>"]))
    assert send_am(http, alertmanager()).status_code == 202
    assert send_cm(http, cloud_monitoring(incident_id="0.warn")).status_code == 202
    bot.until(lambda: len(roots(slack, CH_TPU)) == 2, what="both threads opened")
    critical = next(m for m in roots(slack, CH_TPU) if "alertmanager" in m.text)
    warning = next(m for m in roots(slack, CH_TPU) if "cloud-monitoring" in m.text)
    assert "Paging <!subteam^S0SRE>" in critical.text
    assert "Paging" not in warning.text


BAD_AUTH = [
    ("alertmanager", "no credentials", lambda body: {}),
    ("alertmanager", "wrong bearer", lambda body: {"authorization": "Bearer wrong-token"}),
    ("alertmanager", "token as basic user", lambda body: {
        "authorization": "Basic " + base64.b64encode(f"{AM_TOKEN}:".encode()).decode()}),
    ("alertmanager", "two authorization headers", lambda body: [("authorization", f"Bearer {AM_TOKEN}"),
                                                                ("authorization", "Bearer other")]),
    ("cloud-monitoring", "no token", lambda body: {}),
    ("cloud-monitoring", "bearer is not how it sends", lambda body: {"authorization": f"Bearer {CM_TOKEN}"}),
    ("cloud-monitoring", "wrong basic password", lambda body: {
        "authorization": "Basic " + base64.b64encode(b"google:nope").decode()}),
    ("pagerduty", "unsigned", lambda body: {}),
    ("pagerduty", "signed with another secret", lambda body: {"x-pagerduty-signature": pd_signature(body, "nope")}),
    ("pagerduty", "signature of another body", lambda body: {"x-pagerduty-signature": pd_signature(body + b" ", PD_SECRET)}),
    ("pagerduty", "v0 scheme", lambda body: {"x-pagerduty-signature": pd_signature(body, PD_SECRET).replace("v1=", "v0=")}),
    ("pagerduty", "two signature headers", lambda body: [("x-pagerduty-signature", pd_signature(body, PD_SECRET)),
                                                         ("x-pagerduty-signature", pd_signature(body, "nope"))]),
]
PAYLOADS = {"alertmanager": alertmanager, "cloud-monitoring": cloud_monitoring, "pagerduty": pagerduty}


def test_bad_credentials_are_401_and_write_nothing(web_only_bot, caplog):
    bot, http, state = web_only_bot
    before = keyspace_digest(state)
    for source, why, headers in BAD_AUTH:
        body = json.dumps(PAYLOADS[source]()).encode()
        extra = headers(body)
        pairs = [("content-type", "application/json"), *(extra.items() if isinstance(extra, dict) else extra)]
        params = {"auth_token": "wrong"} if source == "cloud-monitoring" and why == "no token" else {}
        response = http.post(f"/alerts/{source}", content=body, headers=pairs, params=params)
        assert response.status_code == 401, (source, why, response.text)
        # A challenge: Cloud Monitoring's basic-auth channel sends its credentials only after one.
        assert response.headers["www-authenticate"].startswith("Basic realm="), (source, why)
    assert keyspace_digest(state) == before
    assert bot.slack.calls_to("chat.postMessage") == []
    assert "TPUHBMOOM" not in caplog.text and "A little bump" not in caplog.text  # no body in the logs


def test_malformed_payloads_are_400_naming_the_field_and_write_nothing(web_only_bot):
    bot, http, state = web_only_bot
    before = keyspace_digest(state)
    wrong_version = {**alertmanager(), "version": "3"}
    no_alerts = {**alertmanager(), "alerts": []}
    cases = [
        ("alertmanager", send_am, wrong_version, "version"),
        ("alertmanager", send_am, no_alerts, "alerts"),
        ("cloud-monitoring", send_cm, {"version": "1.2", "incident": {"state": "open"}}, "incident.incident_id"),
        ("pagerduty", send_pd, {"event": {"id": "e", "event_type": "incident.triggered", "occurred_at": "now"}},
         "event.occurred_at"),
    ]
    for source, send, payload, field in cases:
        response = send(http, payload)
        assert response.status_code == 400, (source, response.text)
        assert field in response.json()["error"]
    response = http.post("/alerts/alertmanager", content=b"\xff not json",
                         headers={"authorization": f"Bearer {AM_TOKEN}"})
    assert response.status_code == 400 and "not JSON" in response.json()["error"]
    assert keyspace_digest(state) == before


def test_a_replayed_delivery_queues_nothing(alert_bot):
    bot, http, _ = alert_bot
    slack = bot.slack
    payload = pagerduty(event_id="replayed-event")
    assert send_pd(http, payload).status_code == 202
    replay = send_pd(http, payload)
    assert replay.status_code == 200 and replay.json()["duplicate"] is True
    am = alertmanager(group_key="replayed-group")
    assert send_am(http, am).status_code == 202
    assert send_am(http, am).json() == {"duplicate": True, "delivery": send_am(http, am).json()["delivery"]}
    cm = cloud_monitoring("0.replayed")
    assert send_cm(http, cm).status_code == 202
    assert send_cm(http, cm).json()["duplicate"] is True  # within 10 minutes: Cloud Monitoring's retry
    bot.until(lambda: len(roots(slack, CH_API)) == 1 and len(roots(slack, CH_TPU)) == 2, what="one thread each")
    [pd_root] = roots(slack, CH_API)
    bot.until(lambda: answered(slack, CH_API, pd_root.ts), timeout=60, what="the PagerDuty answer")
    assert "sent it again" not in roots(slack, CH_API)[0].text


def test_a_ping_is_acknowledged_an_unrouted_alert_posts_nothing_and_a_big_body_is_413(make_bot):
    bot = make_bot(alert_routes=f"team=nobody:{CH_TPU}", pagerduty_webhook_secret=PD_SECRET,
                       alert_max_body_bytes=4096)
    with bot.http() as http:
        ping = {"event": {"id": "p1", "event_type": "pagey.ping", "resource_type": "pagey", "occurred_at": iso(
            datetime.now(timezone.utc)), "data": {"message": "Hello from your friend Pagey!", "type": "ping"}}}
        assert send_pd(http, ping).status_code == 200
        unrouted = send_pd(http, pagerduty())
        assert unrouted.status_code == 200 and unrouted.json()["routed"] is False
        # A body over ALERT_MAX_BODY_BYTES is refused before it is read whole, let alone parsed.
        big = {**pagerduty(), "padding": "x" * 5000}
        assert send_pd(http, big).status_code == 413
        # A source whose secret is unset is off, and says which variable turns it on.
        off = send_am(http, alertmanager())
        assert off.status_code == 404 and "ALERTMANAGER_WEBHOOK_TOKEN" in off.json()["error"]
    assert bot.slack.calls_to("chat.postMessage") == []


def test_an_alert_storm_opens_at_most_the_configured_threads_and_counts_the_rest(alert_bot):
    bot, http, _ = alert_bot
    slack = bot.slack
    storm = 500
    started = time.monotonic()
    for n in range(storm):
        payload = cloud_monitoring(incident_id=f"storm-{n}")
        assert send_cm(http, payload).status_code == 202
    sent_in = time.monotonic() - started
    storm_text = f"{storm - 3:,} more new alerts"
    bot.until(lambda: any(storm_text in m.text for m in roots(slack, CH_TPU)), timeout=120,
              what="the storm message counting every folded alert")
    settled_in = time.monotonic() - started
    threads = [m for m in roots(slack, CH_TPU) if ":rotating_light:" in m.text]
    storm_messages = [m for m in roots(slack, CH_TPU) if "Alert storm" in m.text]
    assert len(threads) == 3 and len(storm_messages) == 1, [m.text[:60] for m in roots(slack, CH_TPU)]
    print(f"storm: {storm} alerts sent in {sent_in:.1f}s; 3 threads and 1 storm message ({storm_text}) "
          f"{settled_in:.1f}s after the first")


def test_every_documented_credential_form_is_accepted(alert_bot):
    bot, http, _ = alert_bot
    forms = [
        ("alertmanager", {"authorization": basic(AM_TOKEN)}, {}),
        ("alertmanager", {}, {"token": AM_TOKEN}),
        ("cloud-monitoring", {"authorization": basic(CM_TOKEN, "google")}, {}),
    ]
    for n, (source, headers, params) in enumerate(forms):
        payload = alertmanager(group_key=f"group-{n}") if source == "alertmanager" else cloud_monitoring(f"0.form{n}")
        response = http.post(f"/alerts/{source}", content=json.dumps(payload).encode(), params=params,
                             headers={"content-type": "application/json", **headers})
        assert response.status_code == 202, (source, headers, params, response.text)
    bot.until(lambda: len(roots(bot.slack, CH_TPU)) == 3, what="a thread per accepted alert")


def test_with_a_model_the_alert_is_answered_by_it_from_the_logs_and_the_alert(make_bot):
    with VllmEmulator(latency=LatencyModel.instant()) as emu:
        emu.push_turns("HBM ran out on the serving TPU; the first error is at L3.")
        bot = make_bot(alert_routes=ROUTES, alertmanager_webhook_token=AM_TOKEN, gemma_base_url=emu.base_url)
        with bot.http() as http:
            assert send_am(http, alertmanager()).status_code == 202
        [root] = bot.until(lambda: roots(bot.slack, CH_TPU), what="the thread opened")
        answer = bot.until(lambda: next((m for m in thread(bot.slack, CH_TPU, root.ts)
                                          if "_Answered by" in m.text), None), timeout=60, what="the model's answer")
        assert "HBM ran out on the serving TPU" in answer.text and "Cloud Logging entries" in answer.text
        prompt = json.dumps(emu.requests[0]["messages"])
        # The digest of the node's logs, and the alert as quoted data (never as the request), reached the model.
        assert "log digest; L1-L" in prompt and "Cloud Logging" in prompt and "DEADLINE_EXCEEDED" in prompt
        request, _, data = prompt.partition("<<<DATA earlier messages in this thread")
        assert "TPUHBMOOM" not in request and "summary: HBM out of memory on the serving TPU" in data
        assert emu.pending_turns == 0


def open_and_answer(bot, http, incident_id: str):
    """A Cloud Monitoring incident on the sandbox TPU node, opened and answered; its first message."""
    known = {m.ts for m in roots(bot.slack, CH_TPU)}
    assert send_cm(http, cloud_monitoring(incident_id)).status_code == 202
    root = bot.until(lambda: next((m for m in roots(bot.slack, CH_TPU) if m.ts not in known), None),
                     what=f"incident {incident_id}'s thread")
    bot.until(lambda: answered(bot.slack, CH_TPU, root.ts), timeout=60, what=f"incident {incident_id}'s answer")
    return root


def seen_before(slack, root):
    return [m for m in thread(slack, CH_TPU, root.ts) if "Seen before" in m.text]


def test_a_second_incident_with_the_same_top_templates_cites_the_resolved_first(alert_bot):
    bot, http, _ = alert_bot
    first = open_and_answer(bot, http, "0.first")
    assert seen_before(bot.slack, first) == []  # nothing had ended before it
    still_open = open_and_answer(bot, http, "0.overlapping")
    assert seen_before(bot.slack, still_open) == []  # the first had not ended yet
    assert send_cm(http, cloud_monitoring("0.first", state="closed")).status_code == 202
    bot.until(lambda: any("Resolved at" in m.text for m in thread(bot.slack, CH_TPU, first.ts)), what="resolved")
    second = open_and_answer(bot, http, "0.second")
    [note] = bot.until(lambda: seen_before(bot.slack, second), what="the citation of the first incident")
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert f"Seen before on {today} in <#{CH_TPU}>" in note.text
    assert f"https://slack.com/archives/{CH_TPU}/p{first.ts.replace('.', '')}" in note.text
    assert "3 of the top log templates match" in note.text


def test_a_fix_written_in_the_thread_is_cited_the_next_time(alert_bot):
    bot, http, _ = alert_bot
    first = open_and_answer(bot, http, "0.fixed")
    fix = "Fixed by raising the HBM limit to 16 GiB"
    ts = bot.slack.add_message(CH_TPU, fix, user="U0ALICE", thread_ts=first.ts)
    assert bot.signed_requests().event({"type": "message", "user": "U0ALICE", "text": fix, "ts": ts,
                                          "thread_ts": first.ts, "channel": CH_TPU, "team": "T0SANDBOX"}).status == 200
    bot.until(lambda: any("Noted" in m.text for m in thread(bot.slack, CH_TPU, first.ts)), what="the fix noted")
    second = open_and_answer(bot, http, "0.again")
    [note] = bot.until(lambda: seen_before(bot.slack, second), what="the citation with its fix")
    assert f"<#{CH_TPU}>, Fixed by raising the HBM limit to 16 GiB" in note.text


def test_a_useful_answer_ends_the_incident_for_the_next_time(alert_bot):
    from handlers.feedback_buttons import ASK_TEXT, FEEDBACK_UP_ACTION

    bot, http, _ = alert_bot
    first = open_and_answer(bot, http, "0.rated")
    buttons = bot.until(lambda: next((m for m in thread(bot.slack, CH_TPU, first.ts) if m.text == ASK_TEXT), None),
                        what="the feedback buttons")
    answer_id = buttons.blocks[0]["elements"][0]["value"]
    assert bot.signed_requests().click(action_id=FEEDBACK_UP_ACTION, value=answer_id, user="U0ALICE", channel=CH_TPU,
                                         message_ts=buttons.ts, is_ephemeral=False).status == 200
    second = open_and_answer(bot, http, "0.after-rating")
    bot.until(lambda: seen_before(bot.slack, second), what="the citation of the rated incident")


def test_authenticated_hostile_bodies_never_get_a_5xx_and_a_refused_one_writes_nothing(make_bot, caplog):
    """1,500 generated bodies, each correctly authenticated: vendor shapes with fields dropped,
    retyped or replaced by junk, deep nesting, huge numbers. Every answer is 200, 202 or 400; a 400
    changes nothing in Redis; no traceback is logged. (No worker: nothing here should need one.)"""
    import random

    bot = make_bot(run_worker=False, alert_routes=ROUTES, alertmanager_webhook_token=AM_TOKEN,
                       cloud_monitoring_token=CM_TOKEN, pagerduty_webhook_secret=PD_SECRET)
    rng = random.Random(20261203)
    junk = [None, True, 0, -1, 10**30, 1.5e308, "", "x" * 300, [], [1, "a"], {}, {"a": {"b": None}}, "\u202e", "\x00"]

    def mutate(value, depth=0):
        if isinstance(value, dict) and value and depth < 4:
            value = dict(value)
            key = rng.choice(list(value))
            roll = rng.random()
            if roll < 0.3:
                del value[key]
            elif roll < 0.7:
                value[key] = rng.choice(junk)
            else:
                value[key] = mutate(value[key], depth + 1)
            return value
        if isinstance(value, list) and value and depth < 4:
            return [mutate(value[0], depth + 1)] + value[1:]
        return rng.choice(junk)

    state = redis_sync.Redis.from_url(bot.settings.redis_url)
    counts: dict[int, int] = {}
    with bot.http() as http:
        for _ in range(1_500):
            source = rng.choice(list(PAYLOADS))
            if rng.random() < 0.05:
                body = ("[" * 5_000 + "]" * 5_000).encode()
            else:
                body = json.dumps(mutate(PAYLOADS[source]())).encode()
            before = keyspace_digest(state)
            headers = {"content-type": "application/json"}
            params = {}
            if source == "alertmanager":
                headers["authorization"] = f"Bearer {AM_TOKEN}"
            elif source == "cloud-monitoring":
                params["auth_token"] = CM_TOKEN
            else:
                headers["x-pagerduty-signature"] = pd_signature(body, PD_SECRET)
            response = http.post(f"/alerts/{source}", content=body, headers=headers, params=params)
            counts[response.status_code] = counts.get(response.status_code, 0) + 1
            assert response.status_code in (200, 202, 400), (source, body[:300], response.text)
            if response.status_code == 400:
                assert keyspace_digest(state) == before, (source, body[:300])
    state.close()
    assert "Traceback" not in caplog.text
    assert counts.get(400, 0) > 500 and counts.get(202, 0) > 50, counts


def test_without_routes_every_source_is_off_and_says_which_variable_turns_it_on(make_bot):
    bot = make_bot(run_worker=False, alertmanager_webhook_token=AM_TOKEN)
    with bot.http() as http:
        off = send_am(http, alertmanager())
    assert off.status_code == 404 and "set ALERT_ROUTES" in off.json()["error"]
