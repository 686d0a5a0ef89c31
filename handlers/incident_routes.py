"""ALERT_ROUTES: which channel an alert's thread opens in.

Rules are tried in order and the first that matches wins: `label=value:CHANNEL` matches an
alert whose label has that value (Alertmanager's group and common labels, Cloud Monitoring's
resource and policy user labels plus `policy_name`, PagerDuty's `service`, `service_id`,
`urgency` and `priority`; every alert also has `source`), and `*:CHANNEL` matches everything.
The rule that matched is also the alert's storm scope, with its severity (handlers/incident_job.py).

    ALERT_ROUTES=team=ml-serving:C0SERVING,service=API Service:C0API,*:C0ALERTS
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from handlers.incident_payloads import AlertEvent

CHANNEL = re.compile(r"^[CG][A-Z0-9]{2,}$")
LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,100}$")
EXAMPLE = "alertname=TPUDown:C0123ABC,service=API Service:C0456DEF,*:C0789GHI"


@dataclass(frozen=True)
class AlertRoute:
    label: str  # "" for the catch-all
    value: str
    channel: str

    def matches(self, event: AlertEvent) -> bool:
        return not self.label or event.labels.get(self.label) == self.value

    @property
    def rule(self) -> str:
        """The rule as written in ALERT_ROUTES: what a storm limit counts per (with the severity)."""
        return f"{self.matcher}:{self.channel}"

    @property
    def matcher(self) -> str:
        """The rule without its channel, as the storm message names it: `team=tpu`, or `*`."""
        return f"{self.label}={self.value}" if self.label else "*"


def parse_routes(text: str) -> list[AlertRoute]:
    """`label=value:CHANNEL,…,*:CHANNEL`; ValueError names the rule that is not one."""
    routes = []
    for rule in (part.strip() for part in text.split(",")):
        if not rule:
            continue
        matcher, _, channel = rule.rpartition(":")
        channel = channel.strip()
        if not CHANNEL.match(channel):
            raise ValueError(f"{rule!r} does not end in a channel id (C… or G…)")
        matcher = matcher.strip()
        if matcher == "*":
            routes.append(AlertRoute("", "", channel))
            continue
        label, equals, value = matcher.partition("=")
        if not equals or not LABEL.match(label.strip()) or not value.strip():
            raise ValueError(f"{rule!r} is not label=value:CHANNEL or *:CHANNEL")
        routes.append(AlertRoute(label.strip(), value.strip(), channel))
    return routes


def route_for(routes: list[AlertRoute], event: AlertEvent) -> AlertRoute | None:
    return next((route for route in routes if route.matches(event)), None)
