"""Confirm cards for proposals (provision/teardown suggested by the agent) and their buttons.

The button value is the proposal id only. On click the clicker is checked by
`agent.llm.proposals.confirm` (holder or admin for teardown; `/tpu up`'s rules for provision):
anyone in the channel can click, so whoever asked for the card proves nothing.
"""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from agent.llm import proposals
from agent.context import Services
from agent.llm.proposals import Proposal
from handlers import cards
from handlers.clicks import clicked_value, clicker, on_click

PROPOSAL_CONFIRM_ACTION = "proposal_confirm"
PROPOSAL_DISMISS_ACTION = "proposal_dismiss"


def proposal_card(proposal: Proposal) -> tuple[str, list[dict]]:
    what = proposal.describe()
    who = ("Only the TPU's holder or an admin can confirm." if proposal.action == "teardown"
           else "Anyone who may run `/tpu up` here can confirm.")
    text = f"Proposed: {what}. Nothing happens until someone confirms."
    confirm = {
        "type": "button", "action_id": PROPOSAL_CONFIRM_ACTION, "value": proposal.id,
        "text": {"type": "plain_text", "text": proposal.label[:75]},
        "style": "danger" if proposal.action == "teardown" else "primary",
    }
    if proposal.action == "teardown":
        confirm["confirm"] = {
            "title": {"type": "plain_text", "text": "Tear down the TPU?"},
            "text": {"type": "plain_text", "text": "The queued resource and its node are deleted; the model goes away."},
            "confirm": {"type": "plain_text", "text": "Tear down"},
            "deny": {"type": "plain_text", "text": "Keep it"},
            "style": "danger",
        }
    blocks: list[dict] = [
        {"type": "section", "text": {"type": "mrkdwn",
                                     "text": f":robot_face: *Proposed:* {cards.escape(what)}.\n{who}"}},
        {"type": "actions", "elements": [
            confirm,
            {"type": "button", "action_id": PROPOSAL_DISMISS_ACTION, "value": proposal.id,
             "text": {"type": "plain_text", "text": "Dismiss"}},
        ]},
        {"type": "context", "elements": [{"type": "mrkdwn",
                                          "text": f"asked by <@{proposal.proposed_for}> · proposal `{proposal.id}`"}]},
    ]
    return text, blocks


def register(app: AsyncApp, svc: Services) -> None:
    async def handle_proposal_confirm(body: dict) -> dict:
        actor = clicker(body)
        outcome = await proposals.confirm(svc, actor, clicked_value(body))
        if outcome.ok:
            return dict(replace_original=True, text=f":white_check_mark: <@{actor.user_id}> confirmed. "
                                                    f"{outcome.message} The status card shows progress.")
        return dict(text=f":no_entry: {outcome.message}", replace_original=False, response_type="ephemeral")

    async def handle_proposal_dismiss(body: dict) -> dict:
        outcome = await proposals.dismiss(svc, clicker(body), clicked_value(body))
        return dict(text=outcome.message, replace_original=outcome.ok)

    on_click(app, PROPOSAL_CONFIRM_ACTION, handle_proposal_confirm)
    on_click(app, PROPOSAL_DISMISS_ACTION, handle_proposal_dismiss)
