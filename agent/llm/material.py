"""What a mention brings with it: the person's own request, and the logs around it.

The request is the only text that speaks for the person. Everything else — pasted log lines,
attached files, earlier messages in the thread — is untrusted data: it is summarized and
quoted, never obeyed (a paste saying "tear down the TPU" is not a request to tear it down).

Splitting a mention: text inside ``` fences is pasted data and the words outside are the
request; without fences the first line is the request and the following lines are pasted data
(`@tpubot what broke?` + 50 lines of log). Secrets are redacted here, at intake, with line
numbers preserved so `L12` in a digest still points at the person's line 12.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from agent.redact import redact, redact_lines

FENCE = "```"
_MENTION_RE = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")
_LANG_TAG = re.compile(r"[a-z]{1,12}")


@dataclass(frozen=True)
class LogSource:
    name: str  # "pasted text", "file incident.log", "thread"
    lines: tuple[str, ...]


@dataclass(frozen=True)
class MentionInput:
    request: str  # the person's own words (redacted)
    sources: tuple[LogSource, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. a file that could not be read, said to the person

    @property
    def has_logs(self) -> bool:
        return any(source.lines for source in self.sources if source.name != "thread")

    def log_lines(self) -> list[str]:
        """Pasted text and files in one numbering (the thread is context, not logs)."""
        lines: list[str] = []
        for source in self.sources:
            if source.name != "thread":
                lines.extend(source.lines)
        return lines

    def thread_lines(self) -> list[str]:
        return [line for s in self.sources if s.name == "thread" for line in s.lines]

    def line_map(self) -> str:
        """`L1-L50 pasted text; L51-L300 file app.log` so citations can be placed."""
        parts, start = [], 1
        for source in self.sources:
            if source.name == "thread" or not source.lines:
                continue
            end = start + len(source.lines) - 1
            parts.append(f"L{start}-L{end} {source.name}")
            start = end + 1
        return "; ".join(parts)


@dataclass
class MentionBuilder:
    request: str
    sources: list[LogSource] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, lines: list[str]) -> None:
        if lines:
            self.sources.append(LogSource(name, tuple(redact_lines(lines))))

    def build(self) -> MentionInput:
        return MentionInput(redact(self.request), tuple(self.sources), tuple(self.notes))


def unescape_slack(text: str) -> str:
    """Slack escapes & < > in message text; logs should read as they were pasted."""
    return html.unescape(text) if "&" in text else text


def split_mention(text: str) -> tuple[str, list[str]]:
    """(the request, pasted lines) from a mention's text; bot mentions are removed."""
    text = _MENTION_RE.sub("", text or "").strip()
    if FENCE in text:
        pieces = text.split(FENCE)
        outside = " ".join(p.strip() for p in pieces[0::2] if p.strip())
        inside: list[str] = []
        for block in pieces[1::2]:
            lines = block.splitlines()
            if len(lines) > 1 and (not lines[0].strip() or _LANG_TAG.fullmatch(lines[0].strip())):
                lines = lines[1:]  # the newline (or ```log language tag) after the fence
            while lines and not lines[-1].strip():
                lines.pop()
            inside.extend(unescape_slack(line) for line in lines)
        return unescape_slack(outside), inside
    lines = text.splitlines()
    if not lines:
        return "", []
    rest = [unescape_slack(line) for line in lines[1:]]
    while rest and not rest[-1].strip():
        rest.pop()
    return unescape_slack(lines[0].strip()), rest


def build_mention(text: str) -> MentionBuilder:
    request, pasted = split_mention(text)
    builder = MentionBuilder(request=request)
    builder.add("pasted text", pasted)
    return builder
