"""A runbook file read into its sections: one incident kind per `##` section.

The format (docs/runbooks.md): one `#` title for the file, then per section a title and the bold
parts **Symptoms** (list items whose backticked texts, before the ` — ` of a description, are
case-insensitive regexes matched against one log line each), **Cause**, **Fix** and **Sources**. A section is cited as
`RB:<file stem>#<slug of its title>`, the way a log line is cited as `L12`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PART = re.compile(r"^\*\*(symptoms|cause|fix|sources)\*\*\s*:?\s*(.*)$", re.IGNORECASE)
_BACKTICKED = re.compile(r"`([^`]+)`")
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def slug(title: str) -> str:
    return _NOT_SLUG.sub("-", title.lower()).strip("-")


@dataclass(frozen=True)
class Section:
    stem: str
    title: str
    file_title: str
    symptoms: tuple[str, ...]  # the Symptoms items as written
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    sources: tuple[str, ...]
    origin: str  # where it was read: "built-in", a path or a URL

    @property
    def cite(self) -> str:
        return f"RB:{self.stem}#{slug(self.title)}"

    def matches(self, line: str) -> bool:
        return any(pattern.search(line) for pattern in self.patterns)

    def body(self) -> str:
        """The text people and the model read (symptoms, cause, fix), without the sources."""
        parts = [f"Symptoms: {'; '.join(self.symptoms)}" if self.symptoms else "",
                 f"Cause: {self.cause}" if self.cause else "", f"Fix: {self.fix}" if self.fix else ""]
        return "\n".join(part for part in parts if part)


@dataclass
class ParsedFile:
    sections: list[Section] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what was skipped, and why


def parse_runbook(stem: str, text: str, origin: str) -> ParsedFile:
    """The file's sections; a section with a bad pattern keeps its other patterns, and says so."""
    parsed = ParsedFile()
    file_title = stem
    for block in _section_blocks(text):
        if block[0].startswith("# "):
            file_title = block[0][2:].strip()
            continue
        section, problems = _section(stem, file_title, block, origin)
        parsed.problems += problems
        if section is not None:
            parsed.sections.append(section)
    return parsed


def _section_blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and (line.startswith("# ") or line.startswith("## ")):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def _section(stem: str, file_title: str, block: list[str], origin: str) -> tuple[Section | None, list[str]]:
    title = block[0][3:].strip()
    parts: dict[str, list[str]] = {"symptoms": [], "cause": [], "fix": [], "sources": []}
    current = None
    for line in block[1:]:
        match = _PART.match(line.strip())
        if match:
            current = match.group(1).lower()
            line = match.group(2)
        if current is not None and line.strip():
            parts[current].append(line.strip())
    problems: list[str] = []
    if not title:
        return None, [f"{origin}: a section without a title was skipped"]
    symptoms = tuple(_item(line) for line in parts["symptoms"] if line.startswith(("-", "*")))
    patterns = []
    for text in symptoms:
        for pattern in _BACKTICKED.findall(_pattern_part(text)):
            try:
                patterns.append(re.compile(pattern, re.IGNORECASE))
            except re.error as error:
                problems.append(f"{origin} § {title}: symptom `{pattern}` is not a regular expression ({error})")
    sources = tuple(_item(line) for line in parts["sources"] if line.startswith(("-", "*")))
    return Section(stem=stem, title=title, file_title=file_title, symptoms=symptoms, patterns=tuple(patterns),
                   cause=" ".join(parts["cause"]), fix="\n".join(parts["fix"]), sources=sources,
                   origin=origin), problems


def _pattern_part(symptom: str) -> str:
    """The part of a symptom item that holds its patterns: before the ` — ` that starts its
    description, so a name quoted there (`READONLY`, `tool_calls`) is not a pattern that matches
    every line naming it."""
    return symptom.split(" — ", 1)[0]


def _item(line: str) -> str:
    return line.lstrip("-* ").strip()
