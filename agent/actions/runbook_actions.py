"""search_runbooks: the runbooks (built-in and the team's) as a read-only tool.

Results are sections, best first (SQLite FTS5 BM25, infra/runbooks/index.py), each cited as
`RB:<file>#<section>` and cut to the caller's token budget: a 2B model's 16k context holds the
logs, the thread and the answer too.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from agent.access import ActionKind
from agent.actions.run_context import RunContext
from agent.actions.registry import ActionResult, action
from agent.context import AgentDeps
from agent.digest import estimate_tokens
from infra.mrkdwn import escape

DEFAULT_RESULT_TOKENS = 900


@dataclass(frozen=True)
class RunbookHits:  # search_runbooks' payload: the query and the sections shown (the runbook card)
    query: str
    results: list[dict]


class SearchRunbooksArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(..., min_length=2, max_length=500,
                       description="what to look for: an error message, a symptom or a question")
    max_results: int = Field(3, ge=1, le=10, description="at most this many sections, best first")
    max_tokens: int = Field(DEFAULT_RESULT_TOKENS, ge=100, le=4000, description="size of the result in tokens")


@action("search_runbooks", "Search the runbooks (TPU, vLLM, Gemma serving, Slack, Redis, and the team's own) "
                           "for an error or symptom; each result is a section cited as RB:<file>#<section> with "
                           "its symptoms, cause and fix.", SearchRunbooksArgs, kind=ActionKind.READ)
async def search_runbooks(svc: AgentDeps, run: RunContext, args: SearchRunbooksArgs) -> ActionResult:
    index = await asyncio.to_thread(svc.runbooks.index)  # may stat a folder or fetch a URL
    hits = index.search(args.query, limit=args.max_results)
    if not hits:
        return ActionResult.done(f"No runbook section matches “{escape(args.query)}”. `/tpu runbook` "
                                 "with other words (an error message works best) may find one.",
                                 {"query": args.query, "results": []}, RunbookHits(args.query, []))
    parts: list[str] = []
    shown: list[dict] = []
    budget = args.max_tokens
    for hit in hits:
        section = hit.section
        text = f"{section.cite} — {section.title}\n{section.body()}"
        if shown and estimate_tokens("\n\n".join(parts + [text])) > budget:
            break
        if not shown and estimate_tokens(text) > budget:
            text = _cut(text, budget)
        parts.append(text)
        shown.append({"cite": section.cite, "title": section.title, "file": section.file_title, "body": section.body(),
                      "origin": section.origin, "score": round(hit.score, 3), "sources": list(section.sources)})
    more = len(hits) - len(shown)
    if more:
        parts.append(f"({more} more matching {'section' if more == 1 else 'sections'} left out to fit "
                     f"{budget} tokens)")
    return ActionResult.done("\n\n".join(parts), {"query": args.query, "results": shown},
                             RunbookHits(args.query, shown))


def _cut(text: str, budget: int) -> str:
    keep = max(0, int(len(text) * budget / max(estimate_tokens(text), 1)) - 40)
    return text[:keep].rstrip() + f"\n…[cut to fit {budget} tokens]"
