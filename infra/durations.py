"""Durations as people write them — `4h`, `90m`, `1h30m`, `14400s`, `2d` — for settings and
for `/tpu up`, so both accept the same forms (one parser), and printed back in the same form."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

_NUMBER = r"\d+(?:\.\d+)?"
_COMPOUND_RE = re.compile(rf"^(?:{_NUMBER}\s*[smhd]\s*)+$", re.IGNORECASE)
_PART_RE = re.compile(rf"({_NUMBER})\s*([smhd])", re.IGNORECASE)
_BARE_RE = re.compile(rf"^{_NUMBER}$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Flex-start's own limit: "You can request Flex-start resources for a duration of up to 7 days"
# (cloud.google.com/tpu/docs/request-using-flex-start).
FLEX_START_LONGEST = timedelta(days=7)
# A lease ends before its TPU is of use below this: creating the VM and booting vLLM takes minutes.
SHORTEST_LEASE = timedelta(minutes=10)
# Anything longer than this is refused before it reaches timedelta (which overflows near 2.7 million years).
_LONGEST_PARSED_SECONDS = 10 * 365 * 86400


def parse_duration(value: Any, bare_unit: str = "s") -> timedelta:
    """`4h`, `30m`, `1h30m`, `14400s` or a timedelta; a bare number is in `bare_unit`
    (seconds for settings, hours for `/tpu up 2`)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)):
        return _bounded(float(value) * _UNIT_SECONDS[bare_unit], value)
    text = str(value).strip()
    if _BARE_RE.match(text):
        return _bounded(float(text) * _UNIT_SECONDS[bare_unit], value)
    if not _COMPOUND_RE.match(text):
        raise ValueError(f"{value!r} is not a duration; write it like 4h, 90m, 1h30m or 14400s")
    return _bounded(sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in _PART_RE.findall(text)), value)


class DurationTooLong(ValueError):
    """Longer than any duration the bot has a use for (and than timedelta can hold)."""


def _bounded(seconds: float, written: Any) -> timedelta:
    if not seconds <= _LONGEST_PARSED_SECONDS:  # also catches inf and nan
        raise DurationTooLong(f"{written!r} is far too long for a duration; write at most a few days, like 7d")
    return timedelta(seconds=seconds)


def looks_like_duration(text: str) -> bool:
    text = text.strip()
    return bool(_BARE_RE.match(text) or _COMPOUND_RE.match(text))


def check_lease_length(length: timedelta | float, *, shortest: timedelta = SHORTEST_LEASE,
                       longest: timedelta = FLEX_START_LONGEST) -> timedelta:
    """`length` (a timedelta or seconds) as the whole seconds the budget prices and the queued
    resource asks for, or a ValueError saying what to write instead."""
    seconds = length.total_seconds() if isinstance(length, timedelta) else float(length)
    if not seconds <= longest.total_seconds():  # also catches inf and nan
        raise ValueError(_too_long(_written(seconds), longest))
    if int(seconds) < max(1, int(shortest.total_seconds())):
        raise ValueError(f"{_written(seconds)} is shorter than the shortest lease, {format_duration(shortest)} "
                         f"(a TPU takes minutes to start); ask for at least {format_duration(shortest)}")
    return timedelta(seconds=int(seconds))


def _written(seconds: float) -> str:
    return format_duration(timedelta(seconds=seconds)) if abs(seconds) <= _LONGEST_PARSED_SECONDS else f"{seconds:g}s"


def _too_long(written: str, longest: timedelta) -> str:
    return (f"{written} is longer than the longest lease, {format_duration(longest)} (flex-start's limit); "
            f"ask for at most {format_duration(longest)}")


def format_duration(delta: timedelta, *, parts: int | None = None) -> str:
    """Days, hours, minutes and seconds, biggest first: `9d`, `1d12h`, `1h30m`, `90s`; `parts`
    keeps only that many of the biggest (a clock: `3h59m`, not `3h59m12s`). Under a second
    reads as `0.5s` rather than a misleading `0s`."""
    total = delta.total_seconds()
    if 0 < abs(total) < 1:
        return f"{total:.3g}s"
    seconds = int(total)
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    units: list[tuple[int, str]] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count or units:
            units.append((count, unit))
    shown = units[:parts] if parts else units
    return sign + ("".join(f"{count}{unit}" for count, unit in shown if count) or "0s")
