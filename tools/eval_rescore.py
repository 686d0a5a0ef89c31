#!/usr/bin/env python3
"""Score the answers in a `tpubot eval --json` report again, by this checkout's rules and incidents.

    python tools/eval_rescore.py REPORT.json INCIDENTS_DIR [INCIDENTS_DIR ...] [--json]

How an older bot compares with this one on today's rules: run the older checkout's `tpubot eval
--json --cases <this checkout>/agent/evals/incidents --only-cases > before.json` (its answers to
today's incidents), then rescore them here. The README's "before" figures are made this way
(README, "Runbooks and answers you can measure"). Only the answers and proposals are taken from
the report; what they earn is decided here. A case whose incident is not in the folders is an
error naming it (the report was made on other incidents).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def rescore(report: dict, folders: list[Path]) -> dict[str, float]:
    """Each arm's mean score (0–100, one decimal) over the report's cases, scored by today's rules."""
    from agent.evals.cases import load_incidents
    from agent.evals.scoring import score_answer
    from infra.runbooks.library import RunbookLibrary

    incidents = {incident.id: incident for incident in load_incidents(folders)}
    index = RunbookLibrary.from_settings().index()
    values: dict[str, list[float]] = {}
    for case in report["cases"]:
        incident = incidents.get(case["case"])
        if incident is None:
            raise SystemExit(f"case {case['case']!r} is not an incident in {', '.join(map(str, folders))}; "
                             "rescore a report made on these incidents (a variation `~N` cannot be rescored)")
        score = score_answer(incident, case["answer"], case["proposed"], index)
        values.setdefault(case["arm"], []).append(score.value)
    return {arm: round(100 * statistics.fmean(scores), 1) for arm, scores in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a `tpubot eval --json` report")
    parser.add_argument("folders", type=Path, nargs="+", help="the incident folders the report was made on")
    parser.add_argument("--json", action="store_true", help="print {arm: score} as JSON")
    args = parser.parse_args()
    scores = rescore(json.loads(args.report.read_text(encoding="utf-8")), args.folders)
    if args.json:
        print(json.dumps(scores))
        return
    for arm, score in scores.items():
        print(f"{arm:<10} {score:5.1f}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
