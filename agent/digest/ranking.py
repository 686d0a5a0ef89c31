"""Which templates an incident reader needs first.

Order: the template holding the first error of the log (the cause that a cascade of later
errors buries) first; then by severity; within a severity, what a line says before how rare it
is (`salience`): an exception's message or an error payload first, a traceback's frames and
code lines and a wrapper that only points elsewhere ("See root cause above") last; then rare
templates before chatty ones and bursts (many lines packed into a short stretch of the log)
before steady background. One ERROR line therefore outranks ten thousand INFO lines, and the
first error is the first one that says something (not `Traceback (most recent call last):`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Protocol

# A template needs this many lines before its density can call it a burst.
MIN_BURST_LINES = 5


# What a traceback prints around its message, and messages that only say "look elsewhere".
_NOISE = re.compile(
    r"^(?:Traceback \(most recent call last\)|File \S.*\bline\b|[\^~]{3,}\s*$|During handling of the above exception|"
    r"The above exception was the direct cause|(?:return|raise|await|yield|assert)\s|(?:self|super\(\))\.\S*\(|"
    r"[\w.]+(?:\[[^\]]*\])?(?:\s*,\s*[\w.]+)*\s=\s|.*[(\[{]\s*$)"  # an assignment, a call left open
    r"|^[\w.-]+:\s*$"  # a YAML key alone (`error:` above its fields)
    r"|see (?:the )?(?:root cause|stack trace)\b[^.]*above|task exception was never retrieved|"
    r"exception in asgi application|\bfailed to start\.?\s*$|encountered a fatal error\.?\s*$",
    re.IGNORECASE)
# A raised exception's message (`redis.exceptions.ReadOnlyError: You can't …`) or an error payload.
_SAYS = re.compile(r"^(?:[\w]+\.)*[A-Z]\w*(?:Error|Exception|Failure|Fault|Exit)\b:?\s+\S|(['\"])error\1\s*:\s*['\"{]"
                   r"|\bFATAL:\s")


class Rankable(Protocol):
    count: int
    severity: int
    first_line: int
    last_line: int
    template: str


def salience(template: str) -> int:
    """+1 for a line that states an error (an exception's message, an error payload), -1 for a
    traceback's scaffolding or a wrapper that points elsewhere, 0 otherwise."""
    text = template.strip()
    if _SAYS.search(text):
        return 1
    if _NOISE.search(text):
        return -1
    return 0


def burst_factor(template: Rankable, total_lines: int) -> float:
    """How much denser than an even spread over the whole log the template's lines are (>= 1)."""
    if template.count < MIN_BURST_LINES or total_lines <= 0:
        return 1.0
    span = template.last_line - template.first_line + 1
    return max(1.0, total_lines / span)


def interest(template: Rankable, total_lines: int) -> float:
    """Rarity plus burstiness in log units; used to order templates of equal severity."""
    rarity = math.log((total_lines + 1) / template.count)
    return rarity + math.log(burst_factor(template, total_lines))


def rank(templates: Sequence[Rankable], total_lines: int, first_error_template: Rankable | None) -> list:
    """Templates in reading order (a new list)."""

    def key(template: Rankable) -> tuple:
        return (
            template is not first_error_template,
            -template.severity,
            -salience(template.template),
            -interest(template, total_lines),
            template.first_line,
        )

    return sorted(templates, key=key)
