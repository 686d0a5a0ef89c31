"""The lease observer that keeps one Slack status card per lease current."""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from handlers import cards
from infra.state.leases import Lease, LeaseStore

log = logging.getLogger(__name__)


class SlackLeaseObserver:
    def __init__(self, client: AsyncWebClient, leases: LeaseStore,
                 receipt: Callable[[Lease, str, str], Awaitable[str]] | None = None) -> None:
        self._client = client
        self._leases = leases
        self._receipt = receipt  # the cost receipt (handlers/alerts.receipt_writer); None: a plain one

    async def lease_changed(self, lease: Lease) -> Lease:
        text, blocks = cards.status_card(lease)
        if lease.card_ts:
            try:
                await self._client.chat_update(channel=lease.card_channel, ts=lease.card_ts, text=text, blocks=blocks)
                return lease
            except SlackApiError as error:
                # A deleted card is re-posted; anything else is worth a log line, not a crash.
                if error.response.get("error") != "message_not_found":
                    log.warning("chat.update failed for lease %s: %s", lease.lease_id, error.response.get("error"))
                    return lease
        response = await self._client.chat_postMessage(
            channel=lease.channel, text=text, blocks=blocks, unfurl_links=False, unfurl_media=False
        )
        updated = await self._leases.update(lease, card_channel=response["channel"], card_ts=response["ts"])
        return updated or lease

    async def lease_released(self, lease: Lease, *, reason: str, by: str = "") -> None:
        text, blocks = cards.released_card(lease, reason, by)
        if lease.card_ts:
            await self._client.chat_update(channel=lease.card_channel, ts=lease.card_ts, text=text, blocks=blocks)
            receipt = await self._receipt(lease, reason, by) if self._receipt else cards.receipt_text(lease, by=by)
            await self._client.chat_postMessage(
                channel=lease.card_channel, thread_ts=lease.card_ts, text=receipt,
                unfurl_links=False, unfurl_media=False,
            )
        else:
            await self._client.chat_postMessage(channel=lease.channel, text=text, blocks=blocks)
