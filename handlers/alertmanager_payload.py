"""Alertmanager's webhook payload, version 4, read as a stream (issue 42).

The shape is Alertmanager's own: notify/webhook/webhook.go (`Message`: the template `Data`, then
`version`, `groupKey`, `truncatedAlerts`) and template/template.go (`Data`: `receiver`,
`status`, `alerts`, `notification_reason`, `groupLabels`, `commonLabels`, `commonAnnotations`,
`routeLabels`, `externalURL`; `Alert`: `status`, `labels`, `annotations`, `startsAt`, `endsAt`,
`generatorURL`, `fingerprint`), in prometheus/alertmanager. A group is re-sent with the same
`groupKey` on every group_interval and repeat_interval, so the group key is the incident.

A group is sent whole unless the receiver sets `max_alerts` (0 by default: no limit), and
Alertmanager retries only a 5xx (notify/util.go, `Retrier.Check`): a 413 would lose the group for
good. 1,200 crash-looping pods in one group are about 1.15 MB, and `groupKey` comes after the
alerts. So the body is parsed as it arrives (ijson): each alert is checked when it is complete,
counted, and kept only while fewer than LISTED_ALERTS are kept, so memory stays bounded however
large the group; the digest that tells a retry apart is taken over the same bytes.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

import ijson
from ijson.common import ObjectBuilder
from pydantic import BaseModel, Field, ValidationError

from handlers.alert_severity import SeverityOrder
from handlers.incident_payloads import AlertEvent, PayloadError, first_problem, labelled_resource, moment, text

LISTED_ALERTS = 20  # alerts of a group kept to be named in its thread; the rest are counted
LISTED_CHARS = 80  # of one alert's distinguishing labels


class AlertmanagerAlert(BaseModel):
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: str = ""
    fingerprint: str = ""


class AlertmanagerHead(BaseModel):
    """The message without its alerts."""

    version: Literal["4"]
    groupKey: str = Field(min_length=1, max_length=4096)
    truncatedAlerts: int = Field(0, ge=0)
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""


class AlertmanagerReader:
    """Feed the body's chunks in order, then `finish()` for the AlertEvent (PayloadError naming
    the field when it is not Alertmanager's payload; the first problem in the head comes first).
    The group's severity is its most severe alert's, by `order`."""

    def __init__(self, order: SeverityOrder) -> None:
        self._order = order
        self._severity = ""  # the most severe of the alerts read so far
        self._events = ijson.sendable_list()
        self._parser = ijson.parse_coro(self._events)
        self._digest = hashlib.sha256()
        self._opened = False  # the top-level object has started
        self._closed = False
        self._key: str | None = None  # the top-level key whose value is being read
        self._in_value = False  # its value has begun and not ended
        self._depth = 0  # nesting inside that value
        self._value = ObjectBuilder()
        self._head: dict[str, Any] = {}
        self._alerts_sent = False  # an "alerts" key was there
        self._alerts_list = False  # and its value is a list
        self._alert = ObjectBuilder()
        self._problem = ""  # the first alert that is not one
        self.count = 0
        self._firing = 0
        self._resolved = 0
        self._first_start: datetime | None = None
        self._last_end: datetime | None = None
        self._kept: list[AlertmanagerAlert] = []

    def feed(self, chunk: bytes) -> None:
        self._digest.update(chunk)
        try:
            self._parser.send(chunk)
        except ijson.JSONError:  # its message quotes the body: never passed on
            raise PayloadError("the body is not JSON") from None
        self._drain()

    def finish(self) -> AlertEvent:
        try:
            self._parser.close()
        except ijson.JSONError:
            raise PayloadError("the body is not JSON") from None
        self._drain()
        if not self._closed:
            raise PayloadError("the body is not JSON")
        try:
            head = AlertmanagerHead.model_validate(self._head)
        except ValidationError as error:
            raise PayloadError(first_problem(error)) from None
        if not self._alerts_sent:
            raise PayloadError("alerts: Field required")
        if self._problem:
            raise PayloadError(self._problem)
        if not self.count:
            raise PayloadError("alerts: List should have at least 1 item after validation, not 0")
        return self._event(head)

    def _drain(self) -> None:
        for _prefix, event, value in self._events:
            self._on(event, value)
        del self._events[:]

    def _on(self, event: str, value: Any) -> None:
        if not self._opened:
            if event != "start_map":
                raise PayloadError("the body is not a JSON object")
            self._opened = True
        elif not self._in_value:  # between the top-level keys
            if event == "map_key":
                self._key, self._value, self._in_value = value, ObjectBuilder(), True
                self._alerts_sent |= value == "alerts"
            elif event == "end_map":
                self._closed = True
        elif self._key == "alerts":
            self._on_alerts(event, value)
        else:
            self._value.event(event, value)
            self._depth += _nesting(event)
            if not self._depth:
                self._head[str(self._key)] = self._value.value
        if self._in_value and not self._depth and event != "map_key":
            self._in_value = False  # the value just read is whole

    def _on_alerts(self, event: str, value: Any) -> None:
        step = _nesting(event)
        if not self._depth:  # the value of "alerts" starts
            self._alerts_list = event == "start_array"
            if not self._alerts_list:
                self._note("alerts: Input should be a valid list")
            self._depth += step
            return
        if self._depth == 1 and step < 0:  # the end of that value
            self._depth = 0
            return
        if not self._alerts_list:
            self._depth += step
            return
        if self._depth == 1:
            self._alert = ObjectBuilder()
        self._alert.event(event, value)
        self._depth += step
        if self._depth == 1:
            self._take(self._alert.value)

    def _take(self, raw: Any) -> None:
        index, self.count = self.count, self.count + 1
        try:
            alert = AlertmanagerAlert.model_validate(raw)
        except ValidationError as error:
            self._note(first_problem(error, f"alerts.{index}"))
            return
        self._severity = self._order.highest(self._severity, alert.labels.get("severity", "").lower())
        if alert.status == "firing":
            self._firing += 1
        else:
            self._resolved += 1
        start, end = moment(alert.startsAt), moment(alert.endsAt)
        if start and (self._first_start is None or start < self._first_start):
            self._first_start = start
        if end and (self._last_end is None or end > self._last_end):
            self._last_end = end
        if len(self._kept) < LISTED_ALERTS:
            self._kept.append(alert)

    def _note(self, problem: str) -> None:
        self._problem = self._problem or problem

    def _event(self, head: AlertmanagerHead) -> AlertEvent:
        first = self._kept[0]
        common = {**head.groupLabels, **head.commonLabels}
        title = common.get("alertname") or first.labels.get("alertname") or "Alertmanager alert"
        annotations = head.commonAnnotations or first.annotations
        summary = annotations.get("summary") or annotations.get("description") or ""
        severity = self._order.highest(common.get("severity", "").lower(), self._severity)
        resource_type, resource_labels = labelled_resource(common)
        return AlertEvent(
            source="alertmanager", key=head.groupKey, delivery=self._digest.hexdigest()[:32], status=head.status,
            title=text(title), summary=text(summary), severity=severity,
            labels={**common, **({"severity": severity} if severity else {}), "source": "alertmanager",
                    "receiver": head.receiver},
            started_at=self._first_start, ended_at=self._last_end if head.status == "resolved" else None,
            url=head.externalURL or first.generatorURL, resource_type=resource_type, resource_labels=resource_labels,
            alert_count=self.count + head.truncatedAlerts, firing_count=self._firing, resolved_count=self._resolved,
            held_back=head.truncatedAlerts, listed=tuple(_distinct(alert, common) for alert in self._kept),
        )


def _nesting(event: str) -> int:
    return 1 if event in ("start_map", "start_array") else -1 if event in ("end_map", "end_array") else 0


def _distinct(alert: AlertmanagerAlert, common: dict[str, str]) -> str:
    """One alert by the labels that set it apart from its group (its fingerprint when none do)."""
    own = " ".join(f"{k}={v}" for k, v in alert.labels.items() if common.get(k) != v)
    named = text(own or alert.fingerprint or alert.labels.get("alertname", ""), LISTED_CHARS)
    return f"{named} (resolved)" if alert.status == "resolved" else named

