"""Search over runbook sections: SQLite FTS5 with BM25 (the standard library's sqlite3).

Titles weigh most, then symptoms, then cause and fix: a query that names an error message should
find the section that lists it. Queries are plain words (FTS5's own syntax never reaches it: a
user's `"` or `-` would be a syntax error or an operator), any of which may match. A section one
of whose symptom patterns matches the query itself (a pasted error line, as the system printed
it) comes before the sections that only share words with it.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from infra.runbooks.sections import Section

_WORD = re.compile(r"[A-Za-z0-9]+")
# bm25() weights per column: title, symptoms, cause, fix.
_WEIGHTS = (8.0, 4.0, 1.5, 1.0)
# Words too common in runbooks to rank by (FTS5 has no stop-word list of its own).
_STOP = frozenset("a an and are as at be by can do does for from how i in is it my of on or the this to what "
                  "when why with".split())


@dataclass(frozen=True)
class Hit:
    section: Section
    score: float  # higher is better (BM25, sign flipped)


class RunbookIndex:
    def __init__(self, sections: list[Section]) -> None:
        self.sections = list(sections)
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE sections USING fts5(title, symptoms, cause, fix, "
                         "tokenize='porter unicode61')")
        self._db.executemany("INSERT INTO sections(rowid, title, symptoms, cause, fix) VALUES (?, ?, ?, ?, ?)",
                             [(i, s.title, _words(" ".join(s.symptoms)), s.cause, s.fix)
                              for i, s in enumerate(self.sections)])

    def search(self, query: str, limit: int = 5) -> list[Hit]:
        words = [word for word in dict.fromkeys(w.lower() for w in _WORD.findall(query)) if word not in _STOP]
        if not words:
            return []
        match = " OR ".join(f'"{word}"' for word in words)
        rows = self._db.execute(
            f"SELECT rowid, bm25(sections, {', '.join(map(str, _WEIGHTS))}) AS rank FROM sections "
            "WHERE sections MATCH ? ORDER BY rank", (match,)).fetchall()
        scored = {rowid: -rank for rowid, rank in rows}
        # Symptoms recognise an error as printed: the more of a section's patterns the query's
        # lines match, the surer the section; words decide among equals and after them.
        recognised = {rowid: sum(any(p.search(line) for line in query.splitlines() or [query]) for p in section.patterns)
                      for rowid, section in enumerate(self.sections)}
        order = sorted(scored, key=lambda rowid: (-recognised[rowid], -scored[rowid]))
        return [Hit(self.sections[rowid], scored[rowid]) for rowid in order[:limit]]

    def matching(self, lines: list[tuple[int, str]]) -> list[tuple[Section, list[int]]]:
        """Sections with a symptom that matches one of the numbered lines, and those line numbers."""
        found = []
        for section in self.sections:
            hits = [number for number, line in lines if section.matches(line)]
            if hits:
                found.append((section, hits))
        return sorted(found, key=lambda pair: (-len(pair[1]), pair[1][0]))

    def by_cite(self, cite: str) -> Section | None:
        return next((s for s in self.sections if s.cite == cite), None)


def _words(text: str) -> str:
    """Symptom regexes as the words they name (`max_num_batched_tokens \\(\\d+\\)` → its words)."""
    return " ".join(word for word in _WORD.findall(re.sub(r"\\[a-zA-Z]", " ", text)))
