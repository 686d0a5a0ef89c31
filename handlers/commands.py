"""The `/tpu` command grammar: one registry of subcommands, their usage and their parsers.

`/tpu help` is generated from this registry, and every parse error names what was wrong and
the right syntax. Parsing never touches state: bad input changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

ZONE_RE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
HOURS_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(h|hr|hrs|hours?)?$", re.IGNORECASE)
MAX_TEXT = 500


class CommandError(ValueError):
    """Bad `/tpu` input; the message is shown to the user as is."""


@dataclass(frozen=True)
class ParsedCommand:
    name: str
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Subcommand:
    name: str
    usage: str
    summary: str
    parse: Callable[[list[str], "CommandLimits"], dict]


@dataclass(frozen=True)
class CommandLimits:
    zones: tuple[str, ...]
    max_hours: float = 168.0


def _no_args(name: str) -> Callable[[list[str], CommandLimits], dict]:
    def parse(tokens: list[str], limits: CommandLimits) -> dict:
        if tokens:
            raise CommandError(f"`/tpu {name}` takes no arguments, but got `{' '.join(tokens)}`. Usage: `/tpu {name}`")
        return {}

    return parse


def _parse_up(tokens: list[str], limits: CommandLimits) -> dict:
    usage = "Usage: `/tpu up [zone] [hours]`, e.g. `/tpu up`, `/tpu up us-west4-a`, `/tpu up 2h`"
    zone: str | None = None
    hours: float | None = None
    for token in tokens:
        token_l = token.lower()
        hours_match = HOURS_RE.match(token_l)
        if hours_match:
            if hours is not None:
                raise CommandError(f"Give the duration once; got `{token}` after `{hours:g}h`. {usage}")
            hours = float(hours_match.group(1))
            if hours <= 0:
                raise CommandError(f"The duration must be more than 0 hours; got `{token}`. {usage}")
            if hours > limits.max_hours:
                raise CommandError(
                    f"Flex-start TPUs run at most {limits.max_hours:g} hours (7 days); got `{token}`. {usage}"
                )
        elif ZONE_RE.match(token_l):
            if zone is not None:
                raise CommandError(f"Give one zone; got `{zone}` and `{token}`. {usage}")
            if token_l not in limits.zones:
                raise CommandError(
                    f"`{token}` is not one of the configured zones ({', '.join(limits.zones)}). {usage}"
                )
            zone = token_l
        else:
            raise CommandError(f"`{token}` is neither a zone (like us-west4-a) nor a duration (like 4h). {usage}")
    return {"zone": zone, "hours": hours}


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("up", "/tpu up [zone] [hours]", "Provision this channel's flex-start TPU running Gemma (one per channel).", _parse_up),
    Subcommand("status", "/tpu status", "Show this channel's lease, TPU state, zone, endpoint and deadline.", _no_args("status")),
    Subcommand("down", "/tpu down", "Tear down this channel's TPU (asks for confirmation; holder or admin).", _no_args("down")),
    Subcommand("help", "/tpu help", "Show this help.", _no_args("help")),
)
BY_NAME = {sub.name: sub for sub in SUBCOMMANDS}


def parse(text: str, limits: CommandLimits) -> ParsedCommand:
    text = (text or "").strip()
    if len(text) > MAX_TEXT:
        raise CommandError(f"That command is {len(text)} characters long; `/tpu` takes at most {MAX_TEXT}. Try `/tpu help`.")
    if not text:
        return ParsedCommand("help")
    name, *tokens = text.split()
    sub = BY_NAME.get(name.lower())
    if sub is None:
        shown = name if len(name) <= 40 else name[:40] + "…"
        raise CommandError(f"Unknown subcommand `{_code_safe(shown)}`. Try one of: {', '.join('`' + s.usage + '`' for s in SUBCOMMANDS)}")
    return ParsedCommand(sub.name, sub.parse(tokens, limits))


def help_text() -> str:
    lines = ["*tpubot* — one flex-start TPU v5e with Gemma per channel"]
    lines += [f"• `{sub.usage}` — {sub.summary}" for sub in SUBCOMMANDS]
    return "\n".join(lines)


def _code_safe(text: str) -> str:
    # Keep user text from closing the code span or pinging anyone.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "'")
