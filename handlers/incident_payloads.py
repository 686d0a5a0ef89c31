"""Alert webhooks' payloads, read into one typed `AlertEvent` (issue 32).

Each vendor's shape is held to what the vendor publishes:

- Alertmanager's webhook payload version 4: `notify/webhook/webhook.go` (`Message`: the template
  `Data` plus `version`, `groupKey`, `truncatedAlerts`) and `template/template.go` (`Data`,
  `Alert`) in prometheus/alertmanager. A group is re-sent with the same `groupKey` on every
  group_interval/repeat_interval, so the group key is the incident.
- Cloud Monitoring's webhook notification, schema version 1.2: an `incident` object
  (`incident_id`, `state` open|closed, `started_at`/`ended_at` in epoch seconds, `resource`
  {type, labels}, `policy_name`, `condition_name`, `summary`, `url`) as in Google's
  "Create and manage notification channels" page and its published v1.2 example.
- PagerDuty v3 webhooks: one `event` (`id`, `event_type`, `resource_type`, `occurred_at`, `data`)
  per delivery; `data` is an `incident` for the incident.* types that change an incident
  (PagerDuty/developer-docs, docs/webhooks/01-Overview.md). The event id is the delivery; the
  incident id is the incident.

Anything else is refused with a one-line reason naming the field; nothing of the body is logged.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Source = Literal["alertmanager", "cloud-monitoring", "pagerduty"]
SOURCES: tuple[Source, ...] = ("alertmanager", "cloud-monitoring", "pagerduty")
MAX_TEXT = 2_000  # of a title or summary kept: an alert's text is a headline, not a log
EPOCH_LIMIT = 253_402_300_799  # 9999-12-31T23:59:59Z, the last second a datetime holds
# PagerDuty event types whose `data` is the incident itself (the others — notes, responders,
# status updates, services, pagey.ping — say nothing about whether it fires).
PAGERDUTY_INCIDENT_EVENTS = frozenset({
    "incident.triggered", "incident.acknowledged", "incident.unacknowledged", "incident.resolved",
    "incident.reopened", "incident.escalated", "incident.reassigned", "incident.delegated",
    "incident.priority_updated",
})


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
    alert_count: int = 1  # alerts in an Alertmanager group


class PayloadError(ValueError):
    """The body is not this vendor's payload; the message says which field is wrong."""


class Ignored(Exception):
    """A well-formed delivery that says nothing about an incident firing (a ping, a note)."""


def parse_alert(source: Source, body: bytes) -> AlertEvent:
    """The body as an AlertEvent; PayloadError when malformed, Ignored when nothing fires or resolves."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than any payload has
        raise PayloadError("the body is not JSON") from None
    if not isinstance(data, dict):
        raise PayloadError("the body is not a JSON object")
    digest = hashlib.sha256(body).hexdigest()[:32]
    try:
        if source == "alertmanager":
            return _alertmanager(AlertmanagerMessage.model_validate(data), digest)
        if source == "cloud-monitoring":
            return _cloud_monitoring(CloudMonitoringNotification.model_validate(data), digest)
        return _pagerduty(PagerDutyWebhook.model_validate(data))
    except ValidationError as error:
        raise PayloadError(_first_problem(error)) from None


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"]) or "the body"
    return f"{where}: {problem['msg']}"[:200]


def _text(value: Any) -> str:
    return " ".join(str(value or "").split())[:MAX_TEXT]


def _moment(value: datetime | None) -> datetime | None:
    """Alertmanager's zero time (0001-01-01, an unset endsAt) is no time."""
    if value is None or value.year < 1971:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


# --- Alertmanager (webhook payload version 4) ------------------------------------------------

class AlertmanagerAlert(BaseModel):
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: str = ""
    fingerprint: str = ""


class AlertmanagerMessage(BaseModel):
    version: Literal["4"]
    groupKey: str = Field(min_length=1, max_length=4096)
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[AlertmanagerAlert] = Field(min_length=1)


def _alertmanager(message: AlertmanagerMessage, digest: str) -> AlertEvent:
    first = message.alerts[0]
    common = {**message.groupLabels, **message.commonLabels}
    title = common.get("alertname") or first.labels.get("alertname") or "Alertmanager alert"
    annotations = message.commonAnnotations or first.annotations
    summary = annotations.get("summary") or annotations.get("description") or ""
    severity = common.get("severity") or first.labels.get("severity", "")
    starts = [m for m in (_moment(a.startsAt) for a in message.alerts) if m]
    ends = [m for m in (_moment(a.endsAt) for a in message.alerts) if m]
    resource_type, resource_labels = _labelled_resource(common)
    return AlertEvent(
        source="alertmanager", key=message.groupKey, delivery=digest, status=message.status, title=_text(title),
        summary=_text(summary), severity=severity.lower(),
        labels={**common, "source": "alertmanager", "receiver": message.receiver},
        started_at=min(starts, default=None), ended_at=max(ends, default=None) if message.status == "resolved" else None,
        url=message.externalURL or first.generatorURL, resource_type=resource_type, resource_labels=resource_labels,
        alert_count=len(message.alerts) + message.truncatedAlerts,
    )


def _labelled_resource(labels: dict[str, str]) -> tuple[str, dict[str, str]]:
    """A TPU node or a GCE instance named by the alert's labels, as a Cloud Logging resource."""
    if labels.get("node_id"):
        return "tpu_worker", {"node_id": labels["node_id"], **({"zone": labels["zone"]} if labels.get("zone") else {})}
    if labels.get("instance_id"):
        return "gce_instance", {"instance_id": labels["instance_id"]}
    return "", {}


# --- Cloud Monitoring (notification schema version 1.2) --------------------------------------

class MonitoredResource(BaseModel):
    type: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


class CloudMonitoringIncident(BaseModel):
    incident_id: str = Field(min_length=1, max_length=512)
    state: Literal["open", "closed"]
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
        title=_text(incident.policy_name or incident.condition_name or "Cloud Monitoring incident"),
        summary=_text(incident.summary), severity=incident.severity.lower(), labels=labels,
        started_at=_epoch(incident.started_at), ended_at=_epoch(incident.ended_at), url=incident.url,
        resource_type=incident.resource.type, resource_labels=dict(incident.resource.labels),
    )


# --- PagerDuty (v3 webhook events) -----------------------------------------------------------

class PagerDutyReference(BaseModel):
    id: str = ""
    summary: str = ""


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


class PagerDutyEvent(BaseModel):
    id: str = Field(min_length=1, max_length=128)
    event_type: str = Field(min_length=1)
    resource_type: str = ""
    occurred_at: datetime
    data: dict[str, Any] | None = None


class PagerDutyWebhook(BaseModel):
    event: PagerDutyEvent


def _pagerduty(webhook: PagerDutyWebhook) -> AlertEvent:
    event = webhook.event
    if event.event_type not in PAGERDUTY_INCIDENT_EVENTS:
        raise Ignored(f"PagerDuty {event.event_type[:60]} events change no incident's state")
    try:
        incident = PagerDutyIncident.model_validate(event.data or {})
    except ValidationError as error:
        raise PayloadError("event.data." + _first_problem(error)) from None
    service = incident.service or PagerDutyReference()
    priority = (incident.priority.summary if incident.priority else "").lower()
    resolved = event.event_type == "incident.resolved" or incident.status == "resolved"
    return AlertEvent(
        source="pagerduty", key=incident.id, delivery=event.id, status="resolved" if resolved else "firing",
        title=_text(incident.title or f"PagerDuty incident {incident.id}"), summary="",
        severity=incident.urgency.lower(),
        labels={"source": "pagerduty", "service": service.summary, "service_id": service.id,
                "urgency": incident.urgency, "priority": priority},
        started_at=_moment(incident.created_at), ended_at=_moment(event.occurred_at) if resolved else None,
        url=incident.html_url,
    )
