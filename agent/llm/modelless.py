"""The deterministic answer, when no model is reachable: intent rules plus the log digest.

Labelled as made without the model, and with an offer to bring the model up (a provision
proposal, so it is still a person's click that provisions anything) — except when the person
asked for a teardown. A provision request's zone and hours are carried into the proposal; a
request the rules do not understand gets the digest (if logs came) and what they can do.
"""

from __future__ import annotations

import asyncio
import logging

from pydantic import ValidationError

from agent.llm import proposals as proposal_rules
from agent.actions import get_action, run_action
from agent.actions.registry import first_error, validate_args
from agent.actions.run_context import RunContext
from agent.context import ChannelDeps, Services
from agent.llm.intents import Intent, asked_for, classify, provision_details
from agent.llm.material import MentionInput, images_unread_line, unread_warnings
from agent.llm.run import AgentRun
from agent.digest.ranking import salience
from agent.digest.runbook_links import RunbookLink, runbook_links, search_query
from agent.digest.severity import ERROR, SEVERITY_NAMES, WARNING
from agent.digest.citations import cited_lines as cited_lines_of
from infra.plurals import counted
from infra.runbooks.library import RunbookLibrary
from infra.state.leases import LeaseState

log = logging.getLogger(__name__)

SUMMARY_TOKENS = 1_500
SHOWN_TEMPLATES = 6
SHOWN_WITH_RUNBOOK = 3  # with a runbook that explains the logs, fewer other messages
MAX_CITED_RUNBOOKS = 2
SEVERITY_ORDER = {name: level for level, name in SEVERITY_NAMES.items()}
EXEMPLAR_CHARS = 160
# The standing offer on every mention in a channel without a TPU, whatever was asked or logged.
BRING_THE_MODEL_UP = "Bring the model up"
READ_INTENTS = {Intent.STATUS: "status", Intent.ZONES: "zones", Intent.COST: "estimate_cost"}
HELP = ("I can answer without the model only in simple terms: ask for *status*, *zones*, *cost*, to bring the "
        "TPU *up* or tear it *down*, or paste/attach logs to get a digest.")


def _code(text: str, limit: int = EXEMPLAR_CHARS) -> str:
    text = " ".join(text.split()).replace("`", "'")
    return "`" + (text if len(text) <= limit else text[: limit - 1] + "…") + "`"


def summarize(mention: MentionInput, runbooks: RunbookLibrary | None = None) -> tuple[str, list[int]]:
    """The digest said in a few lines: what the runbooks make of it first (the matching section's
    title, cause and fix, with the lines that match), then the messages the digest ranks first,
    each cited by the lines it occurs on. Routine messages are counted, not cited: a citation is
    a claim that the line matters."""
    digest = mention.mined.build(SUMMARY_TOKENS)
    errors = [t for t in digest.ranked if t.severity >= ERROR]
    first = next((t for t in digest.ranked if t.first_error), None) or min(errors, key=lambda t: t.first_line,
                                                                           default=None)
    head = (f"*Log summary*: {counted(digest.total_lines, 'line')}, "
            f"{counted(len(digest.ranked), 'kind', 'kinds')} of message"
            + (f", {counted(sum(t.count for t in errors), 'error line')}, first at L{first.first_line}" if first
               else ", no errors in those")
            + (f" ({mention.line_map()})" if len(mention.sources) > 1 else "") + ".")
    lines = [head]
    index = runbooks.index() if runbooks is not None else None
    firsts = {template.first_line: template.first_text for template in digest.ranked}
    query = search_query(mention.request, digest, lambda number: firsts.get(number, ""))
    links = _telling_links(runbook_links(digest, index, query=query))
    for number, link in enumerate(links):
        lines.append(_link_sentence(link, whole=number == 0))
    shown = [t for t in digest.ranked if t.severity >= WARNING and salience(t.template) >= 0]
    shown = shown[:SHOWN_WITH_RUNBOOK if links else SHOWN_TEMPLATES]
    for t in shown:
        span = f"L{t.first_line}" if t.count == 1 else f"first L{t.first_line}, last L{t.last_line}"
        example = t.exemplars[0] if t.exemplars else None
        shown_text = f" e.g. {_code(example.text)}" if example else ""
        lines.append(f"• {t.severity_name} ×{t.count} ({span}): {_code(t.template, 100)}{shown_text}")
    quiet = [t for t in digest.ranked if t not in shown]
    if quiet:
        lines.append(f"…and {counted(len(quiet), 'more kind', 'more kinds')} of message "
                     f"({counted(sum(t.count for t in quiet), 'line')}, {_levels(quiet)}).")
    cited = sorted(set(cited_lines_of("\n".join(lines))))
    return "\n".join(lines), cited


def _telling_links(links: list[RunbookLink]) -> list[RunbookLink]:
    """The links worth citing: a section whose matching lines all match a section before it adds
    nothing but a second, likely wrong, reference."""
    kept: list[RunbookLink] = []
    for link in links:
        if not any(set(link.lines) <= set(other.lines) for other in kept):
            kept.append(link)
    return kept[:MAX_CITED_RUNBOOKS]


def _link_sentence(link: RunbookLink, *, whole: bool) -> str:
    """"This looks like …": the section, the lines its symptoms match, and (for the first) its
    cause and every fix step; the others get their first step."""
    said = f"This looks like *{link.section.title}*, see {link.cite} (its symptoms match {link.evidence()})."
    if whole:
        cause = link.section.cause.strip()
        steps = [step.strip().lstrip("0123456789.) ") for step in link.section.fix.splitlines() if step.strip()]
        return said + (f" {cause}" if cause else "") + (f" Fix: {' '.join(steps)}" if steps else "")
    return said + (f" Fix: {link.first_fix()}" if link.first_fix() else "")


def _levels(templates) -> str:
    names = sorted({t.severity_name for t in templates}, key=lambda name: -SEVERITY_ORDER.get(name, 0))
    return "/".join(names)


def _invalid(svc: ChannelDeps, action_name: str, args: dict) -> str | None:
    """What is wrong with the details the person gave (a zone not configured, too many hours)."""
    action = get_action(action_name)
    if action is None or not args:
        return None
    try:
        validate_args(action, args, svc)
    except ValidationError as error:
        return f"I can't propose that: {first_error(error)}. Nothing was changed."
    return None


async def _read(svc: Services, run: RunContext, action_name: str) -> str:
    if get_action(action_name) is None:
        return f"`{action_name}` is not available in this deployment."
    try:
        # What the intent reads is the deployment's, not the message's logs: no material.
        return (await run_action(action_name, svc, RunContext(run.actor, run.redactor), {})).text
    except ValidationError:
        return f"`{action_name}` needs details I can't guess without the model; try the slash command."


WRITES = {Intent.UP: "provision", Intent.DOWN: "teardown"}


async def answer(svc: Services, run: RunContext, mention: MentionInput, *, reason: str) -> AgentRun:
    actor = run.actor
    # A write is what the person's own words ask for, not words of the material in their line.
    intents = [intent for intent in classify(mention.request)
               if intent not in WRITES or asked_for(mention.request, WRITES[intent])]
    parts: list[str] = []
    cards: list = []
    cited: list[int] = []
    if mention.has_logs:
        summary, cited = await asyncio.to_thread(summarize, mention, svc.runbooks)  # reads spooled attachments
        parts.append(summary)
    elif Intent.LOGS in intents:
        parts.append("No logs came with this message: paste them (in ``` fences) or attach a file.")
    for intent in intents:
        if intent in READ_INTENTS:
            parts.append(await _read(svc, run, READ_INTENTS[intent]))
        elif intent in (Intent.UP, Intent.DOWN):
            action_name = "provision" if intent is Intent.UP else "teardown"
            args = provision_details(mention.request) if intent is Intent.UP else {}
            problem = _invalid(svc, action_name, args)
            check = await proposal_rules.precheck(svc, actor, action_name)
            if problem:
                parts.append(problem)
            elif check.ok:
                cards.append(await proposal_rules.propose(svc, actor, action_name, args, lease=check.lease))
            else:
                parts.append(check.message)
    if not intents or not (parts or cards):
        parts.append(HELP)  # not understood: the digest (if any) and what I can do, never a guess
    unread_images = images_unread_line(mention)
    parts[:0] = unread_warnings(mention) + ([unread_images] if unread_images else [])
    lease = await svc.leases.get(actor.team, actor.channel)
    if Intent.DOWN in intents:
        pass  # asked to tear down: never answer with an offer to provision
    elif lease is None and not any(p.action == "provision" for p in cards):
        cards.append(await proposal_rules.propose(svc, actor, "provision", {}, label=BRING_THE_MODEL_UP))
    elif lease is not None and lease.state == LeaseState.DEGRADED:
        parts.append("This channel's TPU is DEGRADED: its model failed the boot's correctness checks, so mentions "
                     "here are answered without it (the card says what failed and the fix).")
    elif lease is not None and lease.state != LeaseState.READY:
        parts.append(f"This channel's TPU is {lease.state.label}; its model answers once it is READY.")
    return AgentRun(text="\n\n".join(parts), label=f"Made without the model: {reason}.", used_model=False,
                    proposals=cards, cited=cited)
