"""Durations as people write them — `4h`, `90m`, `1h30m`, `14400s`, `2d` — for settings and
for `/tpu up`, so both accept the same forms (one parser)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

_NUMBER = r"\d+(?:\.\d+)?"
_COMPOUND_RE = re.compile(rf"^(?:{_NUMBER}\s*[smhd]\s*)+$", re.IGNORECASE)
_PART_RE = re.compile(rf"({_NUMBER})\s*([smhd])", re.IGNORECASE)
_BARE_RE = re.compile(rf"^{_NUMBER}$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any, bare_unit: str = "s") -> timedelta:
    """`4h`, `30m`, `1h30m`, `14400s` or a timedelta; a bare number is in `bare_unit`
    (seconds for settings, hours for `/tpu up 2`)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)):
        return timedelta(seconds=float(value) * _UNIT_SECONDS[bare_unit])
    text = str(value).strip()
    if _BARE_RE.match(text):
        return timedelta(seconds=float(text) * _UNIT_SECONDS[bare_unit])
    if not _COMPOUND_RE.match(text):
        raise ValueError(f"{value!r} is not a duration; write it like 4h, 90m, 1h30m or 14400s")
    return timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in _PART_RE.findall(text)))


def looks_like_duration(text: str) -> bool:
    text = text.strip()
    return bool(_BARE_RE.match(text) or _COMPOUND_RE.match(text))


def format_duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
