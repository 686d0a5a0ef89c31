"""`/tpu …`: parse, run the subcommand's action inside the ack window, answer ephemerally; and the
buttons of `/tpu down`'s confirm card (the clicker is re-checked: anyone can click)."""

from __future__ import annotations

import logging

from pydantic import BaseModel, ValidationError
from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from agent.actions import ActionResult, ActionStatus, get_action, run_action
from agent.actions.bench_actions import BenchRequest
from agent.actions.registry import Declined, first_error, validate_args
from agent.actions.lease_actions import PRICED_ZONES_ONLY, AlreadyHeld, ChannelLease, Requested, TeardownOf
from agent.actions.runbook_actions import RunbookHits
from agent.actions.zone_actions import ZoneBoard
from agent.lease import lifecycle
from agent.lease.budget import MonthSpend
from agent.context import Actor, ChannelDeps, Services
from handlers import cards
from handlers.ask_job import ASK_JOB, AskJob, ask_job_id
from handlers.clicks import clicked_value, clicker, on_click
from handlers.commands import CommandError, ParsedCommand, help_text, parse
from handlers.late_answers import LATE_FAILURE, LateAnswers, state_store_notice

log = logging.getLogger(__name__)

STILL_WORKING = ":hourglass_flowing_sand: The state store is slow to answer; the result of this command follows here."


def register(app: AsyncApp, svc: Services) -> None:
    late_answers: LateAnswers[tuple[str, list[dict]]] = LateAnswers()

    @app.command("/tpu")
    async def handle_tpu_command(ack: AsyncAck, respond: AsyncRespond, command: dict) -> None:
        async def answer_late(answer: tuple[str, list[dict]]) -> None:
            text, blocks = answer
            await respond(text=text, blocks=blocks, response_type="ephemeral")

        async def say_it_failed() -> None:
            await respond(text=LATE_FAILURE, response_type="ephemeral")

        answer = await late_answers.within_budget(answer_command(svc, command), answer_late, say_it_failed)
        text, blocks = answer or cards.notice(STILL_WORKING)
        await ack(text=text, blocks=blocks, response_type="ephemeral")

    async def handle_teardown_confirm(body: dict) -> dict:
        outcome = await lifecycle.confirm_teardown(svc, clicker(body), clicked_value(body))
        if outcome.ok and outcome.lease is not None:
            return dict(replace_original=True,
                        text=f":wastebasket: Tearing down `{outcome.lease.qr_id}`… the status card shows progress.")
        return dict(text=f":no_entry: {outcome.message}", replace_original=False, response_type="ephemeral")

    async def handle_teardown_cancel(body: dict) -> dict:
        return dict(text="Kept the TPU; nothing changed.", replace_original=True)

    on_click(app, cards.TEARDOWN_CONFIRM_ACTION, handle_teardown_confirm)
    on_click(app, cards.TEARDOWN_CANCEL_ACTION, handle_teardown_cancel)


async def answer_command(svc: Services, command: dict) -> tuple[str, list[dict]]:
    actor = Actor(user_id=command["user_id"], team=command.get("team_id", ""), channel=command["channel_id"])
    try:
        parsed = parse(command.get("text", ""))
        if parsed.action is None:
            return cards.notice(help_text())
        if parsed.queued:
            return await queue_subcommand(svc, actor, parsed, command)
        return await run_subcommand(svc, actor, parsed)
    except CommandError as error:
        return cards.notice(f":warning: {error}")
    except RedisError as error:
        log.exception("state store failed during /tpu (%s)", type(error).__name__)
        return cards.notice(state_store_notice(error))


def validated_args(svc: ChannelDeps, parsed: ParsedCommand) -> BaseModel:
    action = get_action(parsed.action or "")
    assert action is not None, "the parser yields registered actions only"
    try:
        return validate_args(action, parsed.args, svc)
    except ValidationError as error:
        problem = first_error(error)
        # Upper-case the first letter only: str.capitalize() would lower-case ids and formats (YYYY-MM,
        # C0123). A queued subcommand's (`/tpu ask`) problem has always been said capitalize()d.
        problem = problem.capitalize() if parsed.queued else f"{problem[:1].upper()}{problem[1:]}"
        raise CommandError(f"{problem}. Usage: `{parsed.usage}`") from None


async def queue_subcommand(svc: ChannelDeps, actor: Actor, parsed: ParsedCommand,
                           command: dict) -> tuple[str, list[dict]]:
    args = validated_args(svc, parsed)
    await svc.jobs.enqueue(ASK_JOB, AskJob(team=actor.team, channel=actor.channel, user_id=actor.user_id,
                                                response_url=command.get("response_url", ""),
                                                # `images` are local files (MCP, the shell): a Slack command has none
                                                **args.model_dump(exclude={"images"})),
                                job_id=ask_job_id(actor.team, actor.channel, command.get("trigger_id", "")))
    return cards.notice(":hourglass_flowing_sand: Asking this channel's model; the answer and its timings "
                        "follow here.")


async def run_subcommand(svc: Services, actor: Actor, parsed: ParsedCommand) -> tuple[str, list[dict]]:
    result = await run_action(parsed.action or "", svc, actor, validated_args(svc, parsed))
    if result.status is ActionStatus.DENIED:
        return cards.notice(f":no_entry: {result.text}")
    return render_result(svc, result)


DECLINED_ICONS = {
    Declined.PREFLIGHT_FAILED: ":stop_sign:",
    Declined.BUDGET: ":money_with_wings:",
    Declined.NOT_IN_CHANNEL: ":warning:",
}


def render_result(svc: ChannelDeps, result: ActionResult) -> tuple[str, list[dict]]:
    """By the payload's type, never the action's name: a subcommand renamed or added keeps its card."""
    match result.payload:
        case Declined() as reason:
            return cards.notice(f"{DECLINED_ICONS[reason]} {result.text}")
        case Requested(lease, priced_zones_only):
            search = "" if lease.zone_explicit else " If that zone refuses, the best-known other zones are tried."
            if priced_zones_only:
                search = (" If that zone refuses, the best-known other zones are tried — "
                          f"{PRICED_ZONES_ONLY.format(zones=', '.join(priced_zones_only))}.")
            return cards.notice(
                f":white_check_mark: Requested a {svc.policy.accelerator_type} flex-start TPU in {lease.zone} "
                f"for {cards.duration(lease.run_seconds)} (lease `{lease.lease_id}`).{search} The status card follows in this channel."
            )
        case AlreadyHeld(lease):
            return cards.notice(
                f":lock: This channel's TPU is held by <@{lease.holder}> since {cards.clock(lease.created_at)} "
                f"(lease `{lease.lease_id}`, {lease.state.label}, {lease.zone}). Nothing new was created. "
                "See `/tpu status`; the holder or an admin can release it with `/tpu down`."
            )
        case ChannelLease(lease):
            return cards.status_card(lease) if lease else cards.notice("This channel holds no TPU. Start one with `/tpu up`.")
        case BenchRequest(queued):
            return cards.notice(f":stopwatch: {result.text}" if queued else f":warning: {result.text}")
        case MonthSpend():
            from handlers.spend_view import spend_sections

            return result.text[:3000], spend_sections(result.text)
        case RunbookHits(query, results):
            return cards.runbook_card(query, results, result.text)
        case ZoneBoard(zones, order):
            return cards.zones_card(zones, order)
        case TeardownOf(lease) if lease is not None:
            return cards.teardown_confirm_card(lease)
        case TeardownOf():
            return cards.notice(f":no_entry: {result.text}")
    return cards.notice(result.text)
