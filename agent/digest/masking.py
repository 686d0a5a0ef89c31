"""Variable masking: every digit-bearing run between delimiters becomes `<*>`.

One pre-compiled regex with a plain replacement string, applied once per line, is what keeps
the digest fast (Drain3's list of seven masks costs it 5-8x throughput,
reference/logs-metrics.md §5.2). A "run" stops at whitespace and at `= , ( ) [ ] { } " '`, so
`blk_-1608999687919862906`, `10.251.73.220:50010` and `R02-M1-N0-C:J12-U11` each collapse to
one placeholder while key names survive: `ready=true,policy=3` -> `ready=true,policy=<*>`,
`(uid=0)` -> `(uid=<*>)`. A word with one trailing digit (`SOCKS5`, `ipv4`, `md5`, `ssh2`) is
kept: it is nearly always a constant, and hosts like `dn228` carry more digits. Variables
without digits (user names) are left to the miner, which merges them by position.
"""

from __future__ import annotations

import re

WILDCARD = "<*>"

_RUN = r"""[^\s=,()\[\]{}"']"""
# Capitalised month and day names are masked too: they are the digit-free half of a timestamp
# inside a message (`connection from … at Sun Jul 10 03:55:22 2005`).
_CALENDAR = "Mon|Tue|Wed|Thu|Fri|Sat|Sun|Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
# A number's unit is part of the variable: `lifetime <1 sec` and `lifetime 00:01` are one
# event, and `(1.16 KB)` is one placeholder `(<*>)`, which the miner may treat as optional.
_UNITS = "ns|us|ms|s|sec|secs|min|mins|h|B|KB|kB|KiB|MB|MiB|GB|GiB|TB"
_DIGIT_RUN_RE = re.compile(
    rf"(?<!{_RUN})(?:(?:{_CALENDAR})(?!{_RUN})"
    rf"|(?![A-Za-z]{{2,}}\d(?!{_RUN})){_RUN}*\d{_RUN}*(?: (?:{_UNITS})(?!{_RUN}))?)"
)


def mask(message: str) -> str:
    """Replace digit-bearing runs with `<*>` (whitespace and delimiters kept as written)."""
    return _DIGIT_RUN_RE.sub(WILDCARD, message)
