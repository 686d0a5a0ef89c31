"""The `/tpu` command grammar: one registry of subcommands, their usage and their parsers.

`/tpu help` is generated from this registry, and every parse error names what was wrong and
the right syntax. Parsing never touches state: bad input changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from infra.mrkdwn import in_code
from infra.durations import FLEX_START_LONGEST, DurationTooLong, format_duration, looks_like_duration, parse_duration
from infra.gcp_names import is_zone_name, likely_meant

# `/tpu up 4hr`, `4hrs`, `4hours` read as `4h`; everything else as settings read durations.
_HOUR_WORDS = re.compile(r"(?<=\d)(?:hours?|hrs?)$", re.IGNORECASE)
MAX_TEXT = 500


class CommandError(ValueError):
    """Bad `/tpu` input; the message is shown to the user as is."""


@dataclass(frozen=True)
class ParsedCommand:
    name: str
    action: str | None = None  # the registry action this subcommand runs
    args: dict = field(default_factory=dict)
    usage: str = ""
    queued: bool = False  # its answer may outlast Slack's 3-second ack: the worker runs it, answers via response_url


@dataclass(frozen=True)
class Subcommand:
    name: str
    usage: str
    summary: str
    parse: Callable[[list[str]], dict]
    action: str | None = None
    queued: bool = False


def _no_args(name: str) -> Callable[[list[str]], dict]:
    def parse(tokens: list[str]) -> dict:
        if tokens:
            raise CommandError(f"`/tpu {name}` takes no arguments, but got `{in_code(' '.join(tokens)[:40])}`. "
                               f"Usage: `/tpu {name}`")
        return {}

    return parse


def _parse_up(tokens: list[str]) -> dict:
    """Tokens to `provision` arguments; the provision action's argument model checks the values."""
    zone: str | None = None
    hours: float | None = None
    for token in tokens:
        token_l = token.lower()
        spelled = _HOUR_WORDS.sub("h", token_l)
        if looks_like_duration(spelled):
            if hours is not None:
                raise CommandError(f"Give the duration once; got `{token}` after `{hours:g}h`. {UP_USAGE}")
            # A bare number is hours here (`/tpu up 2`); `90m`, `1h30m`, `2h` are as in settings.
            # The bounds are the deployment's, checked by the provision action's argument model.
            try:
                hours = parse_duration(spelled, bare_unit="h").total_seconds() / 3600
            except DurationTooLong:
                raise CommandError(f"`{in_code(token[:40])}` is longer than the longest lease, "
                                   f"{format_duration(FLEX_START_LONGEST)} (flex-start's limit). {UP_USAGE}") from None
        elif is_zone_name(token_l):
            if zone is not None:
                raise CommandError(f"Give one zone; got `{zone}` and `{token}`. {UP_USAGE}")
            zone = token_l
        elif likely_meant(token_l):
            raise CommandError(f"`{in_code(token[:40])}` is not a zone name: a zone is its region, a dash and "
                               f"a letter, so write `{likely_meant(token_l)}`. {UP_USAGE}")
        else:
            raise CommandError(f"`{in_code(token[:40])}` is neither a zone (like us-west4-a) nor a duration "
                               f"(like 4h, 90m or 1h30m). {UP_USAGE}")
    return {"zone": zone, "hours": hours}


def _parse_audit(tokens: list[str]) -> dict:
    if not tokens:
        return {}
    if len(tokens) > 1 or not tokens[0].isdigit():
        raise CommandError(f"`/tpu audit` takes one optional number of entries; got `{in_code(' '.join(tokens)[:40])}`. Usage: `/tpu audit [count]`")
    return {"count": int(tokens[0])}


UP_USAGE = "Usage: `/tpu up [zone] [duration]`, e.g. `/tpu up`, `/tpu up us-west4-a`, `/tpu up 2h`, `/tpu up 90m`"
ONCALL_USAGE = "Usage: `/tpu oncall [@group-or-user…|clear]`, e.g. `/tpu oncall @sre-oncall @ann`"
_MENTION_TOKEN = re.compile(r"<[^<>]*>|[^\s<>]+")


def _parse_oncall(tokens: list[str]) -> dict:
    """Mentions (`<!subteam^S1|@sre>`, `<@U1|ann>`), `clear`, or nothing (show the list)."""
    from agent.lease.oncall import MentionError, normalize_mentions

    # Re-tokenize: a mention's label may contain spaces, so split around <…> groups.
    parts = _MENTION_TOKEN.findall(" ".join(tokens))
    if [p.lower() for p in parts] in (["clear"], ["reset"]):
        return {"clear": True}
    try:
        return {"mentions": normalize_mentions(parts)}
    except MentionError as error:
        raise CommandError(f"{error}. {ONCALL_USAGE}") from None


def _parse_runbook(tokens: list[str]) -> dict:
    if not tokens:
        raise CommandError("`/tpu runbook` needs words to look for. Usage: `/tpu runbook <error or symptom>`, "
                           "e.g. `/tpu runbook RESOURCE_EXHAUSTED`")
    return {"query": " ".join(tokens)}


def _parse_ask(tokens: list[str]) -> dict:
    if not tokens:
        raise CommandError("`/tpu ask` needs a question. Usage: `/tpu ask <question>`, e.g. `/tpu ask what is a TPU?`")
    return {"prompt": " ".join(tokens)}
# A parser that picks another action than its subcommand's default returns it under this key.
ACTION_KEY = "__action__"
BUDGET_USAGE = ("Usage: `/tpu budget [#channel]`, `/tpu budget set 200` (the workspace, USD a month), "
                "`/tpu budget set 50 #channel`, `/tpu budget clear [#channel]`")
SPEND_USAGE = "Usage: `/tpu spend [YYYY-MM]` or `/tpu spend chart [YYYY-MM]`, e.g. `/tpu spend 2026-11`"
_USD_RE = re.compile(r"^\$?(\d+(?:\.\d{1,2})?)(?:\s*usd)?$", re.IGNORECASE)


def _parse_budget(tokens: list[str]) -> dict:
    """Show, `set USD [#channel]` or `clear [#channel]`; the budget actions check the channel."""
    if not tokens:
        return {}
    verb, *rest = tokens
    if verb.lower() == "set":
        if not rest or len(rest) > 2:
            raise CommandError(f"`/tpu budget set` takes an amount and an optional channel. {BUDGET_USAGE}")
        amount = _USD_RE.match(rest[0])
        if amount is None:
            raise CommandError(f"`{in_code(rest[0][:40])}` is not an amount of USD; write it like `200` or "
                               f"`$49.50`. {BUDGET_USAGE}")
        return {ACTION_KEY: "set_budget", "usd": float(amount.group(1)), "channel": rest[1] if rest[1:] else None}
    if verb.lower() == "clear":
        if len(rest) > 1:
            raise CommandError(f"`/tpu budget clear` takes at most a channel. {BUDGET_USAGE}")
        return {ACTION_KEY: "set_budget", "clear": True, "channel": rest[0] if rest else None}
    if len(tokens) == 1 and (verb.startswith("<#") or verb.startswith("#") or verb[:1] in "CG"):
        return {"channel": verb}
    raise CommandError(f"`{in_code(' '.join(tokens)[:40])}` is not a budget command. {BUDGET_USAGE}")


def _parse_spend(tokens: list[str]) -> dict:
    args: dict = {}
    if tokens and tokens[0].lower() == "chart":
        args[ACTION_KEY] = "spend_chart"
        tokens = tokens[1:]
    if len(tokens) > 1:
        raise CommandError(f"`/tpu spend` takes at most one month; got `{in_code(' '.join(tokens)[:40])}`. "
                           f"{SPEND_USAGE}")
    if tokens:
        args["month"] = tokens[0]
    return args


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("up", "/tpu up [zone] [duration]", "Provision this channel's flex-start TPU running Gemma (one per channel).", _parse_up, "provision"),
    Subcommand("status", "/tpu status", "Show this channel's lease, TPU state, zone, endpoint and deadline.", _no_args("status"), "status"),
    Subcommand("down", "/tpu down", "Tear down this channel's TPU (asks for confirmation; holder or admin).", _no_args("down"), "teardown"),
    Subcommand("audit", "/tpu audit [count]", "Show the most recent audited actions (admins).", _parse_audit, "audit"),
    Subcommand("unlock", "/tpu unlock", "Force-release this channel's operation lock (admins).", _no_args("unlock"), "force_unlock"),
    Subcommand("oncall", "/tpu oncall [@group-or-user…|clear]", "Show or set who is paged for this channel's TPU alerts (holder or admin to change).", _parse_oncall, "oncall"),
    Subcommand("cost", "/tpu cost", "What this channel's TPU has cost and will cost, $ per million output tokens, capacity.", _no_args("cost"), "estimate_cost"),
    Subcommand("bench", "/tpu bench", "Benchmark this channel's READY model (a small sweep) and post the chart in its thread.", _no_args("bench"), "bench"),
    Subcommand("zones", "/tpu zones", "Show the zone scoreboard: last outcome, when, median time to ACTIVE, skipped until.", _no_args("zones"), "zones"),
    Subcommand("ask", "/tpu ask <question>", "Ask this channel's model directly; the answer comes with TTFT, TPOT and tokens/s.", _parse_ask, "ask_model", queued=True),
    Subcommand("runbook", "/tpu runbook <error or symptom>", "Search the runbooks (built-in and the team's): the best sections, each cited as RB:file#section, with cause and fix.", _parse_runbook, "search_runbooks"),
    Subcommand("budget", "/tpu budget [set USD|clear] [#channel]", "Show the monthly spend budgets; admins set them (no channel: the workspace's).", _parse_budget, "budget"),
    Subcommand("spend", "/tpu spend [chart] [YYYY-MM]", "A month's TPU spend per channel: leases, hours, dollars, $/M output tokens, idle hours; `chart` posts a bar chart.", _parse_spend, "spend"),
    Subcommand("help", "/tpu help", "Show this help.", _no_args("help")),
)
BY_NAME = {sub.name: sub for sub in SUBCOMMANDS}


def parse(text: str) -> ParsedCommand:
    text = (text or "").strip()
    if len(text) > MAX_TEXT:
        raise CommandError(f"That command is {len(text)} characters long; `/tpu` takes at most {MAX_TEXT}. Try `/tpu help`.")
    if not text:
        return ParsedCommand("help", usage="/tpu help")
    name, *tokens = text.split()
    sub = BY_NAME.get(name.lower())
    if sub is None:
        shown = name if len(name) <= 40 else name[:40] + "…"
        raise CommandError(f"Unknown subcommand `{in_code(shown)}`. Try one of: {', '.join('`' + s.usage + '`' for s in SUBCOMMANDS)}")
    args = sub.parse(tokens)
    return ParsedCommand(sub.name, args.pop(ACTION_KEY, sub.action), args, sub.usage, sub.queued)


HELP_TITLE = "tpubot — one flex-start TPU v5e with Gemma per channel"


def help_line(sub: Subcommand) -> str:
    """One subcommand as `/tpu help` shows it; docs/commands.md (bot/docs.py) renders the same line."""
    return f"`{sub.usage}` — {sub.summary}"


def help_text() -> str:
    lines = [f"*{HELP_TITLE}*"]
    lines += [f"• {help_line(sub)}" for sub in SUBCOMMANDS]
    return "\n".join(lines)
