"""The `/tpu` command grammar: one registry of subcommands, their usage and their parsers.

`/tpu help` is generated from this registry, and every parse error names what was wrong and
the right syntax. Parsing never touches state: bad input changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from infra.durations import looks_like_duration, parse_duration

ZONE_RE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
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


@dataclass(frozen=True)
class Subcommand:
    name: str
    usage: str
    summary: str
    parse: Callable[[list[str]], dict]
    action: str | None = None


def _no_args(name: str) -> Callable[[list[str]], dict]:
    def parse(tokens: list[str]) -> dict:
        if tokens:
            raise CommandError(f"`/tpu {name}` takes no arguments, but got `{' '.join(tokens)}`. Usage: `/tpu {name}`")
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
            hours = parse_duration(spelled, bare_unit="h").total_seconds() / 3600
        elif ZONE_RE.match(token_l):
            if zone is not None:
                raise CommandError(f"Give one zone; got `{zone}` and `{token}`. {UP_USAGE}")
            zone = token_l
        else:
            raise CommandError(f"`{_code_safe(token[:40])}` is neither a zone (like us-west4-a) nor a duration "
                               f"(like 4h, 90m or 1h30m). {UP_USAGE}")
    return {"zone": zone, "hours": hours}


def _parse_audit(tokens: list[str]) -> dict:
    if not tokens:
        return {}
    if len(tokens) > 1 or not tokens[0].isdigit():
        raise CommandError(f"`/tpu audit` takes one optional number of entries; got `{_code_safe(' '.join(tokens)[:40])}`. Usage: `/tpu audit [count]`")
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


def _parse_ask(tokens: list[str]) -> dict:
    if not tokens:
        raise CommandError("`/tpu ask` needs a question. Usage: `/tpu ask <question>`, e.g. `/tpu ask what is a TPU?`")
    return {"prompt": " ".join(tokens)}


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
    Subcommand("ask", "/tpu ask <question>", "Ask this channel's model directly; the answer comes with TTFT, TPOT and tokens/s.", _parse_ask, "ask_model"),
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
        raise CommandError(f"Unknown subcommand `{_code_safe(shown)}`. Try one of: {', '.join('`' + s.usage + '`' for s in SUBCOMMANDS)}")
    return ParsedCommand(sub.name, sub.action, sub.parse(tokens), sub.usage)


HELP_TITLE = "tpubot — one flex-start TPU v5e with Gemma per channel"


def help_line(sub: Subcommand) -> str:
    """One subcommand as `/tpu help` shows it; docs/commands.md (bot/docs.py) renders the same line."""
    return f"`{sub.usage}` — {sub.summary}"


def help_text() -> str:
    lines = [f"*{HELP_TITLE}*"]
    lines += [f"• {help_line(sub)}" for sub in SUBCOMMANDS]
    return "\n".join(lines)


def _code_safe(text: str) -> str:
    # Keep user text from closing the code span or pinging anyone.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "'")
