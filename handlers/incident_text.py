"""What an incident's thread says (issues 32 and 42): its first message, re-rendered from the record
after every delivery (the incident as its source reports it now), the line that closes it, the
storm message of a route, and the alert as the model reads it.

Every text from the alert is redacted and mrkdwn-escaped here, before Slack sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from handlers.cards import escape
from handlers.incident_payloads import AlertEvent
from infra.state.incidents import Incident

SHOWN_LABELS = 8
HIDDEN_LABELS = frozenset({"source", "priority", "urgency"})  # said by the message's own lines
NAMED_IN_ROOT = 10  # alerts of a group named in the first message (the model is given all that are kept)
LABEL_CHARS = 120  # of one label shown in the first message


def storm_text(route: str, severity: str, count: int, by_source: dict[str, int], storm_threads: int,
               storm_window: float) -> str:
    matcher = escape(route.rpartition(":")[0]).replace("`", "'")
    sources = ", ".join(f"{n:,} from {name}" for name, n in sorted(by_source.items()))
    return (f":ocean: *Alert storm on route `{matcher}`*, severity {escape(severity) or 'unset'}: {count:,} more new "
            f"alert{'s' * (count != 1)} ({sources}) in this {duration(storm_window)} window "
            f"{'were' if count != 1 else 'was'} folded here instead of opening threads (at most {storm_threads} new "
            f"threads per route and severity per window, ALERT_STORM_THREADS). Alerts that page "
            f"(ALERT_PAGE_SEVERITIES) are never folded.")


def root_text(record: Incident, redact: Callable[[str], str]) -> str:
    """The thread's first message: what fired, where from, its group, and its state as the source reports it."""
    def safe(text: str) -> str:
        return escape(redact(text))

    event = AlertEvent.model_validate_json(record.fields["event"])
    resolved = record.status == "resolved"
    acknowledged = not resolved and record.fields.get("acknowledged") == "1"
    head = (":white_check_mark: *RESOLVED*" if resolved else ":eyes: *ACKNOWLEDGED*" if acknowledged
            else ":rotating_light: *FIRING*")
    severity = f" · severity {safe(event.severity)}" if event.severity else ""
    count = f" · {event.alert_count:,} alerts" if event.alert_count > 1 else ""
    lines = [f"{head} · {event.source} · *{safe(event.title)}*{severity}{count}"]
    if event.summary:
        lines.append(safe(event.summary))
    shown = {k: v for k, v in event.labels.items() if v and k not in HIDDEN_LABELS}
    if shown:
        lines.append(" ".join(f"`{safe(f'{k}={v}'[:LABEL_CHARS]).replace('`', chr(39))}`"
                              for k, v in list(shown.items())[:SHOWN_LABELS]))
    when = [f"started {clock(event.started_at)}"] if event.started_at else []
    if event.ended_at:
        when.append(f"ended {clock(event.ended_at)}")
    if event.url.startswith(("https://", "http://")):
        when.append(f"<{escape(event.url)}|open in {event.source}>")
    if when:
        lines.append(" · ".join(when))
    lines += [safe(line) for line in group_lines(event) + unread_lines(event)]
    lines += state_lines(record, safe, resolved=resolved, acknowledged=acknowledged)
    paged = record.fields.get("paged", "")
    if paged:
        why = record.fields.get("paged_for") or f"severity {event.severity or 'unset'}"
        lines.append(f"Paging {paged} ({safe(why)}).")
    return "\n".join(lines)


def page_text(mentions: list[str], reason: str, redact: Callable[[str], str]) -> str:
    """The reply that pages the on-call of an incident that came to page after its thread opened."""
    return f"{' '.join(mentions)} :rotating_light: This incident pages now ({escape(redact(reason))})."


def group_lines(event: AlertEvent, named: int = NAMED_IN_ROOT) -> list[str]:
    """An Alertmanager group: how many alerts it holds and in which state, and its first `named` alerts."""
    if event.source != "alertmanager" or event.alert_count <= 1:
        return []
    states = [f"{n:,} {state}" for n, state in ((event.firing_count, "firing"), (event.resolved_count, "resolved")) if n]
    line = f"{event.alert_count:,} alerts in this group: {', '.join(states)}"
    if event.held_back:
        line += (f"; {event.held_back:,} more held back by the receiver's max_alerts (Alertmanager's "
                 f"truncatedAlerts): counted, never sent")
    lines = [line + "."]
    sent = event.firing_count + event.resolved_count
    listed = event.listed[:named]
    if listed:
        more = sent - len(listed)
        lines.append(", ".join(listed) + (f" … and {more:,} more (the first {len(listed)} are named; every alert is "
                                          f"counted above)." if more > 0 else "."))
    return lines


def unread_lines(event: AlertEvent) -> list[str]:
    """What of an Alertmanager message was too large to read: counted alerts, named fields."""
    lines = []
    if event.unread:
        lines.append(f"{event.unread:,} alert{'s' * (event.unread != 1)} over {event.unread_over:,} characters "
                     f"{'each ' * (event.unread != 1)}counted by status and severity, not read.")
    if event.unread_fields:
        lines.append(f"{', '.join(event.unread_fields)} over {event.unread_over:,} characters: not read.")
    return lines


def state_lines(record: Incident, safe: Callable[[str], str], *, resolved: bool, acknowledged: bool) -> list[str]:
    """Acknowledgement, priority, urgency, escalation, assignment, who resolved, and "still firing"."""
    fields = record.fields

    def when(name: str) -> str:
        at = float(fields.get(name) or 0)
        return f" at {clock(datetime.fromtimestamp(at, tz=timezone.utc))}" if at else ""

    def by(name: str) -> str:
        return f" by {safe(fields[name])}" if fields.get(name) else ""

    lines = []
    if acknowledged:
        lines.append(f":eyes: Acknowledged{by('ack_by')}{when('ack_at') if fields.get('ack_by') else ''}.")
    if fields.get("priority"):
        was = f" (was {safe(fields['priority_was'])})" if fields.get("priority_was") else ""
        changed = f", changed{by('priority_by')}{when('priority_at')}" if fields.get("priority_by") else ""
        lines.append(f"Priority *{safe(fields['priority'])}*{was}{changed}.")
    if fields.get("urgency_was") and fields.get("urgency") and fields["urgency"] != fields["urgency_was"]:
        lines.append(f"Urgency *{safe(fields['urgency'])}* (was {safe(fields['urgency_was'])}).")
    if fields.get("escalated_at") and not resolved:
        to = f" to {safe(fields['escalated_to'])}" if fields.get("escalated_to") else ""
        lines.append(f":arrow_double_up: Escalated{when('escalated_at')}{by('escalated_by')}{to}.")
    if fields.get("assigned") and not resolved:
        verb = "Delegated to escalation policy" if fields["assigned"] == "delegated" else "Reassigned to"
        lines.append(f"{verb} {safe(fields.get('assigned_to') or 'nobody named')}{when('assigned_at')}{by('assigned_by')}.")
    if resolved and fields.get("resolved_by"):
        lines.append(f"Resolved{by('resolved_by')}{when('resolved_at')}.")
    if record.repeats and not resolved:
        lines.append(f"_Still firing: {record.source} sent it again {record.repeats} time{'s' * (record.repeats != 1)}, "
                     f"last{when('last_repeat')}._")
    return lines


def resolved_text(event: AlertEvent, opened: float) -> str:
    ended = event.ended_at or datetime.now(timezone.utc)
    lasted = max(0.0, ended.timestamp() - (event.started_at.timestamp() if event.started_at else opened))
    return f":white_check_mark: Resolved at {clock(ended)} (after {duration(lasted)}). This thread is closed."


def alert_context(event: AlertEvent) -> list[str]:
    """The alert as the model sees it: quoted data, one fact a line."""
    lines = [f"alert from {event.source}: {event.title} ({event.status})"]
    if event.summary:
        lines.append(f"summary: {event.summary}")
    if event.severity:
        lines.append(f"severity: {event.severity}")
    if event.started_at:
        lines.append(f"started: {clock(event.started_at)}")
    lines += [f"label {k}={v}" for k, v in list(event.labels.items())[:20] if v]
    lines += [f"group: {line}" for line in group_lines(event, named=len(event.listed)) + unread_lines(event)]
    return lines



def clock(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
