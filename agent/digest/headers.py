"""Split a raw log line into header (time, level, host, pid, component) and message.

No per-source configuration: the header is *detected*. A header starts with a timestamp-ish
token (a digit-bearing token, a month or day name, a `-` label, a bracketed time, or a
pipe-joined `time|component|pid|` prefix) and ends at the first of

* a level word (`INFO`, `[error]`, `Warning`, logcat's `D`/`E` after the pids), followed by
  what log4j/Python/OpenStack put after a level: `[thread]`, `component:` or `component [ctx]`, `-`;
* a syslog-style tag ending in a colon (`sshd[24200]:`, `dfs.DataNode$PacketResponder:`);
* a ` - ` separator after a program name (`chrome.exe *64 -`).

If none of those shows up among the first tokens, only the leading run of digit-bearing tokens
(timestamps, ids, hosts like `node-246`) is removed. Lines that are JSON objects use their
level/msg/time fields. Anything we leave in by mistake is usually a constant or a digit-bearing
token that masking turns into `<*>`, so the grouping stays right even when the cut is not exact.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from agent.digest.severity import LEVEL_WORDS, LOGCAT_LETTERS, parse_severity

# How many leading tokens may belong to a header (BGL's header is 9 tokens long).
MAX_HEADER_TOKENS = 14
# Words without digits allowed between the time and a level/tag: hosts (`combo`), BGL's `RAS KERNEL`,
# Mac's `Google Chrome Helper[1]:`.
MAX_FREE_WORDS = 3

_MONTHS_DAYS = frozenset(
    "jan feb mar apr may jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun".split()
)
_TAG_RE = re.compile(r"[A-Za-z_][\w.$@/\-()\[\]<>#*]*:")
_IDENT_RE = re.compile(r"[A-Za-z_][\w$]*(?:\.[\w$]+)+")
_BRACKET_TIME_RE = re.compile(r"\[([^\]]*\d:\d\d[^\]]*)\]\s*")
# `time|component|pid|message` (HealthApp-style); the message itself may contain pipes, so the
# header is at most three fields and preferably ends at a numeric pid field.
_PIPE_HEADER_RES = (
    re.compile(r"(\d[^|\s]*)((?:\|[^|\s]*?){0,2}\|\d+)\|"),
    re.compile(r"(\d[^|\s]*)(\|[^|\s]*)\|"),
)
_DATE_TOKEN_RE = re.compile(
    r"(?:\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}(?:[-T_ ]\d{1,2}[.:]\d{2}[.:]\d{2}(?:[.,:]\d+)?)?"
    r"|\d{1,2}:\d{2}:\d{2}(?:[.,:]\d+)?"
    r"|\d{1,2}-\d{1,2}|\d{6}|\d{8}|\d{9,10}(?:\.\d+)?)"
    r"(?:Z|[+-]\d{2}:?\d{2})?,?"
)
_HAS_DIGIT_RE = re.compile(r"\d")
# What only a time looks like (not a count such as BGL's `INFO 199680 double-hummer …`).
_CLOCK_OR_EPOCH_RE = re.compile(r"\d{9,10}(?:\.\d+)?|\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}\S*|\d{1,2}:\d{2}:\d{2}\S*")

# vLLM's multiprocess prefix, `(APIServer pid=1) `, `(EngineCore_DP0 pid=42) `, `(VllmWorker rank=0 pid=7) `,
# and Ray's `(task pid=15436, ip=10.130.4.26) `: which process printed the rest of the line.
_PROCESS_TAG_RE = re.compile(r"\((?:[A-Za-z_][\w.-]*)(?:,?\s+\w+=[\w.:-]+)+\)\s+")
# glog/absl's `E0118 22:42:45.737331   20084 tpu_pjrt_client.cc:1889] message` (TPU runtime, JAX) and
# SkyPilot's `W 01-16 17:42:36 instance_utils.py:112] message`: a level letter, a time, `file:line]`.
_GLOG_RE = re.compile(r"([IWEF]) ?\d{2}-?\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?(?:\s+\d+)?\s+[\w./-]+:\d+\]\s")
_GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "FATAL"}
# Python logging's default format, `WARNING:absl:message` (levelname:logger:message).
_PY_DEFAULT_RE = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):([\w.-]+):(?=\S)")
# vLLM's `INFO 11-21 06:20:43 [api_server.py:1612] message`: a month-day and a clock after the level.
_MONTH_DAY_RE = re.compile(r"\d{2}-\d{2}")
_CLOCK_RE = re.compile(r"\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?")
_JSON_MESSAGE_KEYS = ("msg", "message", "textPayload", "log", "text", "event")
_JSON_LEVEL_KEYS = ("level", "severity", "levelname", "lvl", "log.level", "loglevel")
_JSON_TIME_KEYS = ("time", "timestamp", "ts", "@timestamp", "asctime", "datetime", "date")


@dataclass(frozen=True, slots=True)
class ParsedLine:
    message: str
    severity: int | None  # from the header; None when the line carried no level
    time_text: str | None  # the time as written, when the format gave it directly
    header: str = ""  # the stripped header tokens; the time is read from them only on demand

    @property
    def timestamp(self) -> str | None:
        """The header's time text as written (not parsed); computed lazily because most
        lines' times are never shown."""
        if self.time_text is not None or not self.header:
            return self.time_text
        return _timestamp_text(self.header.split())


def split_header(line: str) -> ParsedLine:
    """Detect and remove the header of one raw log line. (The digest calls this once per line
    *shape*, see shapes.py: the decision depends on token shapes, never on digit values.)"""
    text = line.strip()
    if not text:
        return ParsedLine("", None, None)
    if text[0] == "{":
        parsed = _split_json(text)
        if parsed is not None:
            return parsed
    if text[0] == "(" and (tag := _PROCESS_TAG_RE.match(text)) and tag.end() < len(text):
        rest = _split_tokens(text[tag.end():])
        return ParsedLine(rest.message, rest.severity, rest.time_text, tag.group(0) + rest.header)
    if (glog := _GLOG_RE.match(text)) and glog.end() < len(text):
        return ParsedLine(text[glog.end():], LEVEL_WORDS[_GLOG_LEVELS[glog.group(1)]], None, glog.group(0))
    if (python := _PY_DEFAULT_RE.match(text)) and python.end() < len(text):
        return ParsedLine(text[python.end():], LEVEL_WORDS[python.group(1)], None, python.group(0))
    return _split_tokens(text)


def _split_tokens(text: str) -> ParsedLine:
    timestamp: str | None = None
    started = False  # have we seen something that only a header starts with?
    if text[0] == "[":
        match = _BRACKET_TIME_RE.match(text)
        if match:
            timestamp = match.group(1)
            text = text[match.end() :]
            started = True
    elif text[0].isdigit():
        for pipe_header in _PIPE_HEADER_RES:
            match = pipe_header.match(text)
            if match:
                return ParsedLine(text[match.end() :], None, match.group(1))

    tokens = text.split(None, MAX_HEADER_TOKENS)
    scan = tokens if len(tokens) <= MAX_HEADER_TOKENS else tokens[:MAX_HEADER_TOKENS]
    if not started:
        first = scan[0]
        started = (
            first == "-"
            or bool(_HAS_DIGIT_RE.search(first))
            or first.lower().rstrip(",") in _MONTHS_DAYS
            # an alert label in front of the time (BGL's `APPREAD 1117869872 …`)
            or (first.isupper() and len(scan) > 1 and scan[1][:1].isdigit())
        )

    severity: int | None = None
    cut: int | None = None
    free_words = 0
    pending_free = 0  # free words since the last header token
    leading_header = 0  # tokens in the run of time/id tokens before the first free word
    named = False  # a digit-bearing token that is not a time (`AcroRd32.exe`, `node-246`) was seen
    for index, token in enumerate(scan):
        if index == len(scan) - 1 and len(tokens) == 1:
            break  # a lone token is the message
        level = _level_of(token)
        if (
            level is not None
            and (started or index == 0)
            # a level needs a message after it (HPC's `… 1 Link error` ends in one), and a level
            # followed by a time is a header field (`switch_module error 1073991556 1 Link ok`)
            and index < len(tokens) - 1
            and not (index + 1 < len(scan) and _CLOCK_OR_EPOCH_RE.fullmatch(scan[index + 1]))
        ):
            severity = level
            cut = _after_level(tokens, index + 1)
            break
        if (
            started
            and len(token) == 1
            and token in LOGCAT_LETTERS
            and index > 0
            and scan[index - 1].isdigit()
            and free_words == 0
        ):
            severity = LOGCAT_LETTERS[token]
            cut = _after_level(tokens, index + 1)
            break
        if (started or index == 0) and free_words <= MAX_FREE_WORDS and _is_tag(token):
            cut = index + 1
            break
        if not started:
            break
        if token == "-":
            if free_words or named:  # `program - message`, `AcroRd32.exe - message`
                cut = index + 1
                break
            if pending_free == 0:
                leading_header = index + 1
            continue
        if _HAS_DIGIT_RE.search(token) or token.lower().rstrip(",") in _MONTHS_DAYS:
            is_time = _DATE_TOKEN_RE.fullmatch(token) is not None
            if (index or timestamp is not None) and not is_time and _HAS_DIGIT_RE.search(token):
                named = True
            if pending_free == 0:
                leading_header = index + 1
            elif pending_free <= MAX_FREE_WORDS and is_time:
                # `id node component state <epoch> <flag> message` (HPC, also with a digit-free
                # node: `2286759 full partition status 1061219795 -1 running`): the header resumes
                leading_header = index + 1
                pending_free = 0
            continue
        free_words += 1
        pending_free += 1
        if free_words > MAX_FREE_WORDS:
            break
    if cut is None:
        cut = leading_header
    if cut >= len(tokens):
        # Everything looked like header: keep the last token so the line is not empty.
        cut = len(tokens) - 1
    if cut == 0:
        return ParsedLine(text, severity, timestamp)
    message = tokens[cut] if cut == len(tokens) - 1 else text.split(None, cut)[cut]
    header = "" if timestamp is not None else text[: len(text) - len(message)]
    return ParsedLine(message, severity, timestamp, header)


def _level_of(token: str) -> int | None:
    if token[0] == "[":
        if token[-1] != "]":
            return None
        token = token[1:-1]
    return LEVEL_WORDS.get(token.rstrip(":,").upper())


def _is_tag(token: str) -> bool:
    return token[-1] == ":" and len(token) > 1 and _TAG_RE.fullmatch(token) is not None


def _after_level(tokens: list[str], index: int) -> int:
    """Skip what loggers print between the level and the message; return the cut."""
    count = len(tokens)
    if index < count - 2 and _MONTH_DAY_RE.fullmatch(tokens[index]) and _CLOCK_RE.fullmatch(tokens[index + 1]):
        index += 2  # vLLM: `INFO 11-21 06:20:43 [file.py:12] message`
    if index < count - 1 and tokens[index] == "-":
        index += 1
    # OpenStack: `nova.compute.manager [req-… …] message`
    if index < count - 2 and tokens[index + 1][0] == "[" and _IDENT_RE.fullmatch(tokens[index]):
        index += 1
    if index < count - 1 and tokens[index][0] == "[":
        end = index
        depth = 0
        while end < min(count - 1, index + 10):
            depth += tokens[end].count("[") - tokens[end].count("]")
            if depth <= 0:
                break
            end += 1
        if depth <= 0:
            index = end + 1
    if index < count - 1 and _is_tag(tokens[index]):
        index += 1
    elif index < count - 2 and tokens[index + 1] == ":":
        index += 2
    if index < count - 1 and tokens[index] == "-":
        index += 1
    return index


def _timestamp_text(header: list[str]) -> str | None:
    parts: list[str] = []
    for token in header:
        if (
            _DATE_TOKEN_RE.fullmatch(token)
            or token.lower().rstrip(",") in _MONTHS_DAYS
            # day of month / year after a month name (`Jun 14 15:16:01`, `Jul  1 … 2005`)
            or (parts and parts[-1].lower() in _MONTHS_DAYS and token.isdigit() and len(token) in (1, 2, 4))
            or (parts and ":" in parts[-1] and token.isdigit() and len(token) == 4 and token[:2] in ("19", "20"))
        ):
            parts.append(token.rstrip(","))
        elif parts:
            break
    return " ".join(parts) or None


def _split_json(text: str) -> ParsedLine | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    message = _first(record, _JSON_MESSAGE_KEYS)
    level = _first(record, _JSON_LEVEL_KEYS)
    when = _first(record, _JSON_TIME_KEYS)
    if message is None:
        # No message field: the remaining fields, in order, are the message.
        rest = {k: v for k, v in record.items() if k not in _JSON_LEVEL_KEYS and k not in _JSON_TIME_KEYS}
        message = json.dumps(rest, separators=(",", ":"), sort_keys=False)
    return ParsedLine(
        str(message).strip().replace("\n", " "),
        None if level is None else parse_severity(level),
        None if when is None else str(when),
    )


def _first(record: dict, keys: tuple[str, ...]) -> object | None:
    for key in keys:
        value = record.get(key)
        if value is not None and value != "":
            return value
    if "." in "".join(keys):
        # nested ECS-style `{"log": {"level": "error"}}`
        for key in keys:
            if "." in key:
                outer, inner = key.split(".", 1)
                nested = record.get(outer)
                if isinstance(nested, dict) and nested.get(inner) not in (None, ""):
                    return nested[inner]
    return None
