"""Alert webhooks' payloads, read into one typed `AlertEvent` (issues 32 and 42).

Each vendor's shape is held to what the vendor publishes:

- Alertmanager's webhook payload version 4: handlers/alertmanager_payload.py, which reads it as a
  stream (a group can hold thousands of alerts).
- Cloud Monitoring's webhook notification, schema version 1.2: an `incident` object
  (`incident_id`, `state` open|closed, `started_at`/`ended_at` in epoch seconds, `resource`
  {type, labels}, `policy_name`, `condition_name`, `summary`, `url`) as in Google's
  "Create and manage notification channels" page and its published v1.2 example. The channel's
  "Test connection" button sends `"version": "test"` with `"state": "OPEN"` and a string
  `documentation` (recorded in cloudforet-io/plugin-google-monitoring-mon-webhook,
  test/api/test_event_test.py): a `Ping`, never an incident.
- PagerDuty v3 webhooks: one `event` (`id`, `event_type`, `resource_type`, `occurred_at`,
  `agent`, `data`) per delivery; `data` is an `incident` for the incident.* types that change an
  incident (PagerDuty/developer-docs, docs/webhooks/01-Overview.md). The event id is the
  delivery; the incident id is the incident; `agent` is who made the change (null: automation).
  `pagey.ping` (the subscription's "Send test event") is a `Ping`.

Anything else is refused with a one-line reason naming the field; nothing of the body is logged.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

Source = Literal["alertmanager", "cloud-monitoring", "pagerduty"]
MAX_TEXT = 2_000  # of a title or summary kept: an alert's text is a headline, not a log
NAME_CHARS = 200  # of a person, priority or escalation policy named in the thread
MAX_NAMED = 10  # assignees named in the thread
EPOCH_LIMIT = 253_402_300_799  # 9999-12-31T23:59:59Z, the last second a datetime holds
# PagerDuty event types whose `data` is the incident itself (the others — notes, responders,
# status updates, services — say nothing about the incident's state).
PAGERDUTY_INCIDENT_EVENTS = frozenset({
    "incident.triggered", "incident.acknowledged", "incident.unacknowledged", "incident.resolved",
    "incident.reopened", "incident.escalated", "incident.reassigned", "incident.delegated",
    "incident.priority_updated",
})
PAGERDUTY_PING = "pagey.ping"
CLOUD_MONITORING_TEST_VERSION = "test"


class AlertEvent(BaseModel):
    """One delivery of one incident, whatever sent it."""

    model_config = ConfigDict(frozen=True)

    source: Source
    key: str  # the incident: Alertmanager's groupKey, Cloud Monitoring's incident_id, PagerDuty's incident id
    delivery: str  # this delivery: PagerDuty's event id, else a digest of the body (a replay repeats it)
    status: Literal["firing", "resolved"]
    title: str
    summary: str = ""
    severity: str = ""  # lower-case as sent ("critical", "high", "p1"), "" when not said
    labels: dict[str, str] = Field(default_factory=dict)  # what ALERT_ROUTES matches (source and service too)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    url: str = ""
    resource_type: str = ""  # a Cloud Logging resource type, when the alert names one
    resource_labels: dict[str, str] = Field(default_factory=dict)
    # What the source says changed, and who did it (PagerDuty: the event type without "incident.",
    # and event.agent; "" where the source sends only firing or resolved).
    change: str = ""
    actor: str = ""
    occurred_at: datetime | None = None  # when the source says it changed; None: when it arrived
    acknowledged: bool = False  # the source reports it acknowledged (PagerDuty's status)
    priority: str = ""  # as the source names it ("P1"), "" when unset
    urgency: str = ""
    assignees: tuple[str, ...] = ()
    escalation_policy: str = ""
    # An Alertmanager group: every alert it holds (max_alerts' held-back ones included), how many
    # of those sent fire or resolved, and the first few by the labels that set them apart.
    alert_count: int = 1
    firing_count: int = 0
    resolved_count: int = 0
    held_back: int = 0  # Alertmanager's truncatedAlerts: over the receiver's max_alerts, not sent
    listed: tuple[str, ...] = ()
    # What was too large to read: alerts over `unread_over` characters (counted by their status and
    # severity, never built), and values of the message around them (named).
    unread: int = 0
    unread_fields: tuple[str, ...] = ()
    unread_over: int = 0


class PayloadError(ValueError):
    """The body is not this vendor's payload; the message says which field is wrong."""


class Ignored(Exception):
    """A well-formed delivery that says nothing about an incident's state (a note, a responder)."""


class Ping(Ignored):
    """A source's own test of the webhook (Cloud Monitoring's "Test connection", PagerDuty's
    pagey.ping): answered 2xx and logged, so the sender shows the channel as working."""


def parse_alert(source: Literal["cloud-monitoring", "pagerduty"], body: bytes) -> AlertEvent:
    """The body as an AlertEvent; PayloadError when malformed, Ignored (or Ping) when it is no
    incident's state. Alertmanager's groups are read as a stream instead (alertmanager_payload.py)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than any payload has
        raise PayloadError("the body is not JSON") from None
    if not isinstance(data, dict):
        raise PayloadError("the body is not a JSON object")
    try:
        if source == "cloud-monitoring":
            if data.get("version") == CLOUD_MONITORING_TEST_VERSION:
                raise Ping("a Cloud Monitoring test notification (the channel's Test connection)")
            return _cloud_monitoring(CloudMonitoringNotification.model_validate(data),
                                     hashlib.sha256(body).hexdigest()[:32])
        return _pagerduty(PagerDutyWebhook.model_validate(data))
    except ValidationError as error:
        raise PayloadError(first_problem(error)) from None


def first_problem(error: ValidationError, within: str = "") -> str:
    """The first thing wrong, as `field.path: what`; `within` prefixes the path."""
    problem = error.errors()[0]
    where = ".".join(str(part) for part in (*([within] if within else []), *problem["loc"])) or "the body"
    return f"{where}: {problem['msg']}"[:200]


def text(value: Any, limit: int = MAX_TEXT) -> str:
    return " ".join(str(value or "").split())[:limit]


def moment(value: datetime | None) -> datetime | None:
    """Alertmanager's zero time (0001-01-01, an unset endsAt) is no time."""
    if value is None or value.year < 1971:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def labelled_resource(labels: dict[str, str]) -> tuple[str, dict[str, str]]:
    """A TPU node or a GCE instance named by the alert's labels, as a Cloud Logging resource."""
    if labels.get("node_id"):
        return "tpu_worker", {"node_id": labels["node_id"], **({"zone": labels["zone"]} if labels.get("zone") else {})}
    if labels.get("instance_id"):
        return "gce_instance", {"instance_id": labels["instance_id"]}
    return "", {}


# --- Cloud Monitoring (notification schema version 1.2) --------------------------------------

def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


class MonitoredResource(BaseModel):
    type: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


class CloudMonitoringIncident(BaseModel):
    incident_id: str = Field(min_length=1, max_length=512)
    # "open"/"closed" in the published 1.2 examples; "OPEN" in the channel's test body: either case.
    state: Annotated[Literal["open", "closed"], BeforeValidator(_lower)]
    started_at: int | None = Field(None, ge=0, le=EPOCH_LIMIT)
    ended_at: int | None = Field(None, ge=0, le=EPOCH_LIMIT)
    policy_name: str = ""
    condition_name: str = ""
    summary: str = ""
    url: str = ""
    severity: str = ""
    resource: MonitoredResource = Field(default_factory=MonitoredResource)
    resource_name: str = ""
    policy_user_labels: dict[str, str] = Field(default_factory=dict)


class CloudMonitoringNotification(BaseModel):
    version: Literal["1.2"]
    incident: CloudMonitoringIncident


def _epoch(seconds: int | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, tz=timezone.utc) if seconds else None


def _cloud_monitoring(notification: CloudMonitoringNotification, digest: str) -> AlertEvent:
    incident = notification.incident
    labels = {**incident.resource.labels, **incident.policy_user_labels, "policy_name": incident.policy_name,
              "source": "cloud-monitoring"}
    return AlertEvent(
        source="cloud-monitoring", key=incident.incident_id, delivery=digest,
        status="resolved" if incident.state == "closed" else "firing",
        title=text(incident.policy_name or incident.condition_name or "Cloud Monitoring incident"),
        summary=text(incident.summary), severity=incident.severity.lower(), labels=labels,
        started_at=_epoch(incident.started_at), ended_at=_epoch(incident.ended_at), url=incident.url,
        resource_type=incident.resource.type, resource_labels=dict(incident.resource.labels),
    )


# --- PagerDuty (v3 webhook events) -----------------------------------------------------------

class PagerDutyReference(BaseModel):
    id: str = ""
    summary: str = ""

    def name(self) -> str:
        return text(self.summary or self.id, NAME_CHARS)


class PagerDutyIncident(BaseModel):
    id: str = Field(min_length=1, max_length=64)
    type: Literal["incident"]
    status: str = ""
    title: str = ""
    html_url: str = ""
    created_at: datetime | None = None
    urgency: str = ""
    service: PagerDutyReference | None = None
    priority: PagerDutyReference | None = None
    assignees: list[PagerDutyReference] = Field(default_factory=list)
    escalation_policy: PagerDutyReference | None = None


class PagerDutyEvent(BaseModel):
    id: str = Field(min_length=1, max_length=128)
    event_type: str = Field(min_length=1)
    resource_type: str = ""
    occurred_at: datetime
    agent: PagerDutyReference | None = None
    data: dict[str, Any] | None = None


class PagerDutyWebhook(BaseModel):
    event: PagerDutyEvent


def _pagerduty(webhook: PagerDutyWebhook) -> AlertEvent:
    event = webhook.event
    if event.event_type == PAGERDUTY_PING:
        raise Ping("a PagerDuty ping (pagey.ping: the subscription's test event)")
    if event.event_type not in PAGERDUTY_INCIDENT_EVENTS:
        raise Ignored(f"PagerDuty {event.event_type[:60]} events change no incident's state")
    try:
        incident = PagerDutyIncident.model_validate(event.data or {})
    except ValidationError as error:
        raise PayloadError(first_problem(error, "event.data")) from None
    service = incident.service or PagerDutyReference()
    priority = incident.priority.name() if incident.priority else ""
    resolved = event.event_type == "incident.resolved" or incident.status == "resolved"
    return AlertEvent(
        source="pagerduty", key=incident.id, delivery=event.id, status="resolved" if resolved else "firing",
        title=text(incident.title or f"PagerDuty incident {incident.id}"), summary="",
        severity=incident.urgency.lower(),
        labels={"source": "pagerduty", "service": service.summary, "service_id": service.id,
                "urgency": incident.urgency, "priority": priority.lower()},
        started_at=moment(incident.created_at), ended_at=moment(event.occurred_at) if resolved else None,
        url=incident.html_url, change=event.event_type.removeprefix("incident."),
        actor=event.agent.name() if event.agent else "", occurred_at=moment(event.occurred_at),
        acknowledged=incident.status == "acknowledged" and not resolved, priority=priority,
        urgency=text(incident.urgency, NAME_CHARS),
        assignees=tuple(a.name() for a in incident.assignees[:MAX_NAMED]),
        escalation_policy=incident.escalation_policy.name() if incident.escalation_policy else "",
    )
