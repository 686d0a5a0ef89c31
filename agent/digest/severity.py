"""Severity on one scale for every source: Cloud Logging's numbers (DEBUG 100 … EMERGENCY 800).

Levels come from the line header when there is one (syslog-style, log4j, Android letters,
Apache's `[error]`, Cloud Logging's `severity`). A line without a level gets one from words in
its message, so `Failed password for root` still outranks a chatty INFO line.
"""

from __future__ import annotations

import re

DEFAULT = 0
DEBUG = 100
INFO = 200
NOTICE = 300
WARNING = 400
ERROR = 500
CRITICAL = 600
ALERT = 700
EMERGENCY = 800

SEVERITY_NAMES: dict[int, str] = {
    DEFAULT: "DEFAULT",
    DEBUG: "DEBUG",
    INFO: "INFO",
    NOTICE: "NOTICE",
    WARNING: "WARNING",
    ERROR: "ERROR",
    CRITICAL: "CRITICAL",
    ALERT: "ALERT",
    EMERGENCY: "EMERGENCY",
}

# Upper-cased level words seen in the wild -> severity. Single letters are Android's logcat
# levels; they only count where the header parser allows them (after a timestamp and pids).
LEVEL_WORDS: dict[str, int] = {
    "TRACE": DEBUG,
    "VERBOSE": DEBUG,
    "DEBUG": DEBUG,
    "DBG": DEBUG,
    "FINE": DEBUG,
    "FINER": DEBUG,
    "FINEST": DEBUG,
    "INFO": INFO,
    "INFORMATION": INFO,
    "NOTICE": NOTICE,
    "WARN": WARNING,
    "WARNING": WARNING,
    "ERROR": ERROR,
    "ERR": ERROR,
    "SEVERE": ERROR,
    "FATAL": CRITICAL,
    "CRITICAL": CRITICAL,
    "CRIT": CRITICAL,
    "ALERT": ALERT,
    "EMERG": EMERGENCY,
    "EMERGENCY": EMERGENCY,
    "PANIC": EMERGENCY,
}
LOGCAT_LETTERS: dict[str, int] = {"V": DEBUG, "D": DEBUG, "I": INFO, "W": WARNING, "E": ERROR, "F": CRITICAL, "A": CRITICAL}

# Message words that imply a severity when the header carried none. Checked in order.
_KEYWORD_RULES: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"\b(?:panic|fatal|kernel terminated|segfault|out of memory|oom-?kill)", re.I), CRITICAL),
    (
        re.compile(
            r"\b(?:error|errors|exception|traceback|fail(?:s|ed|ure)?|refused|denied|unreachable|"
            r"timed? ?out|abort(?:ed)?|crash(?:ed)?|corrupt(?:ed)?|invalid|unable|cannot|can't|break-in|"
            r"errno|quota exceeded|no space left)\b",
            re.I,
        ),
        ERROR,
    ),
    # A raised exception's class (`OSError: [Errno 122] …`, `RuntimeProgramAllocationFailure`): case
    # matters, or every `errorCount` field would be an error.
    (re.compile(r"\b[A-Z]\w*(?:Error|Exception|Failure|Fault)\b"), ERROR),
    (re.compile(r"\b(?:warn(?:ing)?|deprecated|retry(?:ing)?|slow|degraded)\b", re.I), WARNING),
)


def infer_severity(message: str) -> int:
    """Severity guessed from a message without a header level; DEFAULT when nothing matches."""
    for pattern, severity in _KEYWORD_RULES:
        if pattern.search(message):
            return severity
    return DEFAULT


def severity_name(severity: int) -> str:
    return SEVERITY_NAMES.get(severity, str(severity))


def parse_severity(value: object) -> int:
    """`"ERROR"`, `"error"`, `500` or None -> number (unknown names -> DEFAULT)."""
    if value is None:
        return DEFAULT
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    return LEVEL_WORDS.get(text.upper(), DEFAULT)
