"""Alert webhook payloads as each sender builds them, and how each sender sends them.

- Alertmanager: notify/webhook/webhook.go (`Message`: template `Data`, then `version`, `groupKey`,
  `truncatedAlerts`) and template/template.go (`Data`, `Alert`), prometheus/alertmanager at
  68fb2d5759b3a92c0bb2a1a13d4ef7ff5b06256d; encoded as Go's json.Encoder does (compact, map keys
  sorted, <>& escaped, a trailing newline). Alerts of a group are KubePodCrashLooping from
  kubernetes-monitoring/kubernetes-mixin (alerts/apps_alerts.libsonnet), with the labels
  kube-prometheus-stack puts on it.
- Cloud Monitoring: the 1.2 notification from cloudforet-io/plugin-google-monitoring-mon-webhook
  (docs/en/SAMPLE_DATA.md) and the channel's "Test connection" body from the same repository
  (test/api/test_event_test.py).
- PagerDuty: v3 webhooks from PagerDuty/developer-docs (docs/webhooks/01-Overview.md, the
  incident.priority_updated example), and the pagey.ping body recorded in Aldaviva/PagerDuty
  (Tests/Webhooks/WebhookResourceTests.cs).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import httpx
import pytest
import redis as redis_sync

from bot.settings import Settings
from handlers.alert_severity import SeverityOrder
from handlers.alertmanager_payload import AlertmanagerReader
from handlers.incident_payloads import AlertEvent

AM_TOKEN = "am-token-" + "x" * 24
CM_TOKEN = "cm-token-" + "y" * 24
PD_SECRET = "pd-secret-" + "z" * 24
CH_TPU, CH_API, CH_ALL = "C0TPUALERTS", "C0APIALERTS", "C0ALLALERTS"
ROUTES = f"team=tpu:{CH_TPU},service=API Service:{CH_API},*:{CH_ALL}"
NODE = {"node_id": "tpubot-v5e", "zone": "us-west4-a"}  # the sandbox Cloud Logging's TPU node
TEAM = "T0SANDBOX"  # the sandbox Slack's workspace
# Every source on, three threads per storm window, and a window no test runs across.
SENDERS = dict(alert_routes=ROUTES, alertmanager_webhook_token=AM_TOKEN, cloud_monitoring_token=CM_TOKEN,
               pagerduty_webhook_secret=PD_SECRET, alert_storm_threads=3, alert_storm_window="1d")


# ALERT_PAGE_SEVERITIES' default order
ORDER = SeverityOrder(tuple(Settings.model_fields["alert_page_severities"].default_factory()))  # type: ignore[misc]
MAX_GROUP_BYTES = Settings.model_fields["alertmanager_max_group_bytes"].default


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def go_time(moment: datetime) -> str:
    """time.Time as Go's JSON encoding writes it (RFC 3339, nanoseconds without trailing zeros)."""
    text = moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def go_json(value: object) -> bytes:
    """json.NewEncoder(&buf).Encode(msg): compact, HTML characters escaped, newline-terminated."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e") + "\n").encode()


# --- Alertmanager --------------------------------------------------------------------------

def alertmanager(group_key: str = '{}:{alertname="TPUHBMOOM"}', status: str = "firing", **labels: str) -> dict:
    """One alert in a group."""
    started = datetime.now(timezone.utc) - timedelta(minutes=20)
    common = {"alertname": "TPUHBMOOM", "severity": "critical", "team": "tpu", **NODE, **labels}
    alert = {"status": status, "labels": common, "annotations": {"summary": "HBM out of memory on the serving TPU"},
             "startsAt": iso(started), "endsAt": iso(datetime.now(timezone.utc)) if status == "resolved"
             else "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus:9090/graph?g0.expr=up", "fingerprint": "c0ffee"}
    return {"receiver": "tpubot", "status": status, "alerts": [alert], "groupLabels": {"alertname": common["alertname"]},
            "commonLabels": common, "commonAnnotations": alert["annotations"], "externalURL": "http://alertmanager:9093",
            "version": "4", "groupKey": group_key, "truncatedAlerts": 0}


def alertmanager_group(group_key: str, group_labels: dict[str, str], alerts: list[dict]) -> dict:
    """A group as template.go's Data builds it: `commonLabels` (and `commonAnnotations`) are what
    every alert has with the same value, so a group of mixed severities has no common severity;
    the group fires while any of its alerts does."""
    common = dict(alerts[0]["labels"])
    notes = dict(alerts[0]["annotations"])
    for alert in alerts[1:]:
        common = {k: v for k, v in common.items() if alert["labels"].get(k) == v}
        notes = {k: v for k, v in notes.items() if alert["annotations"].get(k) == v}
    status = "firing" if any(alert["status"] == "firing" for alert in alerts) else "resolved"
    return {"receiver": "tpubot", "status": status, "alerts": alerts, "groupLabels": group_labels,
            "commonLabels": common, "commonAnnotations": notes, "externalURL": "http://alertmanager:9093",
            "version": "4", "groupKey": group_key, "truncatedAlerts": 0}


def hbm_alert(severity: str = "critical", **labels: str) -> dict:
    """The one alert of `alertmanager()`, with its severity (TPUHBMOOM)."""
    return alertmanager(severity=severity, **labels)["alerts"][0]


CRASH_LOOP_URL = ("http://prometheus-kube-prometheus-prometheus.monitoring:9090/graph?g0.expr=max_over_time%28"
                  "kube_pod_container_status_waiting_reason%7Breason%3D%22CrashLoopBackOff%22%2Cjob%3D%22"
                  "kube-state-metrics%22%7D%5B5m%5D%29+%3E%3D+1&g0.tab=1")


def crash_loop_alert(n: int, started: datetime, namespace: str = "ml-training") -> dict:
    pod = f"trainer-{n // 40:03d}-{n:05d}-7d9f8b6c5-x{n % 7}lqz"
    labels = {"alertname": "KubePodCrashLooping", "container": "trainer", "endpoint": "http",
              "instance": f"10.36.{n // 250}.{n % 250}:8080", "job": "kube-state-metrics", "namespace": namespace,
              "pod": pod, "prometheus": "monitoring/kube-prometheus-stack-prometheus", "reason": "CrashLoopBackOff",
              "service": "kube-prometheus-stack-kube-state-metrics", "severity": "warning", "team": "tpu",
              "uid": f"0365d150-befc-4243-84f0-{n:012d}"}
    return {"status": "firing", "labels": dict(sorted(labels.items())), "annotations": {
        "description": f'Pod {namespace}/{pod} (trainer) is in waiting state (reason: "CrashLoopBackOff").',
        "runbook_url": "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubepodcrashlooping",
        "summary": "Pod is crash looping."},
        "startsAt": go_time(started + timedelta(milliseconds=n)), "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": CRASH_LOOP_URL, "fingerprint": hashlib.sha256(pod.encode()).hexdigest()[:16]}


def crash_loop_head(count: int, truncated: int = 0) -> tuple[dict, dict]:
    """(what comes before the alerts, what comes after), in Message's field order."""
    common = {"alertname": "KubePodCrashLooping", "container": "trainer", "endpoint": "http", "job": "kube-state-metrics",
              "namespace": "ml-training", "prometheus": "monitoring/kube-prometheus-stack-prometheus",
              "reason": "CrashLoopBackOff", "service": "kube-prometheus-stack-kube-state-metrics",
              "severity": "warning", "team": "tpu"}
    before = {"receiver": "tpubot", "status": "firing"}
    after = {"notification_reason": "first notification", "groupLabels": {"alertname": "KubePodCrashLooping"},
             "commonLabels": common, "commonAnnotations": {
                 "runbook_url": "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubepodcrashlooping",
                 "summary": "Pod is crash looping."},
             "routeLabels": {}, "externalURL": "http://alertmanager-kube-prometheus-alertmanager.monitoring:9093",
             "version": "4", "groupKey": '{}/{team="tpu"}:{alertname="KubePodCrashLooping"}', "truncatedAlerts": truncated}
    return before, after


def parse_alertmanager(body: bytes) -> AlertEvent:
    """A whole body at once, read as the route reads it (as a stream)."""
    reader = AlertmanagerReader(ORDER, max_bytes=MAX_GROUP_BYTES)
    reader.feed(body)
    return reader.finish()


def crash_loop_group(count: int, truncated: int = 0) -> bytes:
    """A group of `count` crash-looping pods as Alertmanager sends it (`truncated` more held back by max_alerts)."""
    return b"".join(crash_loop_chunks(count, truncated))


def crash_loop_chunks(count: int, truncated: int = 0, *, per_chunk: int = 64) -> Iterator[bytes]:
    """The same bytes, made a few alerts at a time (a group larger than what a test should hold)."""
    before, after = crash_loop_head(count, truncated)
    started = datetime(2026, 12, 1, 21, 0, 7, 701_000, tzinfo=timezone.utc)
    yield go_json(before)[:-2] + b',"alerts":['
    for first in range(0, count, per_chunk):
        alerts = [crash_loop_alert(n, started) for n in range(first, min(count, first + per_chunk))]
        yield (b"," if first else b"") + go_json(alerts)[1:-2]
    yield b"]," + go_json(after)[1:]


# --- Cloud Monitoring ----------------------------------------------------------------------

def cloud_monitoring(incident_id: str = "0.lj2va6zdkemq", state: str = "open", **user_labels: str) -> dict:
    """A notification, schema version 1.2."""
    started = int(time.time()) - 1200
    return {"version": "1.2", "incident": {
        "incident_id": incident_id, "scoping_project_id": "sandbox-project", "scoping_project_number": 12345,
        "url": f"https://console.cloud.google.com/monitoring/alerting/incidents/{incident_id}?project=sandbox-project",
        "started_at": started, "ended_at": int(time.time()) if state == "closed" else None, "state": state,
        "summary": "TPU duty cycle for tpubot-v5e is below the threshold of 0.1 with a value of 0.",
        "apigee_url": "", "observed_value": "0", "resource": {"type": "tpu_worker", "labels": dict(NODE)},
        "resource_type_display_name": "TPU Worker", "resource_id": "", "resource_display_name": "tpubot-v5e",
        "resource_name": "tpubot-v5e", "metric": {"type": "tpu.googleapis.com/cpu/utilization", "displayName": "x",
                                                   "labels": {}},
        "metadata": {"system_labels": {}, "user_labels": {}}, "policy_name": "TPU idle",
        "policy_user_labels": {"team": "tpu", **user_labels},
        "documentation": {"content": "", "mime_type": "text/markdown", "subject": ""}, "condition": {},
        "condition_name": "duty cycle below 10%", "threshold_value": "0.1", "severity": "Warning"}}


def cloud_monitoring_test_connection() -> dict:
    """What the channel's "Test connection" button sends: version "test", state "OPEN", a string documentation."""
    return {"version": "test", "incident": {
        "incident_id": "12345", "scoping_project_id": "12345", "scoping_project_number": 12345,
        "url": "http://www.example.com", "started_at": 0, "ended_at": 0, "state": "OPEN", "summary": "Test Incident",
        "apigee_url": "http://www.example.com", "observed_value": "1.0",
        "resource": {"type": "example_resource", "labels": {"example": "label"}},
        "resource_type_display_name": "Example Resource Type", "resource_id": "12345",
        "resource_display_name": "Example Resource", "resource_name": "projects/12345/example_resources/12345",
        "metric": {"type": "test.googleapis.com/metric", "displayName": "Test Metric", "labels": {"example": "label"}},
        "metadata": {"system_labels": {"example": "label"}, "user_labels": {"example": "label"}},
        "policy_name": "projects/12345/alertPolicies/12345", "policy_user_labels": {"example": "label"},
        "documentation": "Test documentation",
        "condition": {"name": "projects/12345/alertPolicies/12345/conditions/12345", "displayName": "Example condition",
                      "conditionThreshold": {"filter": 'metric.type="test.googleapis.com/metric" '
                                                       'resource.type="example_resource"',
                                             "comparison": "COMPARISON_GT", "thresholdValue": 0.5, "duration": "0s",
                                             "trigger": {"count": 1}}},
        "condition_name": "Example condition", "threshold_value": "0.5"}}


# --- PagerDuty -----------------------------------------------------------------------------

def user(name: str, user_id: str) -> dict:
    return {"html_url": f"https://acme.pagerduty.com/users/{user_id}", "id": user_id,
            "self": f"https://api.pagerduty.com/users/{user_id}", "summary": name, "type": "user_reference"}


def priority(name: str) -> dict:
    return {"html_url": "https://acme.pagerduty.com/account/incident_priorities", "id": f"PSO{name}",
            "self": f"https://api.pagerduty.com/priorities/PSO{name}", "summary": name, "type": "priority_reference"}


def pagerduty(event_id: str = "5ac64822-4adc-4fda-ade0-410becf0de4f", event_type: str = "incident.triggered",
              incident_id: str = "PGR0VU2", *, status: str | None = None, agent: dict | None = None,
              occurred_at: datetime | None = None, urgency: str = "high", priority_name: str | None = None,
              assignees: tuple[dict, ...] = ()) -> dict:
    """A v3 webhook about an incident."""
    status = status or {"incident.resolved": "resolved", "incident.acknowledged": "acknowledged"}.get(event_type,
                                                                                                    "triggered")
    return {"event": {
        "id": event_id, "event_type": event_type, "resource_type": "incident",
        "occurred_at": iso(occurred_at or datetime.now(timezone.utc)), "agent": agent, "client": {"name": "PagerDuty"},
        "data": {"id": incident_id, "type": "incident", "self": f"https://api.pagerduty.com/incidents/{incident_id}",
                 "html_url": f"https://acme.pagerduty.com/incidents/{incident_id}", "number": 2, "status": status,
                 "incident_key": "d3640fbd41094207a1c11e58e46b1662",
                 "created_at": iso(datetime.now(timezone.utc) - timedelta(minutes=5)),
                 "title": "A little bump in the road",
                 "service": {"html_url": "https://acme.pagerduty.com/services/PF9KMXH", "id": "PF9KMXH",
                             "self": "https://api.pagerduty.com/services/PF9KMXH", "summary": "API Service",
                             "type": "service_reference"},
                 "assignees": list(assignees),
                 "escalation_policy": {"html_url": "https://acme.pagerduty.com/escalation_policies/PUS0KTE",
                                       "id": "PUS0KTE", "self": "https://api.pagerduty.com/escalation_policies/PUS0KTE",
                                       "summary": "Default", "type": "escalation_policy_reference"},
                 "priority": priority(priority_name) if priority_name else None,
                 "urgency": urgency, "resolve_reason": None}}}


PAGEY_PING = (b'{"event":{"id":"01FKZOXA868SHYEE4DVNWB5P9W","event_type":"pagey.ping","resource_type":"pagey",'
              b'"occurred_at":"2025-04-07T03:00:55.532Z","agent":{"id":"PVE0ZR9","type":"user_reference"},'
              b'"client":null,"data":{"message":"Hello from your friend Pagey!","type":"ping"}}}')


def pd_signature(body: bytes, *secrets: str) -> str:
    return ",".join("v1=" + hmac.new(s.encode(), body, hashlib.sha256).hexdigest() for s in secrets)


# --- sending and reading back --------------------------------------------------------------

def send_am(http: httpx.Client, payload: dict | bytes, token: str = AM_TOKEN) -> httpx.Response:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return http.post("/alerts/alertmanager", content=body,
                     headers={"content-type": "application/json", "authorization": f"Bearer {token}"})


def send_cm(http: httpx.Client, payload: dict, token: str = CM_TOKEN) -> httpx.Response:
    return http.post("/alerts/cloud-monitoring", params={"auth_token": token}, content=json.dumps(payload).encode(),
                     headers={"content-type": "application/json"})


def send_pd(http: httpx.Client, payload: dict | bytes, secret: str = PD_SECRET, *,
            webhook_id: str | None = None) -> httpx.Response:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"content-type": "application/json",
               "x-pagerduty-signature": pd_signature(body, "old-rotated-secret", secret)}
    if webhook_id:
        headers["x-webhook-id"] = webhook_id
    return http.post("/alerts/pagerduty", content=body, headers=headers)


@contextmanager
def partial_alertmanager_post(web_url: str, body: bytes, sent: int, timeout: float = 30) -> Iterator[socket.socket]:
    """A POST of `body` to /alerts/alertmanager, over a raw socket, of which only the first `sent`
    bytes are sent (a sender that goes away or stalls mid-body); the socket, closed after."""
    address = urlsplit(web_url)
    with socket.create_connection((address.hostname, address.port), timeout=timeout) as sock:
        sock.sendall(b"POST /alerts/alertmanager HTTP/1.1\r\nHost: tpubot\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + AM_TOKEN.encode() + b"\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:sent])
        yield sock


def basic(password: str, user: str = "alertmanager") -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def roots(slack, channel: str) -> list:
    return [m for m in slack.channel_messages(channel) if not m.thread_ts or m.thread_ts == m.ts]


def thread(slack, channel: str, ts: str) -> list:
    return [m for m in slack.channel_messages(channel) if m.thread_ts == ts and m.ts != ts]


def answered(slack, channel: str, ts: str):
    """The thread's finished answer (the status line edited into it), once it is there."""
    return next((m for m in thread(slack, channel, ts) if "Made without the model" in m.text), None)


# Every key and its serialized value, hashed by the server: one round trip where a pipelined DUMP per
# key was 40% of the hostile-request suite's time (it digests the keyspace around each of 8,000 requests).
_KEYSPACE_DIGEST = """
local keys = redis.call('KEYS', '*')
table.sort(keys)
local parts = {}
for _, key in ipairs(keys) do
  parts[#parts + 1] = key .. '\\0' .. (redis.call('DUMP', key) or '') .. '\\0'
end
return redis.sha1hex(table.concat(parts))
"""


def keyspace_digest(state: redis_sync.Redis) -> str:
    """Every key and its serialized value (DUMP), hashed: any write shows as a new digest."""
    return state.eval(_KEYSPACE_DIGEST, 0).decode()


@contextmanager
def clients(stack, http: httpx.Client | None = None) -> Iterator[tuple[object, httpx.Client, redis_sync.Redis]]:
    """(the stack, an HTTP client to its web app, a client to its Redis), closed after. An in-process
    bot passes its own `http()`, which reaches the web app without a socket."""
    with http or httpx.Client(base_url=stack.web_url, timeout=30) as http, \
            redis_sync.Redis.from_url(stack.settings.redis_url) as state:
        yield stack, http, state


@pytest.fixture
def web_only_stack(make_stack):
    """The web app alone: no worker's heartbeats or crons write to Redis, so any write is the request's."""
    with clients(make_stack(run_worker=False, **SENDERS)) as parts:
        yield parts


@pytest.fixture
def alert_bot(make_bot):
    """An in-process bot (tests/in_process_bot.py) with every alert source on."""
    bot = make_bot(**SENDERS)
    with clients(bot, bot.http()) as parts:
        yield parts


@pytest.fixture
def web_only_bot(make_bot):
    """The in-process web app alone: no worker, so any write to Redis is the request's."""
    bot = make_bot(run_worker=False, **SENDERS)
    with clients(bot, bot.http()) as parts:
        yield parts
