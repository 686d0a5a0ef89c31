"""Line citations as answers write them: `L12`, `L12-L14` (a range, at most 50 lines), `L12–14`.

The digest renders line numbers for an answer to cite; the model-less answer lists what it cites,
and `tpubot eval` checks every citation against the lines that hold evidence: one reading of
"which lines does this text cite" for all of them.
"""

from __future__ import annotations

import re

_CITED = re.compile(r"\bL(\d{1,6})(?:\s*[-–]\s*L?(\d{1,6}))?\b")
MAX_RANGE = 50


def cited_lines(text: str) -> list[int]:
    """Every line number `text` cites, sorted, each once."""
    lines: list[int] = []
    for match in _CITED.finditer(text):
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) else start
        lines += list(range(start, min(end, start + MAX_RANGE) + 1)) if end >= start else [start]
    return sorted(set(lines))
