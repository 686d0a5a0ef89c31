"""A digest's templates linked to the runbooks whose symptoms they match.

The link is made on the digest's real lines (exemplars, with their numbers), not on masked
templates: a symptom is written against what a system prints. Each link names the section to cite
(`RB:<file>#<section>`) and the lines that match it, so an answer can say "this looks like …,
see RB:…" with its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.runbooks.index import RunbookIndex
from infra.runbooks.sections import Section

MAX_LINKS = 3
FIX_CHARS = 240


@dataclass(frozen=True)
class RunbookLink:
    section: Section
    lines: tuple[int, ...]

    @property
    def cite(self) -> str:
        return self.section.cite

    def first_fix(self) -> str:
        """The fix's first step, shortened for a one-line mention."""
        first = next((line for line in self.section.fix.splitlines() if line.strip()), "")
        first = first.lstrip("0123456789.) ").strip()
        return first if len(first) <= FIX_CHARS else first[: FIX_CHARS - 1] + "…"

    def evidence(self) -> str:
        return ", ".join(f"L{line}" for line in self.lines[:4])


def runbook_links(digest, index: RunbookIndex | None, limit: int = MAX_LINKS) -> list[RunbookLink]:
    """The runbook sections matching the digest's lines, most matched lines first."""
    if index is None:
        return []
    numbered: dict[int, str] = {}
    for template in digest.ranked:
        # The first and last lines are whole (exemplars may be cut short); they are only matched, never shown.
        numbered[template.first_line] = template.first_text
        numbered[template.last_line] = template.last_text
        numbered.update((exemplar.line, exemplar.text) for exemplar in template.exemplars)
    return [RunbookLink(section, tuple(sorted(lines)))
            for section, lines in index.matching(sorted(numbered.items()))[:limit]]


def render_links(links: list[RunbookLink]) -> str:
    """For the model: each matching section, its evidence, and its cause and fix."""
    return "\n\n".join(f"{link.cite} — {link.section.title} (its symptoms match {link.evidence()})\n"
                       f"{link.section.body()}" for link in links)
