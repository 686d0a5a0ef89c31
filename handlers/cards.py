"""Block Kit rendering: the lease status card, the teardown confirm card, small notices.

Pure functions from state to (text, blocks); Slack's limits (section text 3,000, header 150,
button value 2,000) are respected here so callers never have to think about them.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from infra.durations import format_duration
from infra.mrkdwn import escape  # noqa: F401 - cards.escape: what every card and reply escapes with

from agent.lease.model_boot import degraded_reason
from infra.state.leases import Lease, LeaseState

TEARDOWN_CONFIRM_ACTION = "teardown_confirm"
TEARDOWN_CANCEL_ACTION = "teardown_cancel"

# One spelling of each state wherever a person reads it (card header, State field, App Home):
# words, not identifiers. PENDING is the lease before any request reached GCP.
_STATE_EMOJI = {
    LeaseState.PENDING: ":hourglass_flowing_sand:",
    LeaseState.CREATING: ":hourglass_flowing_sand:",
    LeaseState.WAITING_FOR_RESOURCES: ":double_vertical_bar:",
    LeaseState.PROVISIONING: ":gear:",
    LeaseState.ACTIVE: ":large_green_circle:",
    LeaseState.BOOTING_MODEL: ":rocket:",
    LeaseState.READY: ":white_check_mark:",
    LeaseState.DEGRADED: ":warning:",
    LeaseState.FAILED: ":red_circle:",
    LeaseState.TEARING_DOWN: ":wastebasket:",
}
STATE_BADGES = {state: f"{emoji} {state.label}" for state, emoji in _STATE_EMOJI.items()}

# The VM's boot phases (infra/boot_phases.py) as people read them.
BOOT_PHASE_NAMES = {
    "reading-secrets": "reading the secrets",
    "pulling-image": "pulling the vLLM image",
    "restoring-cache": "restoring the compile cache",
    "loading-weights": "loading the weights",
    "compiling": "compiling (XLA)",
    "serving": "serving",
    "crashed": "vLLM crashed",
    "failed": "gave up before vLLM started",
}
BOOT_CACHE_NAMES = {
    "warm": "warm boot (compile cache restored from XLA_CACHE_BUCKET)",
    "cold": "cold boot (no compile cache: compiling from scratch)",
    "off": "cold boot, compile cache off",
}


def clock(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float) -> str:
    """A clock's reading, its two biggest units (`3h59m`, `9d`, `2m5s`): the one formatter."""
    return format_duration(timedelta(seconds=max(0, int(seconds))), parts=2)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fields_section(fields: list[tuple[str, str]]) -> dict:
    """A section of (name, value) fields, each within Slack's 2,000 characters a field."""
    return {"type": "section", "fields": [{"type": "mrkdwn", "text": truncate(f"*{name}*\n{value}", 2000)}
                                          for name, value in fields]}


def lease_fields(lease: Lease, now: float | None = None) -> list[tuple[str, str]]:
    now = now or time.time()
    state = lease.state
    fields = [
        ("State", STATE_BADGES.get(state, state.value)),
        ("Zone", lease.zone),
        ("Holder", f"<@{lease.holder}>"),
        ("Queued resource", f"`{lease.qr_id}`"),
        ("Requested", f"{clock(lease.created_at)} ({duration(now - lease.created_at)} ago)"),
    ]
    if state == LeaseState.WAITING_FOR_RESOURCES:
        fields.append(("Waiting for", duration(now - lease.state_since)))
        if lease.valid_until:
            # The queueing deadline (VALID_UNTIL_DURATION), not the lease's end: it was read as one.
            fields.append(("Waits for capacity until", f"{clock(lease.valid_until)} (in "
                                                       f"{duration(lease.valid_until - now)}); none by then → FAILED"))
    if state.holds_tpu and lease.active_at:
        fields.append(("TPU", f"{STATE_BADGES[LeaseState.ACTIVE]} since {clock(lease.active_at)}"))
    if lease.deadline:
        fields.append(("Cloud deadline", f"{clock(lease.deadline)} (in {duration(lease.deadline - now)})"))
    else:
        fields.append(("Run time", f"{duration(lease.run_seconds)}, counted from when the TPU starts"))
    if lease.endpoint:
        fields.append(("Endpoint", f"`{lease.endpoint}`"))
    if state.holds_tpu:
        # The second clock (agent/lease/idle.py): 0 means the model's metrics are not readable yet.
        fields.append(("Idle", duration(now - lease.idle_since) if lease.idle_since else "unknown (no metrics yet)"))
    return fields


def status_card(lease: Lease, now: float | None = None) -> tuple[str, list[dict]]:
    state = lease.state
    badge = STATE_BADGES.get(state, state.value)
    title = truncate(f"TPU {lease.zone} · {state.label}", 150)
    blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": title}},
                          fields_section(lease_fields(lease, now)[:10])]
    if model := model_fields(lease):
        blocks.append(fields_section(model))
    if lease.detail:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": truncate(detail_text(lease), 3000)}})
    blocks.append({
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": f"lease `{lease.lease_id}` · `/tpu status` · `/tpu down`"}],
    })
    if state in (LeaseState.BOOTING_MODEL, LeaseState.READY, LeaseState.DEGRADED) or (
            state == LeaseState.FAILED and lease.active_at):
        text = f"TPU {lease.zone}: {STATE_BADGES[LeaseState.ACTIVE]} · {badge} (lease {lease.lease_id})"
    else:
        text = f"TPU {lease.zone}: {badge} (lease {lease.lease_id})"
    if state in (LeaseState.READY, LeaseState.DEGRADED) and lease.ttft_ms:
        text += f" · TTFT {ms(lease.ttft_ms)}, TPOT {ms(lease.tpot_ms)}"
    if state == LeaseState.DEGRADED:
        text += f" · {escape(degraded_reason(lease))}"
    return text, blocks


def ms(value: float) -> str:
    return f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


def model_fields(lease: Lease) -> list[tuple[str, str]]:
    """The model's health: what answered, and TTFT/TPOT/tokens per second from one streamed request."""
    state = lease.state
    if state in (LeaseState.READY, LeaseState.DEGRADED):
        fields = [("Model", escape(lease.model_info) or "serving")]
        if lease.image:
            fields.append(("Image", f"`{escape(lease.image)}`"))
        if lease.ttft_ms:
            fields.append(("TTFT / TPOT", f"{ms(lease.ttft_ms)} / {ms(lease.tpot_ms)}"))
            fields.append(("Output", f"{lease.tokens_per_s:.0f} tokens/s (one stream)"))
        if lease.boot_cache:
            took = f", {duration(lease.state_since - lease.active_at)} from ACTIVE" if lease.active_at else ""
            fields.append(("Boot", BOOT_CACHE_NAMES.get(lease.boot_cache, lease.boot_cache) + took))
        if lease.boot_cache_note:
            fields.append(("Compile cache", escape(lease.boot_cache_note)))
        return fields
    if state == LeaseState.BOOTING_MODEL:
        return [("Model", f"booting for {duration(time.time() - lease.state_since)}"), *boot_fields(lease)]
    if state == LeaseState.FAILED:
        return boot_fields(lease)
    return []


def boot_fields(lease: Lease, now: float | None = None) -> list[tuple[str, str]]:
    """What the VM says of its boot: the phase and how long it has lasted, and warm or cold."""
    fields = []
    if lease.boot_phase:
        since = f" for {duration((now or time.time()) - lease.boot_phase_since)}" if lease.boot_phase_since else ""
        fields.append(("Boot phase", BOOT_PHASE_NAMES.get(lease.boot_phase, escape(lease.boot_phase)) + since))
    if lease.boot_retry and lease.state == LeaseState.BOOTING_MODEL:
        fields.append(("Retrying", escape(lease.boot_retry)))
    if lease.boot_cache:
        name = BOOT_CACHE_NAMES.get(lease.boot_cache, escape(lease.boot_cache))
        fields.append(("Compile cache", name + (f": {escape(lease.boot_cache_note)}" if lease.boot_cache_note else "")))
    return fields


def detail_text(lease: Lease) -> str:
    """The progress note, or for FAILED (DEGRADED) the reason (what failed) with its fix on a line of its own."""
    text = escape(lease.detail)
    state = lease.state
    if state in (LeaseState.FAILED, LeaseState.DEGRADED):
        reason, sep, fix = text.partition(" Fix: ")
        head = ":red_circle: *Reason:*" if state == LeaseState.FAILED else ":warning: *DEGRADED, what failed:*"
        return f"{head} {reason}" + (f"\n*Fix:* {fix}" if sep else "")
    return text


def released_card(lease: Lease, reason: str, by: str = "") -> tuple[str, list[dict]]:
    who = f" by <@{by}>" if by else ""
    text = f"TPU {lease.zone} released: {reason}{who}."
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": truncate(f"TPU {lease.zone} · RELEASED", 150)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": truncate(f"{escape(reason)}{who}.", 3000)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"lease `{lease.lease_id}` · QR `{lease.qr_id}`"}]},
    ]
    return text, blocks


def receipt_text(lease: Lease, now: float | None = None, by: str = "") -> str:
    now = now or time.time()
    ran = now - lease.active_at if lease.active_at else 0
    who = f" Torn down by <@{by}>." if by else ""
    return (
        f":receipt: Lease `{lease.lease_id}` in {lease.zone}: held {duration(now - lease.created_at)}, "
        f"TPU ran {duration(ran)}.{who}"
    )


def teardown_confirm_card(lease: Lease) -> tuple[str, list[dict]]:
    text = f"Tear down this channel's TPU in {lease.zone} (lease {lease.lease_id})?"
    blocks: list[dict] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f":warning: {text}\nThis deletes queued resource `{lease.qr_id}` and its node."}},
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button", "action_id": TEARDOWN_CONFIRM_ACTION, "style": "danger",
                    "text": {"type": "plain_text", "text": "Tear down"}, "value": lease.lease_id,
                    "confirm": {
                        "title": {"type": "plain_text", "text": "Tear down the TPU?"},
                        "text": {"type": "plain_text", "text": f"Deletes {lease.qr_id}; the model endpoint goes away."},
                        "confirm": {"type": "plain_text", "text": "Tear down"},
                        "deny": {"type": "plain_text", "text": "Keep it"},
                        "style": "danger",
                    },
                },
                {"type": "button", "action_id": TEARDOWN_CANCEL_ACTION,
                 "text": {"type": "plain_text", "text": "Cancel"}, "value": lease.lease_id},
            ],
        },
    ]
    return text, blocks


def zones_card(rows: list[dict], order: list[str], now: float | None = None, limit: int = 20) -> tuple[str, list[dict]]:
    """`/tpu zones`: the scoreboard in search order, as a monospaced table (Slack has no tables)."""
    now = now or time.time()
    header = f"{'zone':<24}{'last outcome':<24}{'when':<10}{'median→ACTIVE':<15}skipped until"
    lines = [header]
    for row in rows[:limit]:
        outcome = row["last_outcome"] or ("not offered" if row["offers"] is False else "—")
        when = f"{duration(now - row['last_at'])} ago" if row["last_at"] else "—"
        median = duration(row["median_seconds_to_active"]) if row["median_seconds_to_active"] is not None else "—"
        skipped = clock(row["skipped_until"]) if row["skipped_until"] else "—"
        rank = f"{row['search_rank']}. " if row["search_rank"] else "   "
        lines.append(f"{rank + row['zone']:<24}{outcome:<24}{when:<10}{median:<15}{skipped}")
    more = len(rows) - limit
    if more > 0:
        lines.append(f"… and {more} more")
    first = order[0] if order else None
    summary = (f"`/tpu up` without a zone tries {first} first ({len(order)} zones in play)." if first
               else "`/tpu up` without a zone has no zone to try right now: every zone is skipped or lacks the type.")
    table = truncate("\n".join(lines), 2990)
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": "Zone scoreboard"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{table}```"}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": summary + " Quota is not availability: only "
                                          "attempts count."}]},
    ]
    return f"Zone scoreboard: {summary}", blocks


def notice(text: str) -> tuple[str, list[dict]]:
    return text, [{"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}}]


def runbook_card(query: str, results: list[dict], summary: str) -> tuple[str, list[dict]]:
    """`/tpu runbook …`: one section per runbook section found, its sources and origin under it."""
    blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": truncate(f"Runbooks: {query}", 150)}}]
    for result in results[:10]:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": truncate(
            f"*{result['title']}* `{result['cite']}`\n{result['body']}", 3000)}})
        origin = result["origin"]
        # A team file is named, not its path on the bot's disk.
        where = origin if origin == "built-in" else f"from {origin if '://' in origin else origin.rsplit('/', 1)[-1]}"
        sources = ", ".join(f"<{url}>" if url.startswith("http") else url for url in result["sources"][:4])
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": truncate(
            f"{where}" + (f" · sources: {sources}" if sources else ""), 2000)}]})
    if not results:
        return notice(summary)
    return truncate(summary, 3000), blocks
