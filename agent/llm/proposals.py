"""Proposals: a WRITE action (provision, teardown) suggested by the model or the intent rules.

Nothing acts when a proposal is made. It is stored (infra/state/feedback.py) and shown as a
confirm card; the action runs only when a person clicks Confirm, and the clicker is checked
then — not whoever asked — with the same rules as the slash command: teardown needs the
lease's holder or an admin (`lease_actions.request_teardown` / `confirm_teardown`), provision
whatever `/tpu up` needs. The card's button carries only the proposal id.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from agent.actions import get_action, lease_actions, run_action
from agent.context import Actor, AgentDeps, ChannelDeps, Services
from infra.state.leases import Lease
from infra.state.feedback import new_proposal_id

EXPIRED = "This proposal expired or was already handled; nothing changed."


@dataclass
class Proposal:
    id: str
    action: str
    args: dict
    team: str
    channel: str
    proposed_for: str  # the person whose request led to it
    lease_id: str = ""  # teardown: the lease it is about (a newer lease is not torn down by an old card)
    created_at: float = field(default_factory=time.time)
    label: str = ""  # the confirm button's text

    def describe(self) -> str:
        if self.action == "provision":
            zone = self.args.get("zone") or "the default zone"
            hours = self.args.get("hours")
            return f"Provision a TPU in {zone}" + (f" for {hours:g}h" if hours else "")
        if self.action == "teardown":
            return "Tear down this channel's TPU" + (f" (lease `{self.lease_id}`)" if self.lease_id else "")
        return f"Run `{self.action}` with {self.args}"


@dataclass(frozen=True)
class ProposalCheck:
    ok: bool
    message: str  # why not (for the model / the person), when not ok
    lease: Lease | None = None


@dataclass(frozen=True)
class ProposalOutcome:
    ok: bool
    message: str
    lease: Lease | None = None


async def precheck(svc: ChannelDeps, actor: Actor, action_name: str) -> ProposalCheck:
    """Would a card make sense at all? (No teardown card for a channel without a TPU.)"""
    lease = await svc.leases.get(actor.team, actor.channel)
    if action_name == "teardown":
        if lease is None:
            return ProposalCheck(False, "This channel holds no TPU, so there is nothing to tear down.")
        return ProposalCheck(True, "", lease)
    if action_name == "provision" and lease is not None:
        return ProposalCheck(False, f"This channel already holds a TPU (lease {lease.lease_id}, {lease.state.value}, "
                                    f"holder <@{lease.holder}>); nothing new is needed.", lease)
    return ProposalCheck(True, "", lease)


async def propose(svc: AgentDeps, actor: Actor, action_name: str, args: dict, *, lease: Lease | None = None,
                  label: str = "") -> Proposal:
    proposal = Proposal(id=new_proposal_id(), action=action_name, args=args, team=actor.team,
                        channel=actor.channel, proposed_for=actor.user_id,
                        lease_id=lease.lease_id if lease is not None and action_name == "teardown" else "",
                        label=label or {"provision": "Provision", "teardown": "Tear down"}.get(action_name, "Confirm"))
    await svc.proposals.put(proposal.id, asdict(proposal))
    await svc.audit.record(actor=actor.user_id, action=f"propose:{action_name}", team=actor.team,
                           channel=actor.channel, outcome="proposed", detail=proposal.id)
    return proposal


async def load(svc: AgentDeps, proposal_id: str) -> Proposal | None:
    record = await svc.proposals.get(proposal_id)
    return Proposal(**record) if record else None


async def confirm(svc: Services, clicker: Actor, proposal_id: str) -> ProposalOutcome:
    proposal = await load(svc, proposal_id)
    if proposal is None or (proposal.team, proposal.channel) != (clicker.team, clicker.channel):
        return ProposalOutcome(False, EXPIRED)
    if proposal.action == "teardown":
        return await _confirm_teardown(svc, clicker, proposal)
    if get_action(proposal.action) is None:
        return ProposalOutcome(False, f"`{proposal.action}` is no longer an action; nothing changed.")
    # run_action checks the clicker's access; provision itself refuses a second lease.
    result = await run_action(proposal.action, svc, clicker, proposal.args)
    if result.ok:
        await svc.proposals.take(proposal.id)
    return ProposalOutcome(result.ok, result.text)


async def _confirm_teardown(svc: AgentDeps, clicker: Actor, proposal: Proposal) -> ProposalOutcome:
    check = await lease_actions.request_teardown(svc, clicker)  # holder or admin, and a lease to tear down
    if not check.ok or check.lease is None:
        return ProposalOutcome(False, check.message, check.lease)
    if proposal.lease_id and check.lease.lease_id != proposal.lease_id:
        await svc.proposals.take(proposal.id)
        return ProposalOutcome(False, "The TPU this card was about is gone; nothing changed. "
                                      "Use `/tpu down` for the current one.")
    if not await svc.proposals.take(proposal.id):
        return ProposalOutcome(False, EXPIRED)
    outcome = await lease_actions.confirm_teardown(svc, clicker, check.lease.lease_id)
    return ProposalOutcome(outcome.ok, outcome.message, outcome.lease)


async def dismiss(svc: AgentDeps, clicker: Actor, proposal_id: str) -> ProposalOutcome:
    proposal = await load(svc, proposal_id)
    # Scoped like confirm: a click in another channel (or workspace) must not dismiss this one.
    if proposal is None or (proposal.team, proposal.channel) != (clicker.team, clicker.channel):
        return ProposalOutcome(False, EXPIRED)
    await svc.proposals.take(proposal_id)
    await svc.audit.record(actor=clicker.user_id, action=f"propose:{proposal.action}", team=clicker.team,
                           channel=clicker.channel, outcome="dismissed", detail=proposal_id)
    return ProposalOutcome(True, f"Dismissed: {proposal.describe()}. Nothing changed.")
