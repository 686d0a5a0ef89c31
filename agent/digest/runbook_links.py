"""A digest's templates linked to the runbooks whose symptoms they match.

The link is made on the digest's real lines (exemplars, with their numbers), not on masked
templates: a symptom is written against what a system prints. Each link names the section to cite
(`RB:<file>#<section>`) and the lines that match it, so an answer can say "this looks like …,
see RB:…" with its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Iterable

from agent.digest.digest import Digest, DigestBuilder
from agent.digest.tokens import estimate_tokens
from infra.runbooks.index import RunbookIndex
from infra.runbooks.sections import Section

MAX_LINKS = 3
FIX_CHARS = 240
MIN_DIGEST_TOKENS = 600


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


def digest_with_runbooks(lines: Iterable[str], budget_tokens: int,
                         index: RunbookIndex | None) -> tuple[Digest, list[RunbookLink], str]:
    """The digest and its runbook links within `budget_tokens` together: the links' text is taken
    out of the digest's budget (the logs are mined once, the digest laid out again), so a capped
    tool result never loses the runbooks at its end."""
    builder = DigestBuilder()
    for line in lines:
        builder.add(line)
    digest = builder.build(budget_tokens)
    links = runbook_links(digest, index)
    # The links get what the digest can spare above its floor; those that do not fit are left out
    # (last first), so the whole stays within budget_tokens.
    spare = budget_tokens - MIN_DIGEST_TOKENS - 20
    while links and estimate_tokens(render_links(links)) > spare:
        links = links[:-1]
    if not links:
        return digest, [], ""
    text = render_links(links)
    digest = builder.build(budget_tokens - estimate_tokens(text) - 20)
    return digest, links, text
