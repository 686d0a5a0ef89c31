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
counted, and kept only while fewer than LISTED_ALERTS are kept; the digest that tells a retry
apart is taken over the same bytes.

What is held is bounded too when the group is not uniform: an alert, or a value of the message
around the alerts, over VALUE_MAX_CHARS of keys and values stops being built as soon as it goes
over (it is counted, an alert by its status and severity, and the thread says so); a top-level
key the message does not define is not built at all. One JSON token (a string) is held whole by
the parser until it ends; the body's own cap (ALERTMANAGER_MAX_GROUP_BYTES, checked as it is fed)
bounds it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any, Literal

import ijson
from ijson.common import ObjectBuilder
from pydantic import BaseModel, Field, ValidationError

from handlers.alert_severity import SeverityOrder
from handlers.incident_payloads import AlertEvent, PayloadError, first_problem, labelled_resource, moment, text

LISTED_ALERTS = 20  # alerts of a group kept to be named in its thread; the rest are counted
LISTED_CHARS = 80  # of one alert's distinguishing labels
# One alert's labels and annotations are a few hundred bytes (1,200 crash-looping pods are 1.15 MB);
# an alert, or a value of the message around the alerts, over this many characters of keys and
# values is not built: it is counted and the thread says so. An alert over it still counts by its
# status and severity, which are read as they pass.
VALUE_MAX_CHARS = 64 * 1024


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


class GroupTooLarge(Exception):
    """The body went past the reader's byte limit."""


class CappedBuilder:
    """ijson's ObjectBuilder that stops building past `limit` characters of keys and values, and
    then only says that it went over (what was built is let go)."""

    def __init__(self, limit: int) -> None:
        self._builder: ObjectBuilder | None = ObjectBuilder()
        self._left = limit

    @property
    def over(self) -> bool:
        return self._builder is None

    @property
    def value(self) -> Any:
        return self._builder.value if self._builder is not None else None

    def event(self, event: str, value: Any) -> None:
        if self._builder is None:
            return
        self._left -= 1 + (len(value) if isinstance(value, str) else 0 if value is None else len(str(value)))
        if self._left < 0:
            self._builder = None
            return
        self._builder.event(event, value)


HEAD_FIELDS = frozenset(AlertmanagerHead.model_fields)
ALERT_STATUS, ALERT_SEVERITY = "alerts.item.status", "alerts.item.labels.severity"  # ijson prefixes


class AlertmanagerReader:
    """Feed the body's chunks in order, then `finish()` for the AlertEvent (PayloadError naming
    the field when it is not Alertmanager's payload; the first problem in the head comes first).
    The group's severity is its most severe alert's, by `order`."""

    def __init__(self, order: SeverityOrder, *, max_bytes: int, value_max_chars: int = VALUE_MAX_CHARS) -> None:
        self._order = order
        self._max_bytes, self._value_max = max_bytes, value_max_chars
        self._bytes = 0
        self._severity = ""  # the most severe of the alerts read so far
        self._events = ijson.sendable_list()
        self._parser = ijson.parse_coro(self._events)
        self._digest = hashlib.sha256()
        self._opened = False  # the top-level object has started
        self._closed = False
        self._key: str | None = None  # the top-level key whose value is being read
        self._in_value = False  # its value has begun and not ended
        self._depth = 0  # nesting inside that value
        self._value: CappedBuilder | None = None  # None: a key the message does not define, not built
        self._head: dict[str, Any] = {}
        self._unread_fields: list[str] = []  # head values over the cap
        self._alerts_sent = False  # an "alerts" key was there
        self._alerts_list = False  # and its value is a list
        self._alert = CappedBuilder(value_max_chars)
        self._unread_status = ""  # of the alert over the cap being passed
        self._unread_severity = ""
        self._unread = 0  # alerts over the cap: counted, not read
        self._problem = ""  # the first alert that is not one
        self.count = 0
        self._firing = 0
        self._resolved = 0
        self._first_start: datetime | None = None
        self._last_end: datetime | None = None
        self._kept: list[AlertmanagerAlert] = []

    def feed(self, chunk: bytes) -> None:
        """GroupTooLarge once the body goes past `max_bytes`."""
        self._bytes += len(chunk)
        if self._bytes > self._max_bytes:
            raise GroupTooLarge(f"an Alertmanager group over {self._max_bytes:,} bytes")
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
            problem = first_problem(error)
            unread = next((name for name in self._unread_fields if problem.startswith(f"{name}:")), "")
            raise PayloadError(f"{unread}: over {self._value_max:,} characters" if unread else problem) from None
        if not self._alerts_sent:
            raise PayloadError("alerts: Field required")
        if self._problem:
            raise PayloadError(self._problem)
        if not self.count:
            raise PayloadError("alerts: List should have at least 1 item after validation, not 0")
        return self._event(head)

    def _drain(self) -> None:
        for prefix, event, value in self._events:
            self._on(prefix, event, value)
        del self._events[:]

    def _on(self, prefix: str, event: str, value: Any) -> None:
        if not self._opened:
            if event != "start_map":
                raise PayloadError("the body is not a JSON object")
            self._opened = True
        elif not self._in_value:  # between the top-level keys
            if event == "map_key":
                self._key, self._in_value = value, True
                self._value = CappedBuilder(self._value_max) if value in HEAD_FIELDS else None
                self._alerts_sent |= value == "alerts"
            elif event == "end_map":
                self._closed = True
        elif self._key == "alerts":
            self._on_alerts(prefix, event, value)
        else:
            if self._value is not None:
                self._value.event(event, value)
            self._depth += _nesting(event)
            if not self._depth and self._value is not None:
                if self._value.over:
                    self._unread_fields.append(str(self._key))
                else:
                    self._head[str(self._key)] = self._value.value
        if self._in_value and not self._depth and event != "map_key":
            self._in_value = False  # the value just read is whole

    def _on_alerts(self, prefix: str, event: str, value: Any) -> None:
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
            self._alert = CappedBuilder(self._value_max)
            self._unread_status = self._unread_severity = ""
        self._alert.event(event, value)
        if isinstance(value, str):  # what still counts of an alert if it goes over the cap
            if prefix == ALERT_STATUS:
                self._unread_status = value[:16]
            elif prefix == ALERT_SEVERITY:
                self._unread_severity = value[:64].lower()
        self._depth += step
        if self._depth == 1:
            if self._alert.over:
                self._pass_unread()
            else:
                self._take(self._alert.value)

    def _pass_unread(self) -> None:
        """An alert over the cap: counted, by its status and severity, never built."""
        self.count += 1
        self._unread += 1
        self._severity = self._order.highest(self._severity, self._unread_severity)
        if self._unread_status == "resolved":
            self._resolved += 1
        elif self._unread_status == "firing":
            self._firing += 1

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
        first = self._kept[0] if self._kept else AlertmanagerAlert(status=head.status, labels={},
                                                                   startsAt=datetime.now(timezone.utc))
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
            unread=self._unread, unread_fields=tuple(self._unread_fields), unread_over=self._value_max,
        )


def _nesting(event: str) -> int:
    return 1 if event in ("start_map", "start_array") else -1 if event in ("end_map", "end_array") else 0


def _distinct(alert: AlertmanagerAlert, common: dict[str, str]) -> str:
    """One alert by the labels that set it apart from its group (its fingerprint when none do)."""
    own = " ".join(f"{k}={v}" for k, v in alert.labels.items() if common.get(k) != v)
    named = text(own or alert.fingerprint or alert.labels.get("alertname", ""), LISTED_CHARS)
    return f"{named} (resolved)" if alert.status == "resolved" else named

