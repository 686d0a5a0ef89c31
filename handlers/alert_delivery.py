"""A sender's retry told from a new delivery (issue 42): the first-seen markers of an alert
webhook delivery, set in the same step as its job is queued (infra/jobs.py), and how long they
are kept. A delivery whose marker was seen is answered 200 and queues nothing.

PagerDuty makes at most 5 attempts of a webhook, over about 20 minutes, each with the same
X-Webhook-Id; its delivery is at least once, so an event can come again; and webhooks queued
behind a failing one wait for it (PagerDuty/developer-docs, docs/webhooks/02-Behavior.md: Retries,
At-Least-Once Delivery). Its event ids and webhook ids are kept a day, well past all of those.

Alertmanager sends no id, and blanks a firing alert's endsAt, so a repeat_interval re-send is
byte-identical to the first. What tells them apart is time: its retries of one notification stop
within that notification's deadline (the group_interval, at least 10 s), and the group is notified
again at the earliest a group_interval later; so the same bytes within ALERTMANAGER_GROUP_INTERVAL
of the last accepted copy are a retry, and later ones a repeat. Cloud Monitoring likewise, within
CLOUD_MONITORING_RETRY_SECONDS.
"""

from __future__ import annotations

from datetime import timedelta

from handlers.incident_payloads import AlertEvent
from infra.state.dedupe import Dedupe

PAGERDUTY_REPLAY_SECONDS = 86_400
# Cloud Monitoring's reminders of an open incident come at least 30 minutes apart
# (AlertPolicy.alertStrategy.notificationChannelStrategy.renotifyInterval in the monitoring v3
# discovery document): the same bytes sooner than this are its retry.
CLOUD_MONITORING_RETRY_SECONDS = 10 * 60


def delivery_markers(dedupe: Dedupe, event: AlertEvent, *, webhook_id: str,
                     group_interval: timedelta) -> tuple[list[str], int]:
    """The first-seen markers of a delivery and how long they are kept (seconds). `webhook_id`:
    PagerDuty's X-Webhook-Id ("" when not sent); `group_interval`: ALERTMANAGER_GROUP_INTERVAL."""
    if event.source == "pagerduty":
        markers = [dedupe.marker("alert", f"pagerduty:{event.delivery}")]
        if webhook_id:
            markers.append(dedupe.marker("alert", f"pagerduty-webhook:{webhook_id}"))
        return markers, PAGERDUTY_REPLAY_SECONDS
    window = int(group_interval.total_seconds()) if event.source == "alertmanager" else CLOUD_MONITORING_RETRY_SECONDS
    return [dedupe.marker("alert", f"{event.source}:{event.delivery}")], max(window, 1)
