"""Running a set of incidents against the arms, and what the table and `--json` show."""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass, field

from agent.context import Services
from agent.evals.arms import Answer, Arm, answer
from agent.evals.cases import Incident
from agent.digest.digest import build_digest
from agent.digest.runbook_links import search_query as runbook_search_query
from agent.evals.scoring import CHECKS, Score, score_answer
from infra.runbooks.index import RunbookIndex

SEARCH_TOP = 3


@dataclass(frozen=True)
class CaseResult:
    incident: Incident
    arm: Arm
    answer: Answer
    score: Score

    def as_dict(self) -> dict:
        return {"case": self.incident.name, "kind": self.incident.kind, "arm": self.arm.value,
                "score": round(self.score.value, 4), "passed": self.score.passed, "checks": self.score.checks,
                "missing_facts": list(self.score.missing_facts), "bad_citations": list(self.score.bad_citations),
                "wide_citations": list(self.score.wide_citations),
                "missing_runbooks": list(self.score.missing_runbooks),
                "wrong_runbooks": list(self.score.wrong_runbooks), "problems": list(self.score.problems),
                "proposed": self.answer.proposed, "seconds": round(self.answer.seconds, 3),
                "error": self.answer.error, "answer": self.answer.text}


@dataclass
class EvalResult:
    arms: list[Arm]
    endpoint_label: str
    results: list[CaseResult] = field(default_factory=list)
    search_hits: int = 0
    search_cases: int = 0

    def of(self, arm: Arm) -> list[CaseResult]:
        return [result for result in self.results if result.arm is arm]

    def summary(self, arm: Arm) -> dict:
        """The arm's figures: the mean score, and each check's mean over the cases it applies to
        (`scored`: how many; a check no case has is None)."""
        rows = self.of(arm)
        scored = {check: [r.score.checks[check] for r in rows if check in r.score.checks] for check in CHECKS}
        return {"arm": arm.value, "cases": len(rows), "passed": sum(r.score.passed for r in rows),
                "score": round(100 * statistics.fmean(r.score.value for r in rows), 1) if rows else 0.0,
                "checks": {check: round(100 * statistics.fmean(values), 1) if values else None
                           for check, values in scored.items()},
                "scored": {check: len(values) for check, values in scored.items()},
                "errors": sum(bool(r.answer.error) for r in rows)}

    def as_dict(self) -> dict:
        return {"endpoint": self.endpoint_label, "arms": [self.summary(arm) for arm in self.arms],
                "runbook_search": {"top": SEARCH_TOP, "hits": self.search_hits, "cases": self.search_cases},
                "cases": [result.as_dict() for result in self.results]}


def search_query(incident: Incident) -> str:
    """What the agent would search with, built without the answer key (runbook_links.search_query)."""
    return runbook_search_query(incident.mention, build_digest(incident.logs), lambda n: incident.logs[n - 1])


def measure_search(incidents: list[Incident], index: RunbookIndex) -> tuple[int, int]:
    """How many of the incidents that expect a runbook find one of them in the top SEARCH_TOP."""
    expecting = [incident for incident in incidents if incident.runbooks]
    hits = 0
    for incident in expecting:
        found = [hit.section.cite for hit in index.search(search_query(incident), limit=SEARCH_TOP)]
        hits += any(cite in found for cite in incident.runbooks)
    return hits, len(expecting)


async def run_eval(svc: Services, incidents: list[Incident], arms: list[Arm], *, endpoint: str, model: str,
                   endpoint_label: str, source: str | None = None, on_case=None) -> EvalResult:
    """`source`: what errors call the endpoint (`--endpoint`), see arms.answer."""
    index = await asyncio.to_thread(svc.runbooks.index)
    result = EvalResult(arms=arms, endpoint_label=endpoint_label)
    result.search_hits, result.search_cases = measure_search(incidents, index)
    for number, incident in enumerate(incidents, start=1):
        for arm in arms:
            channel = f"C0EVAL{number:04d}{arm.value[:2].upper()}"
            reply = await answer(arm, incident, svc, endpoint=endpoint, model=model, channel=channel,
                                 source=source)
            case = CaseResult(incident, arm, reply, score_answer(incident, reply.text, reply.proposed, index))
            result.results.append(case)
            if on_case is not None:
                on_case(case)
    return result
