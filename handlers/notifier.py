"""The lease observer that keeps one Slack status card per lease current.

A channel the bot cannot post in any more (removed, archived) does not crash the job that
noticed: the holder is told once by DM (posting to a user id opens the app's DM with them),
the channel is marked in Redis so `/tpu up` there answers with the fix, and lease_changed
raises ChannelUnreachable so the lifecycle decides what it means for the lease.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import ChannelUnreachable
from handlers import cards
from infra.state.leases import Lease, LeaseState, LeaseStore
from infra.state.conversations import ChannelMembership

log = logging.getLogger(__name__)

# Slack's answers meaning "the bot cannot post in this conversation".
UNREACHABLE = frozenset({"not_in_channel", "channel_not_found", "is_archived"})


def slack_error(error: SlackApiError) -> str:
    data = error.response.data if isinstance(error.response.data, dict) else {}
    return str(data.get("error") or error.response.status_code)


def lost_channel_text(lease: Lease) -> str:
    return (f":warning: I can't post in <#{lease.channel}> any more, so the status card of your TPU "
            f"`{lease.qr_id}` ({lease.state.value}) there has stopped updating. The TPU itself is unaffected and is still "
            f"released at its deadline. To follow it, `/invite @tpubot` in <#{lease.channel}>; to release it now, "
            "run `/tpu down` there.")


def released_text(lease: Lease, reason: str) -> str:
    return (f":wastebasket: Your TPU `{lease.qr_id}` in <#{lease.channel}> was released ({reason}). I can't post "
            f"in <#{lease.channel}> any more, so its status card there was not updated.")


class SlackLeaseObserver:
    def __init__(self, client: AsyncWebClient, leases: LeaseStore,
                 receipt: Callable[[Lease, str, str], Awaitable[str]] | None = None,
                 membership: ChannelMembership | None = None) -> None:
        self._client = client
        self._leases = leases
        self._receipt = receipt  # the cost receipt (handlers/alerts.receipt_writer); None: a plain one
        self._membership = membership

    async def lease_changed(self, lease: Lease) -> Lease:
        text, blocks = cards.status_card(lease)
        if lease.card_ts:
            try:
                await self._client.chat_update(channel=lease.card_channel, ts=lease.card_ts, text=text, blocks=blocks)
                return lease
            except SlackApiError as error:
                reason = slack_error(error)
                if reason in UNREACHABLE:
                    raise await self._unreachable(lease, reason) from None
                # A deleted card is re-posted; anything else is worth a log line, not a crash.
                if reason != "message_not_found":
                    log.warning("chat.update failed for lease %s: %s", lease.lease_id, reason)
                    return lease
        try:
            response = await self._client.chat_postMessage(
                channel=lease.channel, text=text, blocks=blocks, unfurl_links=False, unfurl_media=False
            )
        except SlackApiError as error:
            reason = slack_error(error)
            if reason in UNREACHABLE:
                raise await self._unreachable(lease, reason) from None
            raise
        if self._membership is not None:
            await self._membership.record(lease.team, lease.channel, member=True)
        updated = await self._leases.update(lease, card_channel=response["channel"], card_ts=response["ts"])
        return updated or lease

    async def lease_released(self, lease: Lease, *, reason: str, by: str = "") -> None:
        text, blocks = cards.released_card(lease, reason, by)
        try:
            if lease.card_ts:
                await self._client.chat_update(channel=lease.card_channel, ts=lease.card_ts, text=text, blocks=blocks)
                receipt = await self._receipt(lease, reason, by) if self._receipt else cards.receipt_text(lease, by=by)
                await self._client.chat_postMessage(
                    channel=lease.card_channel, thread_ts=lease.card_ts, text=receipt,
                    unfurl_links=False, unfurl_media=False,
                )
            else:
                await self._client.chat_postMessage(channel=lease.channel, text=text, blocks=blocks)
        except SlackApiError as error:
            if slack_error(error) not in UNREACHABLE:
                raise
            # The release itself is done; the channel just cannot hear about it.
            await self._unreachable(lease, slack_error(error), released_text(lease, reason))

    async def tell_holder(self, lease: Lease, text: str) -> None:
        """A DM to the lease's holder (best effort: a failed DM is logged, not raised)."""
        try:
            await self._client.chat_postMessage(channel=lease.holder, text=text, unfurl_links=False, unfurl_media=False)
        except SlackApiError as error:
            log.warning("could not DM %s about lease %s: %s", lease.holder, lease.lease_id, slack_error(error))

    async def _unreachable(self, lease: Lease, reason: str, text: str = "") -> ChannelUnreachable:
        """Mark the channel; the first time, tell the holder (a PENDING lease's job says it itself)."""
        log.warning("cannot post in %s for lease %s: %s", lease.channel, lease.lease_id, reason)
        first_news = True
        if self._membership is not None:
            first_news = await self._membership.record(lease.team, lease.channel, member=False)
        if first_news and lease.state != LeaseState.PENDING:
            await self.tell_holder(lease, text or lost_channel_text(lease))
        return ChannelUnreachable(lease.channel, reason)
