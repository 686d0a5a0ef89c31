"""Which templates an incident reader needs first.

Order: the template holding the first error of the log (the cause that a cascade of later
errors buries) first; then by severity; within a severity, rare templates before chatty ones
and bursts (many lines packed into a short stretch of the log) before steady background.
One ERROR line therefore outranks ten thousand INFO lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

# A template needs this many lines before its density can call it a burst.
MIN_BURST_LINES = 5


class Rankable(Protocol):
    count: int
    severity: int
    first_line: int
    last_line: int


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
            -interest(template, total_lines),
            template.first_line,
        )

    return sorted(templates, key=key)
