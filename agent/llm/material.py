"""What a mention brings with it: the person's own request, and the logs around it.

The request is the only text that speaks for the person. Everything else — pasted log lines,
attached files, earlier messages in the thread — is untrusted data: it is summarized and
quoted, never obeyed (a paste saying "tear down the TPU" is not a request to tear it down).

Splitting a mention: text inside ``` fences is pasted data and the words outside are the
request; without fences the first line is the request and the following lines are pasted data
(`@tpubot what broke?` + 50 lines of log). Secrets are redacted here, at intake, with line
numbers preserved so `L12` in a digest still points at the person's line 12.

A request line can carry material too: a log record pasted after the words (`summarize: 10:00
ERROR rpc failed …`), a speaker label that starts a transcript (`ASSISTANT: …`, the shape of an
injected instruction), a quoted line (`> …`), a quoted phrase (`what does "tear down the TPU"
mean?`). `request_words` takes those out for one question only — does the person ask for a write
action (a provision or teardown card)? — and nowhere else: the model, the digest and the
model-less rules see the request as typed, so a request whose line mentions `ERROR` or a
`backticked` name keeps every word.

A pasted text or the thread is small and kept in memory; an attached file is a `LineSpool` (its
lines, redacted as they were read, on disk), so the material of a mention costs memory in
proportion to the paste, not to the files. Close the MentionInput when the job ends.

Images (screenshots attached to the mention or earlier in the thread) arrive already resized for
Gemma 4 (infra/images.py), newest first, at most the endpoint's per-prompt image limit; a few hundred
KiB each. Their bytes are never text: they are not redacted, logged or digested, only sent.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from agent.digest import DigestBuilder, LineSpool, mine
from agent.digest.severity import LEVEL_WORDS
from agent.redact import redact, redact_lines, redact_stream
from infra.images import PreparedImage

FENCE = "```"
_MENTION_RE = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")
_LANG_TAG = re.compile(r"[a-z]{1,12}")


@dataclass(frozen=True)
class LogSource:
    name: str  # "pasted text", "file incident.log", "thread"
    lines: Sequence[str] | LineSpool  # a tuple, or a file's lines on disk; redacted either way


@dataclass(frozen=True)
class MentionInput:
    request: str  # the person's own words (redacted)
    sources: tuple[LogSource, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. a file that could not be read, said to the person
    images: tuple[PreparedImage, ...] = ()  # newest first, resized; sent to the model as image parts

    @property
    def has_logs(self) -> bool:
        return any(source.lines for source in self.sources if source.name != "thread")

    def log_lines(self) -> Iterator[str]:
        """Pasted text and files in one numbering (the thread is context, not logs); each call
        reads them again from the start."""
        return itertools.chain.from_iterable(source.lines for source in self.sources if source.name != "thread")

    def log_line_count(self) -> int:
        return sum(len(source.lines) for source in self.sources if source.name != "thread")

    def thread_lines(self) -> list[str]:
        return [line for s in self.sources if s.name == "thread" for line in s.lines]

    @cached_property
    def mined(self) -> DigestBuilder:
        """The logs, mined on first use and kept for the run: the prompt, the model-less summary,
        summarize_logs and the incident memory each lay out a digest of them at their own budget."""
        return mine(self.log_lines())

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

    def close(self) -> None:
        """Give back the disk of the files' spools; the lines cannot be read after this."""
        close_sources(self.sources)

    def __enter__(self) -> MentionInput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class MentionBuilder:
    request: str
    sources: list[LogSource] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    images: list[PreparedImage] = field(default_factory=list)

    def add(self, name: str, lines: list[str]) -> None:
        if lines:
            self.sources.append(LogSource(name, tuple(redact_lines(lines))))

    def add_spool(self, name: str, spool: LineSpool) -> None:
        """A file's lines, filled by `spool_file_lines`; the builder owns the spool from here (an
        empty one is closed at once)."""
        if len(spool):
            self.sources.append(LogSource(name, spool))
        else:
            spool.close()

    def build(self) -> MentionInput:
        return MentionInput(redact(self.request), tuple(self.sources), tuple(self.notes), tuple(self.images))

    def close(self) -> None:
        """For a mention that is not built after all (gathering it failed)."""
        close_sources(self.sources)


def unread_warnings(mention: MentionInput) -> list[str]:
    """The mention's notes (what was cut, skipped or could not be read), as the lines an answer opens with."""
    return [f":warning: {note}" for note in mention.notes]


def image_names(mention: MentionInput) -> str:
    """`dash.png and errors.png`: the images, as the answer names them."""
    names = [image.name for image in mention.images]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def images_read_line(mention: MentionInput) -> str | None:
    """The line an answer by the model opens with when it was shown images."""
    if not mention.images:
        return None
    count = len(mention.images)
    return f":frame_with_picture: Read {count} image{'s' * (count != 1)}: {image_names(mention)}."


def images_unread_line(mention: MentionInput) -> str | None:
    """The model-less answer's line: the images were received, but nothing here can read them."""
    if not mention.images:
        return None
    count = len(mention.images)
    return (f":frame_with_picture: I could not read the {count} image{'s' * (count != 1)} ({image_names(mention)}): "
            "reading images needs the model.")


def spool_file_lines(spool: LineSpool, lines: Iterable[str]) -> None:
    """A file's lines onto its spool, redacted as they pass (a PEM key over lines too)."""
    spool.extend(redact_stream(lines))


def close_sources(sources: Sequence[LogSource]) -> None:
    for source in sources:
        if isinstance(source.lines, LineSpool):
            source.lines.close()


def unescape_slack(text: str) -> str:
    """Slack escapes & < > in message text; logs should read as they were pasted."""
    return html.unescape(text) if "&" in text else text


_LEVEL = "|".join(sorted(LEVEL_WORDS, key=len, reverse=True))
_CLOCK = r"(?:\d{4}-\d{2}-\d{2}[T ]?)?\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?Z?"
# Where material starts inside a request line. To the end of the line: a time then a level (`10:00
# ERROR`, `2024-05-01 10:00:01,123 WARN`, `[10:00:01] [error]`: a log record) and a transcript's
# speaker label (`ASSISTANT:`). To the end of its sentence only: a level in capitals then words
# (`ERROR rpc failed.`): people write those in their own sentences too ("why does vllm say ERROR at
# boot? tear it down if it is stuck"). A time alone (`tear it down at 10:00`) is the person's own words.
_MATERIAL_START = re.compile(
    rf"(?P<record>\[?{_CLOCK}\]?\s+(?:\S+\s+){{0,2}}?\[?(?i:{_LEVEL})\b)"
    r"|(?P<speaker>\b(?:ASSISTANT|SYSTEM|USER|HUMAN|AI|MODEL|DEVELOPER|Assistant|System|Human)\s*:)"
    rf"|(?P<level>\[?\b(?:{_LEVEL})\b\]?:?\s+\S)"
)
_SENTENCE_END = re.compile(r"[.?!;](?=\s|$)")
_QUOTE_MARK = re.compile(r"^\s*(?:>|&gt;)\s?")
# What ends a quoted line and starts the person's words about it: a dash between spaces.
_AFTER_QUOTE = re.compile(r"\s(?:—|–|--|-)\s")
# A quoted phrase (two words or more: a quoted zone or name stays part of the request).
_QUOTED = re.compile(r"\"([^\"]*\s[^\"]*)\"|“([^”]*\s[^”]*)”|`([^`]*\s[^`]*)`")
QUOTED_PLACEHOLDER = "“…”"


def split_request_line(line: str) -> tuple[str, list[str]]:
    """(the person's own words, the material in the same line). See the module's docstring."""
    material: list[str] = []
    quote = _QUOTE_MARK.match(line)
    if quote:
        quoted = line[quote.end():]
        after = list(_AFTER_QUOTE.finditer(quoted))
        if not after:
            return "", [quoted.strip()]
        material.append(quoted[:after[-1].start()].strip())
        line = quoted[after[-1].end():]

    def take(match: re.Match[str]) -> str:
        material.append(next(group for group in match.groups() if group is not None).strip())
        return QUOTED_PLACEHOLDER

    # Quoted phrases first: a level word inside quotes is quoted, not a record that runs on.
    line = _QUOTED.sub(take, line)
    while start := _MATERIAL_START.search(line):
        end = len(line)
        if start.lastgroup == "level":
            sentence = _SENTENCE_END.search(line, start.end())
            end = sentence.end() if sentence else end
        material.append(line[start.start():end].strip())
        line = line[:start.start()] + " " + line[end:]
    return " ".join(line.split()), [m for m in material if m]


def request_words(request: str) -> str:
    """The request without the material its line carries: what the person asks for themselves."""
    return split_request_line(request)[0]


def split_mention(text: str) -> tuple[str, list[str]]:
    """(the request, pasted lines) from a mention's text; bot mentions are removed. The request is
    the person's line as typed (`request_words` is for the write-action check only)."""
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


def prompt_digest(mention: MentionInput) -> str:
    """A digest of everything an answer was made from (the request, the thread, the logs): two
    ratings of the same digest rated the same input (issue 32's feedback). Reads the lines again."""
    digest = hashlib.sha256(mention.request.encode())
    for source in mention.sources:
        digest.update(b"\0" + source.name.encode())
        for line in source.lines:
            digest.update(b"\n" + line.encode())
    return digest.hexdigest()[:16]
