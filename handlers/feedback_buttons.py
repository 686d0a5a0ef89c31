"""👍/👎 under each answer (issue 32): the answer is kept with the model that made it and the
digest of its input (infra/state/feedback.py); a click keeps the clicker's vote and tells only
them. `tpubot feedback` reports the ratio."""

from __future__ import annotations

import logging
import secrets
import time

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import ThreadDeps
from agent.llm.material import MentionInput, prompt_digest
from agent.llm.run import AgentRun
from handlers.clicks import clicked_value, clicker, on_click
from handlers.notifier import slack_error
from handlers.thread_reply import ThreadReply, answer_text
from infra.state.feedback import Answer, Vote

log = logging.getLogger(__name__)

FEEDBACK_UP_ACTION = "feedback_up"
FEEDBACK_DOWN_ACTION = "feedback_down"
ASK_TEXT = "Was this answer useful?"
MODEL_LESS = "model-less"
ASK_CORRECTION = ("What should it have said? Reply in this thread: your next reply is kept with this rating, "
                  "and `tpubot feedback --export-evals DIR` turns it into an eval case.")


def model_of(run: AgentRun) -> str:
    """The model an answer came from, as the footer names it ("Answered by X in 2 steps…")."""
    if not run.used_model:
        return MODEL_LESS
    return run.label.removeprefix("Answered by ").split(" in ")[0][:120] or "model"


def feedback_blocks(answer_id: str) -> list[dict]:
    return [{"type": "actions", "elements": [
        {"type": "button", "action_id": FEEDBACK_UP_ACTION, "value": answer_id,
         "text": {"type": "plain_text", "text": ":+1: Useful", "emoji": True}},
        {"type": "button", "action_id": FEEDBACK_DOWN_ACTION, "value": answer_id,
         "text": {"type": "plain_text", "text": ":-1: Not useful", "emoji": True}},
    ]}]


async def offer_feedback(svc: ThreadDeps, client: AsyncWebClient, reply: ThreadReply, run: AgentRun,
                         mention: MentionInput) -> None:
    """Keep the finished answer and put the two buttons under it. Best effort: the answer stands
    whether or not its buttons could be offered."""
    answer_id = secrets.token_hex(8)
    try:
        await svc.feedback.record_answer(Answer(
            answer_id=answer_id, team=reply.team, channel=reply.channel, thread_ts=reply.thread_ts,
            model=model_of(run), prompt_digest=prompt_digest(mention), text=answer_text(run, reply.redactor),
            at=time.time()))
        if mention.has_logs:  # the makings of an eval case, should the answer be rated 👎 and corrected
            await svc.feedback.record_input(answer_id, mention.request, mention.log_lines())
        await client.chat_postMessage(channel=reply.channel, thread_ts=reply.thread_ts, text=ASK_TEXT,
                                      blocks=feedback_blocks(answer_id), unfurl_links=False, unfurl_media=False)
    except (RedisError, SlackApiError) as error:
        detail = slack_error(error) if isinstance(error, SlackApiError) else type(error).__name__
        log.warning("could not offer feedback buttons (%s)", detail)


def register(app: AsyncApp, svc: ThreadDeps) -> None:
    async def handle_up(body: dict) -> dict:
        return await reply_to_vote(svc, body, "up")

    async def handle_down(body: dict) -> dict:
        return await reply_to_vote(svc, body, "down")

    on_click(app, FEEDBACK_UP_ACTION, handle_up)
    on_click(app, FEEDBACK_DOWN_ACTION, handle_down)


async def reply_to_vote(svc: ThreadDeps, body: dict, vote: Vote) -> dict:
    text = await record_vote(svc, clicked_value(body), clicker(body).user_id, vote)
    return dict(text=text, replace_original=False, response_type="ephemeral")


async def record_vote(svc: ThreadDeps, answer_id: str, user: str, vote: Vote) -> str:
    answer = await svc.feedback.answer(answer_id)
    if answer is None:
        return "That answer is too old to rate; nothing was recorded."
    previous = await svc.feedback.vote(answer_id, user, vote)
    if vote == "up":
        # A useful answer ends its incident (if the thread is one): it is citable when it comes back.
        await svc.memory.end(answer.team, answer.channel, answer.thread_ts)
    asks = vote == "down" and await svc.feedback.await_correction(answer, user)
    shown = ":+1:" if vote == "up" else ":-1:"
    if previous == vote:
        return f"You already rated this answer {shown}."
    thanks = f"Thanks: recorded {shown}" + (" (in place of your earlier rating)." if previous else ".")
    return thanks + (f" {ASK_CORRECTION}" if asks else "")
