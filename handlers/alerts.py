"""Alerts in Slack: Block Kit for alerts and receipts, the `AlertSink` that posts them, and the
alert's buttons: "Tear down now" (into the usual confirm flow) and "Acknowledge".

An alert goes to the channel (mentioning whoever is on call) with unfurls off, and a one-line
reference goes into the lease's status-card thread. Text that is not ours is escaped; the
mention tokens are validated ones (agent/lease/oncall.py), so they stay live and page people.

Anyone can click a button in a channel, so the clicker is checked, and a button from an old
alert never acts on the channel's newer lease: the lease id in the button must match.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.actions import lease_actions, run_action
from agent.lease import oncall, receipts
from agent.lease.alerts import ACK_IDLE
from agent.context import Alert, Alerting, Services
from handlers import cards
from handlers.cards import duration, escape
from handlers.clicks import clicker, on_click
from infra import prices
from infra.state.leases import Lease

log = logging.getLogger(__name__)

ALERT_TEARDOWN_ACTION = "alert_teardown"
ALERT_ACK_ACTION = "alert_ack"
LATE_MARK = "late"
GONE = "That alert's TPU is already gone; nothing changed."


def _hhmm(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%H:%M UTC")


def button_value(lease_id: str, ack_kind: str) -> str:
    return f"{lease_id}|{ack_kind}"


def parse_button_value(value: str) -> tuple[str, str]:
    lease_id, _, kind = str(value)[:100].partition("|")
    return lease_id, kind


def alert_message(alert: Alert) -> tuple[str, list[dict]]:
    lease = alert.lease
    mentions = " ".join(alert.mentions)
    # A late alert's worker was down across its time, or every worker was busy: nothing at send
    # time tells the two apart, so the words claim neither.
    late = f" ({LATE_MARK} by {duration(alert.late_by)}: the bot's workers were down or busy at its time)" \
        if alert.late_by else ""
    icon = ":alarm_clock:" if alert.marker == "expiry" else ":warning:"
    title = escape(alert.title)
    text = f"{icon} {title}{late} {mentions}".strip()
    blocks: list[dict] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"{icon} *{title}*{escape(late)}\n{escape(alert.body)}"[:3000]}},
    ]
    context = [f"lease `{lease.lease_id}`", f"zone {escape(lease.zone)}"]
    if lease.deadline:
        context.append(f"deadline {_hhmm(lease.deadline)}")
    if alert.cost_so_far is not None:
        context.append(f"cost so far {prices.money(alert.cost_so_far)}")
    if mentions:
        context.insert(0, f"on call: {mentions}")
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)[:3000]}]})
    if alert.ack_kind:
        ack_label = "Keep it (acknowledge)" if alert.ack_kind == ACK_IDLE else "Acknowledge"
        value = button_value(lease.lease_id, alert.ack_kind)
        blocks.append({"type": "actions", "elements": [
            {"type": "button", "action_id": ALERT_TEARDOWN_ACTION, "style": "danger", "value": value,
             "text": {"type": "plain_text", "text": "Tear down now"}},
            {"type": "button", "action_id": ALERT_ACK_ACTION, "value": value,
             "text": {"type": "plain_text", "text": ack_label}},
        ]})
    return text, blocks


def receipt_text(receipt: receipts.Receipt) -> str:
    lines = [f":receipt: *Receipt* for lease `{receipt.lease_id}` in {escape(receipt.zone)} "
             f"(queued resource `{receipt.qr_id}`): {escape(receipt.reason)}."]
    hours = receipt.billed_seconds / 3600
    if receipt.usd_per_chip_hour is not None and receipt.cost is not None:
        lines.append(f"TPU time {duration(receipt.billed_seconds)} ({hours:.2f} h) × "
                     f"{prices.hourly(receipt.usd_per_chip_hour, 'chip-hour')} × {receipt.chips} "
                     f"chip{'s' if receipt.chips != 1 else ''} = *{prices.money(receipt.cost)}* ({escape(receipt.price_source)}).")
    else:
        lines.append(f"TPU time {duration(receipt.billed_seconds)}; no price in the table for this TPU, "
                     "so no cost (add it to PRICES in tpu.env).")
    if receipt.requests is None:
        lines.append("Usage: unknown (the model's metrics were never readable).")
    else:
        requests, tokens = int(receipt.requests), int(receipt.output_tokens or 0)
        usage = (f"Served {requests:,} request{'s' if requests != 1 else ''} and {tokens:,} output "
                 f"token{'s' if tokens != 1 else ''}")
        per_m = receipt.usd_per_million_output_tokens
        lines.append(usage + (f": {prices.money(per_m)} per million output tokens." if per_m is not None else "."))
    for ack in receipt.acks:
        what = "the idle warning" if ack.kind == ACK_IDLE else "the deadline warning"
        lines.append(f"<@{ack.user}> acknowledged {what} at {_hhmm(ack.at)}.")
    if receipt.torn_down_by:
        lines.append(f"Torn down by <@{receipt.torn_down_by}> at {_hhmm(receipt.ended_at)}.")
    else:
        lines.append(f"Ended at {_hhmm(receipt.ended_at)}.")
    return "\n".join(lines)


def receipt_writer(alerting: Alerting, accelerator: str) -> Callable[[Lease, str, str], Awaitable[str]]:
    """What the status-card observer calls for the receipt text when a lease is released."""

    async def write(lease: Lease, reason: str, by: str) -> str:
        return receipt_text(await receipts.build_receipt(alerting, accelerator, lease, reason=reason, by=by))

    return write


class SlackAlertSink:
    def __init__(self, client: AsyncWebClient, *, admins: tuple[str, ...] = (), admin_channel: str = "") -> None:
        self._client = client
        self._admins = admins
        self._admin_channel = admin_channel

    async def post_alert(self, alert: Alert) -> None:
        text, blocks = alert_message(alert)
        lease = alert.lease
        await self._client.chat_postMessage(channel=lease.channel, text=text, blocks=blocks,
                                            unfurl_links=False, unfurl_media=False)
        if lease.card_ts:
            # The reference in the lease's thread is best effort: the alert itself is out.
            try:
                await self._client.chat_postMessage(
                    channel=lease.card_channel or lease.channel, thread_ts=lease.card_ts,
                    text=f":bell: {escape(alert.title)} (alert posted in the channel)",
                    unfurl_links=False, unfurl_media=False)
            except SlackApiError as error:
                log.warning("thread reference for %s failed: %s", lease.lease_id, error.response.get("error"))

    async def post_notice(self, channel: str, text: str, *, thread_ts: str = "") -> None:
        kwargs: dict[str, Any] = {"thread_ts": thread_ts} if thread_ts else {}
        await self._client.chat_postMessage(channel=channel, text=text, unfurl_links=False, unfurl_media=False,
                                            **kwargs)

    async def notify_admins(self, text: str) -> None:
        targets = [self._admin_channel] if self._admin_channel else list(self._admins)
        if not targets:
            log.warning("no ADMINS or ADMIN_CHANNEL to tell: %s", text)
        for target in targets:
            await self._client.chat_postMessage(channel=target, text=text, unfurl_links=False, unfurl_media=False)


def register(app: AsyncApp, svc: Services) -> None:
    async def handle_alert_teardown(body: dict) -> dict:
        return await teardown_from_alert(svc, body)

    async def handle_alert_ack(body: dict) -> dict:
        actor = clicker(body)
        lease_id, kind = parse_button_value(body["actions"][0].get("value", ""))
        outcome = await oncall.acknowledge(svc, actor, lease_id, kind)
        visible = outcome.ok and outcome.changed
        return dict(text=f":white_check_mark: {outcome.text}" if visible else outcome.text,
                    replace_original=False, response_type="in_channel" if visible else "ephemeral")

    on_click(app, ALERT_TEARDOWN_ACTION, handle_alert_teardown)
    on_click(app, ALERT_ACK_ACTION, handle_alert_ack)


async def teardown_from_alert(svc: Services, body: dict) -> dict:
    """The reply to "Tear down now": the usual confirm card, if the alert's lease is still the channel's."""
    actor = clicker(body)
    lease_id, _kind = parse_button_value(body["actions"][0].get("value", ""))
    lease = await svc.leases.get(actor.team, actor.channel)
    if lease is None or lease.lease_id != lease_id:
        return dict(text=GONE, replace_original=False, response_type="ephemeral")
    result = await run_action(lease_actions.teardown, svc, actor, {})
    if isinstance(result.payload, lease_actions.TeardownOf) and result.payload.lease:
        text, blocks = cards.teardown_confirm_card(result.payload.lease)
        return dict(text=text, blocks=blocks, replace_original=False, response_type="ephemeral")
    return dict(text=f":no_entry: {result.text}", replace_original=False, response_type="ephemeral")
