"""Alerts as the real senders send them (issue 42), through the real web app over HTTP and the
real worker: each source's own test or ping is a 2xx and a log line; a 1,200-pod Alertmanager
group is taken whole and counted in its thread; a storm folds per route and severity and never
folds a page; PagerDuty's acknowledgements, priority and urgency changes, escalations and
reassignments show on the thread's first message with who made them, whatever order the worker
runs them in; a byte-identical Alertmanager repeat after its group interval shows still firing,
counted, while a retry inside it is a no-op.

Every payload is shaped by its sender's own sources, named in tests/alert_payloads.py."""

from __future__ import annotations

import asyncio
import json
import logging
import tracemalloc
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from alert_payloads import (CH_ALL, CH_API, CH_TPU, CM_TOKEN, MAX_GROUP_BYTES, ORDER, PAGEY_PING, SENDERS, TEAM,
                            alertmanager_group, basic, clients, cloud_monitoring, cloud_monitoring_test_connection,
                            crash_loop_alert, crash_loop_chunks, crash_loop_group, crash_loop_head, go_json, hbm_alert,
                            keyspace_digest, pagerduty, parse_alertmanager, partial_alertmanager_post, roots, send_am,
                            send_cm, send_pd, thread, user, web_only_stack)
from handlers.alertmanager_payload import LISTED_ALERTS, AlertmanagerReader
from handlers.incident_payloads import AlertEvent
from handlers.incident_text import NAMED_IN_ROOT, alert_context
from infra.state import keys
from waiting import wait_until

__all__ = ["web_only_stack"]  # a fixture

@pytest.fixture
def senders(make_stack):
    with clients(make_stack(alertmanager_group_interval="2s", **SENDERS)) as parts:
        yield parts


def root_of(slack, channel: str, contains: str):
    return next((m for m in roots(slack, channel) if contains in m.text), None)


def clock(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def test_each_sources_test_or_ping_is_a_2xx_and_a_log_line_and_opens_nothing(web_only_stack, caplog):
    stack, http, state = web_only_stack
    caplog.set_level(logging.INFO, logger="bot.alert_webhooks")
    before = keyspace_digest(state)

    # Cloud Monitoring's basic-auth channel: first without credentials, then with them once challenged.
    body = json.dumps(cloud_monitoring_test_connection()).encode()
    unchallenged = http.post("/alerts/cloud-monitoring", content=body, headers={"content-type": "application/json"})
    assert unchallenged.status_code == 401 and unchallenged.headers["www-authenticate"].startswith("Basic ")
    test = http.post("/alerts/cloud-monitoring", content=body,
                     headers={"content-type": "application/json", "authorization": basic(CM_TOKEN, "google")})
    assert test.status_code == 200, test.text
    # The token channel's "Test connection" (the old answer was 400: "version: Input should be '1.2'").
    assert send_cm(http, cloud_monitoring_test_connection()).status_code == 200
    ping = send_pd(http, PAGEY_PING)
    assert ping.status_code == 200, ping.text

    assert "a Cloud Monitoring test notification (the channel's Test connection) reached /alerts/cloud-monitoring: " \
           "answered 200, nothing posted" in caplog.text
    assert "a PagerDuty ping (pagey.ping: the subscription's test event) reached /alerts/pagerduty" in caplog.text
    assert "Test Incident" not in caplog.text and "Hello from your friend" not in caplog.text  # no body logged
    assert keyspace_digest(state) == before
    assert stack.slack.calls_to("chat.postMessage") == []


def test_a_1200_pod_group_is_taken_whole_and_its_thread_says_what_it_holds(senders):
    stack, http, _ = senders
    group = crash_loop_group(1200)
    # Larger than the cap that bounds the other sources' bodies: a 413 here would be lost for good
    # (Alertmanager retries only a 5xx).
    assert len(group) > stack.settings.alert_max_body_bytes
    response = send_am(http, group)
    assert response.status_code == 202, response.text
    root = wait_until(lambda: root_of(stack.slack, CH_TPU, "KubePodCrashLooping"), what="the group's thread")
    assert "· 1,200 alerts" in root.text
    assert "1,200 alerts in this group: 1,200 firing." in root.text
    assert "pod=trainer-000-00000-7d9f8b6c5-x0lqz" in root.text  # the first alert, by what sets it apart
    assert f"… and {1200 - NAMED_IN_ROOT:,} more (the first {NAMED_IN_ROOT} are named; every alert is counted above)." \
        in root.text

    # The operator then sets max_alerts: 500 on the receiver; the next notification holds back 700.
    assert send_am(http, crash_loop_group(500, truncated=700)).status_code == 202
    held = ("1,200 alerts in this group: 500 firing; 700 more held back by the receiver's max_alerts "
            "(Alertmanager's truncatedAlerts): counted, never sent.")
    wait_until(lambda: held in roots(stack.slack, CH_TPU)[0].text, what="the thread counting what max_alerts held back")

    # Then some pods recover: Alertmanager sends them resolved, in the same group.
    partly = json.loads(crash_loop_group(30))
    for alert in partly["alerts"][:10]:
        alert.update(status="resolved", endsAt="2026-12-01T21:30:00Z")
    assert send_am(http, partly).status_code == 202
    wait_until(lambda: "30 alerts in this group: 20 firing, 10 resolved." in roots(stack.slack, CH_TPU)[0].text,
               what="the group's firing and resolved alerts counted")
    assert "(resolved)" in roots(stack.slack, CH_TPU)[0].text  # a named alert that resolved says so
    assert len(roots(stack.slack, CH_TPU)) == 1


def traced_read(chunks: Iterator[bytes]) -> tuple[AlertEvent, int, int]:
    """(the event, bytes fed, peak bytes traced) for a body fed as it would arrive."""
    sent = 0
    tracemalloc.start()
    try:
        reader = AlertmanagerReader(ORDER, max_bytes=MAX_GROUP_BYTES)
        for chunk in chunks:
            sent += len(chunk)
            reader.feed(chunk)
        event = reader.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return event, sent, peak


def read_group(count: int) -> tuple[int, int, int]:
    """(alerts counted, bytes fed, peak bytes traced) for a group fed as it would arrive."""
    event, sent, peak = traced_read(crash_loop_chunks(count))
    assert event.firing_count == count and len(event.listed) == LISTED_ALERTS
    return event.alert_count, sent, peak


def test_a_group_is_read_in_memory_that_does_not_grow_with_it():
    """What is held is the chunk at hand and the first LISTED_ALERTS alerts, not the group: four
    times the alerts, about the same peak."""
    small, large = read_group(1500), read_group(6000)
    for count, sent, peak in (small, large):
        print(f"group of {count:,} alerts: {sent / 1e6:.1f} MB read, peak {peak / 1e6:.2f} MB traced")
    assert large[0] == 6000
    assert large[2] < small[2] * 1.5, (small, large)
    assert large[2] < large[1] / 4, large


def test_a_critical_alert_during_a_storm_on_another_route_gets_its_own_thread_and_its_page(senders):
    stack, http, state = senders
    slack = stack.slack
    state.set(keys.oncall(TEAM, CH_TPU), json.dumps(["<!subteam^S0TPU>"]))
    state.set(keys.oncall(TEAM, CH_ALL), json.dumps(["<!subteam^S0SRE>"]))
    for n in range(12):  # a warning storm on the catch-all route
        assert send_cm(http, cloud_monitoring(f"0.storm-{n}", team="web")).status_code == 202
    storm = wait_until(lambda: root_of(slack, CH_ALL, "9 more new alerts"), what="the storm message")
    assert "*Alert storm on route `*`*, severity warning: 9 more new alerts (9 from cloud-monitoring)" in storm.text
    assert "Alerts that page (ALERT_PAGE_SEVERITIES) are never folded." in storm.text

    # During it, from the same source: a critical on another route, a critical on the storming
    # route, and a warning on another route.
    def critical(incident_id: str, team: str) -> dict:
        payload = cloud_monitoring(incident_id, team=team)
        payload["incident"]["severity"] = "Critical"
        return payload

    assert send_cm(http, critical("0.tpu-critical", "tpu")).status_code == 202
    assert send_cm(http, critical("0.critical-here", "web")).status_code == 202
    assert send_cm(http, cloud_monitoring("0.tpu-warning")).status_code == 202

    def severity(channel: str, level: str) -> list:
        return [m for m in roots(slack, channel) if f"severity {level}" in m.text and ":rotating_light:" in m.text]

    [tpu] = wait_until(lambda: severity(CH_TPU, "critical"), what="the critical's own thread")
    assert "Paging <!subteam^S0TPU> (severity critical)." in tpu.text
    [here] = wait_until(lambda: severity(CH_ALL, "critical"), what="the critical on the storming route, not folded")
    assert "Paging <!subteam^S0SRE> (severity critical)." in here.text
    wait_until(lambda: len(severity(CH_TPU, "warning")) == 1, what="the other route's warning, in its own scope")
    # The storm still counts only its own route's warnings: 3 threads and one message.
    assert len(severity(CH_ALL, "warning")) == 3
    assert len([m for m in roots(slack, CH_ALL) if "Alert storm" in m.text]) == 1


def test_pagerduty_states_show_on_the_first_message_with_who_changed_them(senders):
    stack, http, state = senders
    slack = stack.slack
    t0 = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=30)
    tenex, ops, responder = user("Tenex Engineer", "PLH1HKV"), user("Ops Lead", "POPS001"), user("User 123", "PTUXL6G")

    def sent(event_id: str, event_type: str, minutes: int, **fields) -> None:
        payload = pagerduty(event_id, event_type, occurred_at=t0 + timedelta(minutes=minutes), **fields)
        response = send_pd(http, payload, webhook_id=f"wh-{event_id}")
        assert response.status_code == 202, response.text

    def first() -> str:
        return roots(slack, CH_API)[0].text

    sent("ev-1", "incident.triggered", 0, priority_name="P3", assignees=(responder,))
    wait_until(lambda: roots(slack, CH_API), what="the incident's thread")
    sent("ev-2", "incident.acknowledged", 1, agent=tenex, priority_name="P3", assignees=(responder,))
    wait_until(lambda: ":eyes: *ACKNOWLEDGED*" in first(), what="acknowledged")
    assert f":eyes: Acknowledged by Tenex Engineer at {clock(t0 + timedelta(minutes=1))}." in first()

    sent("ev-3", "incident.priority_updated", 2, agent=ops, status="acknowledged", priority_name="P1")
    wait_until(lambda: "Priority *P1*" in first(), what="the new priority")
    assert f"Priority *P1* (was P3), changed by Ops Lead at {clock(t0 + timedelta(minutes=2))}." in first()
    assert ":eyes: *ACKNOWLEDGED*" in first()

    # An older event the worker runs late (PagerDuty sent it in order) puts no older state back.
    sent("ev-0", "incident.unacknowledged", 0, agent=ops, priority_name="P3")
    sent("ev-4", "incident.escalated", 3, status="acknowledged", priority_name="P1", assignees=(ops,))
    wait_until(lambda: ":arrow_double_up: Escalated" in first(), what="the escalation")
    assert f":arrow_double_up: Escalated at {clock(t0 + timedelta(minutes=3))} to Ops Lead." in first()
    assert ":eyes: *ACKNOWLEDGED*" in first() and "Priority *P1* (was P3)" in first()

    sent("ev-5", "incident.reassigned", 4, agent=tenex, status="acknowledged", priority_name="P1", urgency="low",
         assignees=(user("Night Owl", "PNIGHT1"),))
    wait_until(lambda: "Reassigned to Night Owl" in first(), what="the reassignment")
    assert f"Reassigned to Night Owl at {clock(t0 + timedelta(minutes=4))} by Tenex Engineer." in first()
    assert "Urgency *low* (was high)." in first()

    # Replays: the same event again, and another attempt of the same webhook (its X-Webhook-Id).
    replay = send_pd(http, pagerduty("ev-2", "incident.acknowledged", occurred_at=t0 + timedelta(minutes=1),
                                     agent=tenex))
    assert replay.status_code == 200 and replay.json()["duplicate"] is True
    attempt = send_pd(http, pagerduty("ev-2-again", "incident.acknowledged", agent=tenex), webhook_id="wh-ev-2")
    assert attempt.status_code == 200 and attempt.json()["duplicate"] is True
    # Kept a day: PagerDuty's 5 attempts of a webhook span about 20 minutes (its Behavior page).
    for marker in ("pagerduty:ev-2", "pagerduty-webhook:wh-ev-2"):
        assert 86_000 < state.ttl(keys.dedupe("alert", marker)) <= 86_400

    sent("ev-6", "incident.resolved", 5, agent=tenex, priority_name="P1", urgency="low")
    wait_until(lambda: first().startswith(":white_check_mark: *RESOLVED*"), what="resolved")
    assert f"Resolved by Tenex Engineer at {clock(t0 + timedelta(minutes=5))}." in first()
    [root] = roots(slack, CH_API)
    wait_until(lambda: any("Resolved at" in m.text for m in thread(slack, CH_API, root.ts)), what="resolved in the thread")
    assert "sent it again" not in first()  # state changes are not repeats


def test_a_byte_identical_alertmanager_repeat_after_its_group_interval_shows_still_firing(senders):
    """ALERTMANAGER_GROUP_INTERVAL is 2s here: the same bytes within it are a retry, after it a repeat."""
    stack, http, state = senders
    group = crash_loop_group(3)
    first = send_am(http, group)
    assert first.status_code == 202, first.text
    marker = keys.dedupe("alert", f"alertmanager:{first.json()['delivery']}")
    retry = send_am(http, group)
    assert retry.status_code == 200 and retry.json()["duplicate"] is True
    root = wait_until(lambda: root_of(stack.slack, CH_TPU, "KubePodCrashLooping"), what="the group's thread")
    assert "sent it again" not in root.text

    for n in (1, 2):
        wait_until(lambda: not state.exists(marker), timeout=10, what="the group interval to pass")
        again = send_am(http, group)  # repeat_interval: Alertmanager sends the unchanged group again
        assert again.status_code == 202, again.text
        expected = f"Still firing: alertmanager sent it again {n} time{'s' * (n != 1)}, last at"
        wait_until(lambda expected=expected: expected in roots(stack.slack, CH_TPU)[0].text, what=f"repeat {n} counted")
    assert len(roots(stack.slack, CH_TPU)) == 1
    assert roots(stack.slack, CH_TPU)[0].text.startswith(":rotating_light: *FIRING*")


def test_a_sender_that_goes_away_mid_group_leaves_a_log_line_and_no_traceback(web_only_stack, caplog):
    stack, _, state = web_only_stack
    caplog.set_level(logging.INFO, logger="bot.alert_webhooks")
    before = keyspace_digest(state)
    group = crash_loop_group(50)
    with partial_alertmanager_post(stack.web_url, group, len(group) // 2, timeout=10):
        pass
    wait_until(lambda: "went away before its body was read" in caplog.text, what="the disconnect noted")
    assert "Traceback" not in caplog.text
    assert keyspace_digest(state) == before


def test_the_model_is_given_the_groups_size_and_its_first_kept_alerts():
    """What the investigation's model reads of a group (the thread context; the request stays the bot's own)."""
    lines = alert_context(parse_alertmanager(crash_loop_group(1200)))
    counted, named = [line for line in lines if line.startswith("group: ")]
    assert counted == "group: 1,200 alerts in this group: 1,200 firing."
    assert "pod=trainer-000-00019-" in named and "pod=trainer-000-00020-" not in named
    assert named.endswith(f"… and {1200 - LISTED_ALERTS:,} more (the first {LISTED_ALERTS} are named; every alert is "
                          "counted above).")


def tpu_group(*alerts: dict) -> dict:
    """Alertmanager's route `group_by: [team]`: one team's alerts of any name and severity in one group."""
    return alertmanager_group('{}/{team="tpu"}:{team="tpu"}', {"team": "tpu"}, list(alerts))


def test_a_critical_alert_in_a_mixed_severity_group_is_paged_through_a_warning_storm(senders):
    """With mixed severities Alertmanager leaves severity out of commonLabels; the group is as
    severe as its most severe alert, whichever comes first in it."""
    stack, http, state = senders
    state.set(keys.oncall(TEAM, CH_TPU), json.dumps(["<!subteam^S0TPU>"]))
    started = datetime(2026, 12, 1, 21, 0, tzinfo=timezone.utc)
    for n in range(4):  # a warning storm on the team=tpu route: 3 threads, then folding
        crash = crash_loop_alert(n, started)
        assert send_am(http, alertmanager_group(f"{{}}:{{pod={n}}}", {"pod": str(n)}, [crash])).status_code == 202
    wait_until(lambda: root_of(stack.slack, CH_TPU, "Alert storm"), what="the warning storm folding")

    mixed = tpu_group(crash_loop_alert(7, started), hbm_alert("critical"))
    assert "severity" not in mixed["commonLabels"]
    response = send_am(http, mixed)
    assert response.status_code == 202, response.text
    root = wait_until(lambda: root_of(stack.slack, CH_TPU, "2 alerts in this group"), what="the mixed group's own thread")
    assert "· severity critical" in root.text
    assert "Paging <!subteam^S0TPU> (severity critical)." in root.text


def test_an_open_incident_that_becomes_page_worthy_pages_once(senders):
    stack, http, state = senders
    slack = stack.slack
    state.set(keys.oncall(TEAM, CH_TPU), json.dumps(["<!subteam^S0TPU>"]))
    state.set(keys.oncall(TEAM, CH_API), json.dumps(["<!subteam^S0API>"]))
    started = datetime(2026, 12, 1, 21, 0, tzinfo=timezone.utc)

    def pages_in(channel: str) -> list:
        return [m for m in slack.channel_messages(channel) if m.thread_ts and m.thread_ts != m.ts and "<!subteam^" in m.text]

    # An Alertmanager group opens as a warning, then a critical alert joins it.
    assert send_am(http, tpu_group(crash_loop_alert(1, started))).status_code == 202
    opened = wait_until(lambda: root_of(slack, CH_TPU, "KubePodCrashLooping"), what="the warning group's thread")
    assert "Paging" not in opened.text
    assert send_am(http, tpu_group(crash_loop_alert(1, started), hbm_alert("critical"))).status_code == 202
    [page] = wait_until(lambda: pages_in(CH_TPU), what="the page when the group turned critical")
    assert page.thread_ts == opened.ts
    assert "<!subteam^S0TPU>" in page.text and "severity critical" in page.text
    wait_until(lambda: "Paging <!subteam^S0TPU> (severity critical)." in roots(slack, CH_TPU)[0].text,
               what="the first message saying who is paged")

    # A PagerDuty incident of low urgency and priority P3, raised to P1.
    t0 = datetime.now(timezone.utc) - timedelta(minutes=10)
    ops = user("Ops Lead", "POPS001")

    def sent(event_id: str, event_type: str, minutes: int, **fields) -> None:
        payload = pagerduty(event_id, event_type, incident_id="PLOW001", occurred_at=t0 + timedelta(minutes=minutes),
                            urgency="low", **fields)
        assert send_pd(http, payload).status_code == 202

    sent("low-1", "incident.triggered", 0, priority_name="P3")
    root = wait_until(lambda: roots(slack, CH_API), what="the PagerDuty incident's thread")[0]
    assert "Paging" not in root.text
    sent("low-2", "incident.priority_updated", 1, agent=ops, priority_name="P1")
    [pd_page] = wait_until(lambda: pages_in(CH_API), what="the page when the priority went to P1")
    assert "<!subteam^S0API>" in pd_page.text and "priority P1" in pd_page.text
    wait_until(lambda: "Paging <!subteam^S0API> (priority P1)." in roots(slack, CH_API)[0].text,
               what="the first message saying who is paged, and why")

    # Later deliveries that still page do not page again.
    assert send_am(http, tpu_group(crash_loop_alert(1, started), hbm_alert("critical"),
                                   crash_loop_alert(2, started))).status_code == 202
    wait_until(lambda: "3 alerts in this group" in roots(slack, CH_TPU)[0].text, what="the group's next delivery")
    sent("low-3", "incident.escalated", 2, priority_name="P1", assignees=(ops,))
    wait_until(lambda: ":arrow_double_up: Escalated" in roots(slack, CH_API)[0].text, what="the escalation")
    assert len(pages_in(CH_TPU)) == 1 and len(pages_in(CH_API)) == 1


def test_a_group_is_as_severe_as_its_most_severe_alert_wherever_it_comes():
    """The order behind the group's severity: ALERT_PAGE_SEVERITIES first, then log levels, then words alerting tools use."""
    started = datetime(2026, 12, 1, 21, 0, tzinfo=timezone.utc)
    warnings = [crash_loop_alert(n, started) for n in range(200)]
    last = tpu_group(*warnings, hbm_alert("critical"))
    assert parse_alertmanager(json.dumps(last).encode()).severity == "critical"
    quiet = tpu_group(hbm_alert("info"), hbm_alert("none"), crash_loop_alert(1, started), hbm_alert(""))
    event = parse_alertmanager(json.dumps(quiet).encode())
    assert event.severity == "warning" and event.labels["severity"] == "warning"  # what ALERT_ROUTES matches
    assert ORDER.highest("low", "high", "warning") == "high"  # PagerDuty's urgency high pages by default
    assert ORDER.highest("error", "sev-unknown", "") == "error" and ORDER.highest("sev-unknown", "") == "sev-unknown"
    assert ORDER.highest("p1", "emergency") == "p1"  # a severity that pages outranks any that does not


def ran(state, job_id: str) -> bool:
    """The worker finished the job (arq keeps its result)."""
    return bool(state.exists(f"arq:result:{job_id}"))


def test_a_resolve_handled_before_its_open_closes_the_thread_the_open_makes(senders):
    """PagerDuty triggers and auto-resolves within milliseconds (a flap); the worker runs the two
    jobs at once, and the resolve finds no incident yet. The open that follows shows it resolved."""
    stack, http, state = senders
    slack = stack.slack
    state.set(keys.oncall(TEAM, CH_API), json.dumps(["<!subteam^S0API>"]))
    t0 = datetime.now(timezone.utc) - timedelta(minutes=2)
    resolved = pagerduty("flap-2", "incident.resolved", incident_id="PFLAP01", occurred_at=t0 + timedelta(seconds=1))
    assert send_pd(http, resolved).status_code == 202
    wait_until(lambda: ran(state, "alert:pagerduty:flap-2"), what="the resolve handled first")
    triggered = pagerduty("flap-1", "incident.triggered", incident_id="PFLAP01", occurred_at=t0)  # urgency high: pages
    assert send_pd(http, triggered).status_code == 202
    [root] = wait_until(lambda: roots(slack, CH_API), what="the incident's thread")
    wait_until(lambda: roots(slack, CH_API)[0].text.startswith(":white_check_mark: *RESOLVED*"),
               what="the first message showing it resolved")
    wait_until(lambda: any("Resolved at" in m.text for m in thread(slack, CH_API, root.ts)), what="resolved in the thread")
    assert "Paging" not in roots(slack, CH_API)[0].text  # resolved before anyone could act: nobody is woken


def test_a_delivery_whose_job_runs_late_puts_no_older_state_back(senders):
    """Cloud Monitoring sends no time of change: a delivery's time is when the web accepted it, not
    when its job runs, so an older firing delivery retried after the resolve leaves it resolved."""
    from bot.wiring import arq_pool
    from handlers.incident_job import ALERT_JOB, AlertJob
    from handlers.incident_payloads import parse_alert
    from infra.jobs import JobQueue

    stack, http, state = senders
    slack = stack.slack
    firing = cloud_monitoring("0.late")
    accepted_firing = datetime.now(timezone.utc).timestamp()
    assert send_cm(http, firing).status_code == 202
    root = wait_until(lambda: root_of(slack, CH_TPU, "TPU idle"), what="the incident's thread")
    assert send_cm(http, cloud_monitoring("0.late", state="closed")).status_code == 202
    wait_until(lambda: roots(slack, CH_TPU)[0].text.startswith(":white_check_mark: *RESOLVED*"), what="resolved")

    async def run_late() -> None:  # the firing delivery's job again, as a retry of it would run now
        pool = await arq_pool(stack.settings.redis_url)
        try:
            event = parse_alert("cloud-monitoring", json.dumps(firing).encode())
            job = AlertJob(alert=event.model_dump(mode="json"), channel=CH_TPU, page=False, storm_threads=3,
                           storm_window=86_400, route=f"team=tpu:{CH_TPU}", accepted_at=accepted_firing)
            await JobQueue(pool).enqueue(ALERT_JOB, job, job_id="alert:late-retry")
        finally:
            await pool.aclose()

    asyncio.run(run_late())
    wait_until(lambda: ran(state, "alert:late-retry"), what="the late job run")
    assert roots(slack, CH_TPU)[0].text.startswith(":white_check_mark: *RESOLVED*")
    assert not any("Firing again" in m.text for m in thread(slack, CH_TPU, root.ts))


def huge_alert_group(pieces: int = 200, piece_chars: int = 20_000) -> Iterator[bytes]:
    """A group whose one alert carries `pieces` annotations of `piece_chars` each (4 MB by
    default: a templated annotation gone wrong), then an ordinary alert, then 2 MB under a key
    the message does not define; made as it is fed."""
    before, after = crash_loop_head(2)
    yield go_json(before)[:-2] + b',"alerts":['
    big = hbm_alert("critical")
    head = go_json({k: v for k, v in big.items() if k != "annotations"})[:-2]
    yield head + b',"annotations":{'
    for n in range(pieces):
        yield (b"," if n else b"") + f'"detail_{n}":"'.encode() + b"x" * piece_chars + b'"'
    yield b"}},"
    yield go_json(crash_loop_alert(1, datetime(2026, 12, 1, 21, 0, tzinfo=timezone.utc)))[:-1]
    yield b'],"extensions":['  # a key no Message defines, 2 MB of it, sent a little at a time
    for n in range(20):
        yield (b"," if n else b"") + b",".join(b'"' + b"z" * 98 + b'"' for _ in range(1_000))
    yield b"]," + go_json(after)[1:]


def test_an_alert_or_a_value_too_large_to_read_is_counted_not_built():
    event, sent, peak = traced_read(huge_alert_group())
    print(f"a {sent / 1e6:.1f} MB group (a 4 MB alert, 2 MB under a key no Message defines): peak "
          f"{peak / 1e6:.2f} MB traced")
    assert peak < 1_000_000, peak  # what is over the cap is let go as it is read, never held whole
    assert event.alert_count == 2 and event.firing_count == 2 and event.unread == 1
    assert event.severity == "critical"  # the alert not read still counts by its severity
    assert len(event.listed) == 1
    # A value of the message around the alerts over the cap: named, and the rest of it read.
    group = json.loads(crash_loop_group(3))
    group["commonAnnotations"] = {"description": "y" * 100_000}
    event = parse_alertmanager(json.dumps(group).encode())
    assert event.unread_fields == ("commonAnnotations",) and event.alert_count == 3
    assert "commonAnnotations over 65,536 characters: not read." in alert_context(event)[-1]


def test_a_group_past_the_cap_is_a_507_that_alertmanager_retries_and_writes_nothing(make_stack, caplog):
    stack = make_stack(run_worker=False, alertmanager_max_group_bytes=1024 * 1024, **SENDERS)
    with clients(stack) as (_, http, state):
        before = keyspace_digest(state)
        response = send_am(http, crash_loop_group(1200))  # 1.15 MB
        assert response.status_code == 507, response.text  # a 5xx: Alertmanager retries, and reports it failing
        assert "set max_alerts on this receiver" in response.json()["error"]
        assert keyspace_digest(state) == before
    assert "set max_alerts on the Alertmanager receiver" in caplog.text


def test_a_body_that_does_not_arrive_in_time_is_a_503_for_its_sender_to_retry(make_stack, caplog):
    stack = make_stack(run_worker=False, alert_read_timeout="1s", **SENDERS)
    with clients(stack) as (_, _, state):
        before = keyspace_digest(state)
        with partial_alertmanager_post(stack.web_url, crash_loop_group(5), 100) as sock:
            answer = sock.recv(4096)  # the rest never comes
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert keyspace_digest(state) == before
    assert "took over 1s to arrive (ALERT_READ_TIMEOUT)" in caplog.text


def test_an_opening_cut_short_by_a_dead_worker_is_finished_when_its_job_runs_again(senders):
    """A worker killed after the record was made and before the thread was posted leaves the
    record half-opened; arq runs the job again (same id), and that run finishes the opening, so
    the deliveries that waited on it are not retried until they are dropped."""
    from bot.incident_jobs import busy_retry_delay
    from bot.wiring import arq_pool
    from handlers.incident_job import ALERT_JOB, AlertJob
    from handlers.incident_payloads import parse_alert
    from infra.jobs import JobQueue
    from infra.state.incidents import IncidentStore

    stack, http, state = senders
    payload = cloud_monitoring("0.half-opened")
    event = parse_alert("cloud-monitoring", json.dumps(payload).encode())
    job_id = "alert:cloud-monitoring:half-opened:1"

    async def die_mid_open_then_run_again() -> None:
        from redis.asyncio import Redis

        redis = Redis.from_url(stack.settings.redis_url)
        pool = await arq_pool(stack.settings.redis_url)
        try:  # what the killed run left: the record, no thread
            opening = await IncidentStore(redis).open("cloud-monitoring", event.key, CH_TPU, route=f"team=tpu:{CH_TPU}",
                                                      severity=event.severity, limit=3, window_seconds=86_400,
                                                      opener=job_id)
            assert opening.opened
            job = AlertJob(alert=event.model_dump(mode="json"), channel=CH_TPU, page=False, storm_threads=3,
                           storm_window=86_400, route=f"team=tpu:{CH_TPU}", accepted_at=1.0)
            await JobQueue(pool).enqueue(ALERT_JOB, job, job_id=job_id)  # arq runs it again
        finally:
            await pool.aclose()
            await redis.aclose()

    asyncio.run(die_mid_open_then_run_again())
    root = wait_until(lambda: root_of(stack.slack, CH_TPU, "TPU idle"), what="the thread the second run opened")
    assert root.text.startswith(":rotating_light: *FIRING*")
    # A delivery that finds a thread being opened waits longer each time: 20 tries outlast minutes of it.
    waits = [busy_retry_delay(attempt) for attempt in range(1, 20)]
    assert waits[:3] == [1, 2, 4] and max(waits) == 60 and sum(waits) > 10 * 60
