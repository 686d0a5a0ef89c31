"""The slack-bolt app: listeners for `/tpu`, the teardown buttons and mentions.

Listeners parse, ack within Slack's 3 s, and call actions; anything slow is a worker job.
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from agent import lifecycle
from agent.context import Actor, Services
from handlers import cards
from handlers.commands import CommandError, CommandLimits, help_text, parse

log = logging.getLogger(__name__)

STATE_STORE_DOWN = ":warning: The state store is unavailable, so nothing changed. Try again in a minute."


def build_bolt_app(services: Services, *, client: AsyncWebClient, signing_secret: str, limits: CommandLimits) -> AsyncApp:
    app = AsyncApp(client=client, signing_secret=signing_secret, process_before_response=False)

    @app.command("/tpu")
    async def handle_tpu_command(ack: AsyncAck, command: dict) -> None:
        actor = Actor(user_id=command["user_id"], team=command.get("team_id", ""), channel=command["channel_id"])
        try:
            parsed = parse(command.get("text", ""), limits)
        except CommandError as error:
            await ack(text=f":warning: {error}", response_type="ephemeral")
            return
        try:
            text, blocks = await _run_subcommand(services, actor, parsed.name, parsed.args)
        except RedisError:
            log.exception("state store unavailable during /tpu %s", parsed.name)
            text, blocks = cards.notice(STATE_STORE_DOWN)
        await ack(text=text, blocks=blocks, response_type="ephemeral")

    @app.action(cards.TEARDOWN_CONFIRM_ACTION)
    async def handle_teardown_confirm(ack: AsyncAck, body: dict, respond: AsyncRespond) -> None:
        await ack()
        actor = _clicker(body)
        lease_id = str(body["actions"][0].get("value", ""))[:64]
        try:
            outcome = await lifecycle.confirm_teardown(services, actor, lease_id)
        except RedisError:
            await respond(text=STATE_STORE_DOWN, replace_original=False, response_type="ephemeral")
            return
        if outcome.ok:
            await respond(text=f":wastebasket: Tearing down `{outcome.lease.qr_id}`… the status card shows progress.",
                          replace_original=True)
        else:
            await respond(text=f":no_entry: {outcome.message}", replace_original=False, response_type="ephemeral")

    @app.action(cards.TEARDOWN_CANCEL_ACTION)
    async def handle_teardown_cancel(ack: AsyncAck, respond: AsyncRespond) -> None:
        await ack()
        await respond(text="Kept the TPU; nothing changed.", replace_original=True)

    @app.event("app_mention")
    async def handle_mention(event: dict, say) -> None:
        # The agent (summaries, proposals) arrives with the agent issue; until then say what works.
        await say(text="I can't read logs yet. Try `/tpu help`.", thread_ts=event.get("thread_ts") or event["ts"])

    return app


def _clicker(body: dict) -> Actor:
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
    team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id", "")
    return Actor(user_id=body["user"]["id"], team=team, channel=channel)


async def _run_subcommand(services: Services, actor: Actor, name: str, args: dict) -> tuple[str, list[dict]]:
    if name == "help":
        return cards.notice(help_text())
    if name == "up":
        outcome = await lifecycle.request_provision(services, actor, zone=args.get("zone"), hours=args.get("hours"))
        lease = outcome.lease
        if outcome.created:
            return cards.notice(
                f":white_check_mark: Requested a {services.policy.accelerator_type} flex-start TPU in {lease.zone} "
                f"for {cards.duration(lease.run_seconds)} (lease `{lease.lease_id}`). The status card follows in this channel."
            )
        return cards.notice(
            f":lock: This channel's TPU is held by <@{lease.holder}> since {cards.clock(lease.created_at)} "
            f"(lease `{lease.lease_id}`, {lease.state}, {lease.zone}). Nothing new was created. "
            "See `/tpu status`; the holder or an admin can release it with `/tpu down`."
        )
    if name == "status":
        lease = await services.leases.get(actor.team, actor.channel)
        if lease is None:
            return cards.notice("This channel holds no TPU. Start one with `/tpu up`.")
        return cards.status_card(lease)
    if name == "down":
        outcome = await lifecycle.request_teardown(services, actor)
        if not outcome.ok:
            return cards.notice(f":no_entry: {outcome.message}")
        return cards.teardown_confirm_card(outcome.lease)
    raise AssertionError(f"unrouted subcommand {name}")
