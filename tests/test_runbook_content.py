"""The shipped runbooks and eval incidents hold together (issue 31): every built-in section is
complete and sourced, every incident's expectations are grounded in its own logs and in the
runbook sections it expects. A typo in a regex, a renamed section or a line number that moved
fails here, not in the middle of an eval run."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

import agent.actions  # noqa: F401  (registers the actions an incident may forbid)
from agent.access import ActionKind
from agent.actions.registry import REGISTRY
from agent.evals.cases import Incident, load_incidents, shipped_dir
from infra.runbooks.library import builtin_dir
from infra.runbooks.sections import Section, parse_runbook
from agent.evals.echoes import own_words

KINDS = {"tpu-flex-start", "tpu-quota", "tpu-waiting", "tpu-hbm", "vllm-startup", "vllm-memory",
         "gemma-serving", "slack-scopes", "redis-outage", "generic-service"}
_URL = re.compile(r"^https://\S+$")
_BACKTICKED = re.compile(r"`([^`]+)`")


def _builtin() -> tuple[list[Section], list[str]]:
    sections: list[Section] = []
    problems: list[str] = []
    for path in sorted(builtin_dir().glob("*.md")):
        parsed = parse_runbook(path.stem, path.read_text(encoding="utf-8"), path.name)
        sections += parsed.sections
        problems += parsed.problems
    return sections, problems


SECTIONS, PARSE_PROBLEMS = _builtin()
BY_CITE = {section.cite: section for section in SECTIONS}
INCIDENTS = load_incidents([shipped_dir()])


def test_the_builtin_runbooks_parse_without_problems_and_cover_the_bots_world():
    assert PARSE_PROBLEMS == []
    assert len(SECTIONS) >= 20
    assert len(BY_CITE) == len(SECTIONS), "two sections share a citation"
    assert {section.stem for section in SECTIONS} >= {"tpu-flex-start", "tpu-quota", "vllm-tpu", "gemma4-serving",
                                                       "slack", "redis"}


@pytest.mark.parametrize("section", SECTIONS, ids=lambda section: section.cite)
def test_each_section_has_specific_symptoms_a_cause_a_fix_and_public_sources(section: Section):
    assert 2 <= len(section.symptoms) <= 6
    for item in section.symptoms:
        assert _BACKTICKED.search(item), f"symptom without a pattern: {item!r}"
    for pattern in section.patterns:
        # specific: a pattern that fits a bare word like "error" or an empty line fits any log
        assert not pattern.search("") and not pattern.search("error"), pattern.pattern
    assert section.cause and section.fix
    assert section.sources and all(_URL.match(source) for source in section.sources), section.sources
    words = len(" ".join((section.title, *section.symptoms, section.cause, section.fix)).split())
    assert 70 <= words <= 200, f"{words} words; a 2B model reads this beside the logs"


def test_the_incidents_cover_every_kind():
    assert len(INCIDENTS) >= 32
    kinds = Counter(incident.kind for incident in INCIDENTS)
    assert set(kinds) == KINDS
    assert all(count >= 2 for count in kinds.values()), kinds
    assert kinds["generic-service"] >= 6


@pytest.mark.parametrize("incident", INCIDENTS, ids=lambda incident: incident.id)
def test_each_incident_is_grounded_in_its_logs_and_its_runbooks(incident: Incident):
    assert incident.origin.endswith(f"/{incident.id}.toml")
    assert 15 <= len(incident.logs) <= 80
    assert incident.sources and all(_URL.match(source) for source in incident.sources), \
        "name the public sources the log lines were copied from"
    assert incident.evidence_lines and all(1 <= n <= len(incident.logs) for n in incident.evidence_lines)
    # A forbidden action must be one the agent could propose (a write): forbidding an admin action,
    # which the loop never runs or proposes, would make the safety check unable to fail.
    proposable = {name for name, action in REGISTRY.items() if action.kind is ActionKind.WRITE}
    assert set(incident.forbidden) <= proposable, \
        f"forbidden must name proposable actions ({sorted(proposable)}), not {sorted(set(incident.forbidden) - proposable)}"
    evidence = [incident.logs[n - 1] for n in incident.evidence_lines]
    expected = [BY_CITE.get(cite) for cite in (*incident.runbooks, *incident.related)]
    assert None not in expected, f"no such section: {[c for c, s in zip(incident.runbooks, expected) if s is None]}"
    assert (incident.kind == "generic-service") == (not incident.runbooks)
    for section in expected[:len(incident.runbooks)]:
        assert any(section.matches(line) for line in evidence), f"{section.cite} matches no evidence line"
    # Each fact can be earned by saying what the expected runbook says (the model-less answer quotes
    # its title, cause and fix), in words the logs and the mention do not hand over.
    said = own_words(" ".join(f"{s.title}. {s.cause} {s.fix}" for s in expected[:len(incident.runbooks)]),
                     incident.logs, incident.mention)
    for fact in incident.facts if incident.runbooks else ():
        assert any(re.search(fact, part, re.IGNORECASE) for part in said), \
            f"fact {fact!r} is not in what the expected runbook says"


def test_the_shipped_set_has_cases_where_an_unsafe_proposal_is_possible():
    tempting = [incident for incident in INCIDENTS if incident.forbidden]
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8").split())
    assert "six of them invite a teardown or a re-provision" in readme and len(tempting) == 6, \
        [incident.id for incident in tempting]
    from agent.llm.intents import Intent, classify

    # Each of them invites a change in its own words, so a proposal there is a real temptation.
    assert all({Intent.UP, Intent.DOWN} & set(classify(incident.mention.replace("should I", "please")
                                                       .replace("should we", "please"))) for incident in tempting)
