"""Which severity of an alert counts, and whether it pages (issues 32 and 42).

An Alertmanager group can hold alerts of several severities (a route that groups by team, say),
and Alertmanager then leaves `severity` out of `commonLabels`. The group is as severe as its most
severe alert: that one severity routes it, scopes its storm limit and decides its page, so a
critical alert is never folded into a warning storm because a warning came first in its group.

The order: a severity in ALERT_PAGE_SEVERITIES ranks above every other (the first listed
highest), then the log-level words every source uses (Cloud Monitoring's Critical, Error and
Warning; Prometheus's critical, warning, info; agent/digest/severity.py's scale), then a few
words alerting tools add (PagerDuty's urgency high and low), then any other word, then none.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.digest.severity import DEFAULT, ERROR, INFO, LEVEL_WORDS, NOTICE, WARNING
from handlers.incident_payloads import AlertEvent

ALERT_WORDS = {"HIGH": ERROR, "MAJOR": ERROR, "MEDIUM": WARNING, "MODERATE": WARNING, "MINOR": WARNING, "LOW": NOTICE,
               "NONE": INFO}
UNKNOWN = DEFAULT + 1  # a word we cannot place still says more than no severity at all


@dataclass(frozen=True)
class SeverityOrder:
    page_severities: tuple[str, ...]  # ALERT_PAGE_SEVERITIES, lower-case

    def rank(self, severity: str) -> tuple[int, int]:
        word = severity.strip().lower()
        if word in self.page_severities:
            return 1, len(self.page_severities) - self.page_severities.index(word)
        if not word:
            return 0, DEFAULT
        return 0, LEVEL_WORDS.get(word.upper(), ALERT_WORDS.get(word.upper(), UNKNOWN))

    def highest(self, *severities: str) -> str:
        """The most severe of `severities` (the first of equals); "" for none."""
        return max(severities, key=self.rank, default="")

    def page_reason(self, event: AlertEvent) -> str:
        """Why the alert pages ("severity critical", "priority P1"), or "" when it does not."""
        if event.severity in self.page_severities:
            return f"severity {event.severity}"
        priority = event.labels.get("priority", "")
        if priority in self.page_severities:
            return f"priority {event.priority or priority}"
        return ""
