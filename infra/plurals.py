"""Counts in words for people: `1 line`, `2,000 lines` — never `1 lines` or `line(s)`."""

from __future__ import annotations


def counted(number: int, noun: str, plural: str = "") -> str:
    """`1 line`, `2,000 lines`; `plural` for nouns that do not just take an s (`1 match`, `2 matches`)."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"
