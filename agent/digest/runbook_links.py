"""A digest's templates linked to the runbooks whose symptoms they match.

The link is made on the digest's real lines (exemplars, with their numbers), not on masked
templates: a symptom is written against what a system prints. Each link names the section to cite
(`RB:<file>#<section>`) and the lines that match it, so an answer can say "this looks like …,
see RB:…" with its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Callable, Iterable

from agent.digest.digest import Digest, DigestBuilder, mine
from agent.digest.headers import split_header
from agent.digest.tokens import estimate_tokens
from infra.runbooks.index import RunbookIndex
from infra.runbooks.sections import Section

MAX_LINKS = 3
SEARCH_LINES = 3  # the digest's first lines in a runbook search query
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


def search_query(request: str, digest: Digest, line_text: Callable[[int], str]) -> str:
    """What to search the runbooks with for an incident: the person's words and the messages of
    the lines the digest ranks first (its reading order), without their headers. `line_text(n)`
    is line n's text. Built from what an answer has, never from an answer key."""
    top = [split_header(line_text(template.first_line)).message for template in digest.ranked[:SEARCH_LINES]]
    return "\n".join([request, *top])


def runbook_links(digest: Digest, index: RunbookIndex | None, limit: int = MAX_LINKS,
                  query: str = "") -> list[RunbookLink]:
    """The runbook sections matching the digest's lines: in the order the search ranks them for
    `query` (the request and the digest's first lines) when there is one, else most matched
    lines first."""
    if index is None:
        return []
    # Whole lines, each distinct message shape's first and last (exemplars may be cut short, and
    # a template's representatives can miss a middle line whose words its `<*>` hides); they are
    # only matched, never shown.
    numbered: dict[int, str] = dict(digest.representatives)
    for template in digest.ranked:
        numbered.setdefault(template.first_line, template.first_text)
        numbered.setdefault(template.last_line, template.last_text)
    matches = index.matching(sorted(numbered.items()))
    if query:
        order = {hit.section.cite: n for n, hit in enumerate(index.search(query, limit=len(index.sections)))}
        matches.sort(key=lambda pair: (order.get(pair[0].cite, len(order)), -len(pair[1]), pair[1][0]))
    return [RunbookLink(section, tuple(sorted(lines))) for section, lines in matches[:limit]]


def render_links(links: list[RunbookLink]) -> str:
    """For the model: each matching section, its evidence, and its cause and fix."""
    return "\n\n".join(f"{link.cite} — {link.section.title} (its symptoms match {link.evidence()})\n"
                       f"{link.section.body()}" for link in links)


def digest_with_runbooks(logs: Iterable[str] | DigestBuilder, budget_tokens: int,
                         index: RunbookIndex | None) -> tuple[Digest, list[RunbookLink], str]:
    """The digest and its runbook links within `budget_tokens` together: the links' text is taken
    out of the digest's budget (the logs mined once, or already mined, the digest laid out again),
    so a capped tool result never loses the runbooks at its end."""
    builder = logs if isinstance(logs, DigestBuilder) else mine(logs)
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
