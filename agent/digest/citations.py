"""Line citations as answers write them: `L12`, `L12-L14` (a range), `L12–14`.

The digest renders line numbers for an answer to cite; the model-less answer lists what it cites,
and `tpubot eval` checks every citation against the lines that hold evidence: one reading of
"which lines does this text cite" for all of them.
"""

from __future__ import annotations

import re

_CITED = re.compile(r"\bL(\d{1,6})(?:\s*[-–]\s*L?(\d{1,6}))?\b")
MAX_RANGE = 50


def citation_spans(text: str) -> list[tuple[int, int]]:
    """Every citation in `text` as written, in order: (first, last) line, equal for one line; a
    range written backwards (`L9-L3`) is its first line alone."""
    spans = []
    for match in _CITED.finditer(text):
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) else start
        spans.append((start, end if end >= start else start))
    return spans


def cited_lines(text: str) -> list[int]:
    """Every line number `text` cites, sorted, each once (a range counts for at most MAX_RANGE
    lines after its first)."""
    lines: list[int] = []
    for start, end in citation_spans(text):
        lines += range(start, min(end, start + MAX_RANGE) + 1)
    return sorted(set(lines))
