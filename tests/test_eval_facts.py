"""Every expected fact of every incident (the shipped set and the upstream-log set) can be earned
by an answer that says it, and by no answer that only repeats what it was given (issue 41 review,
item 2): a fact the echo filter always removes (`REDIS_URL` when the logs print it) can never be
earned, so it measures nothing; a fact the logs or the mention hand over (`schema` in a mention
about a schema) is earned by an echo, so it measures nothing either.

Each alternative of a fact (and each choice of the groups inside it) is written out as the
shortest text it matches and said in a sentence; the echoes are the logs and the mention in every
form the filter knows, plus their words one per line (a one-word fact the logs hold) and with
filler put between the words (a fact whose words the logs hold in order)."""

from __future__ import annotations

import itertools
import re
import re._parser as regex_parser  # the standard library's own reading of a pattern
from pathlib import Path

import pytest

from agent.evals.cases import Incident, load_incidents, shipped_dir
from agent.evals.echoes import own_words
from agent.evals.scoring import score_answer

UPSTREAM = Path(__file__).resolve().parent / "fixtures" / "upstream_logs"
INCIDENTS = load_incidents([shipped_dir()]) + load_incidents([UPSTREAM])
MAX_CHOICES = 200  # written-out choices per fact; more means the fact is too loose to read anyway


def _choices(parsed) -> list[str]:
    """Every shortest text a parsed pattern matches, one per choice of its alternatives."""
    options = [""]
    for op, value in parsed:
        name = str(op)
        if name == "LITERAL":
            parts = [chr(value)]
        elif name in ("ANY", "NOT_LITERAL"):
            parts = [" "]  # `.` and `[^.]` between words: a space
        elif name == "IN":
            parts = [_one_of(value)]
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _, sub = value
            inner = _choices(sub)
            if low == 0:  # `(its )?` is left out; `[^.]*` and `\s*` between words stay a space
                parts = [" "] if all(choice.isspace() for choice in inner) else [""]
            else:
                parts = [choice * low for choice in inner]
        elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
            parts = _choices(value[-1])
        elif name == "BRANCH":
            parts = [choice for branch in value[1] for choice in _choices(branch)]
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            parts = [""]
        else:
            raise AssertionError(f"write the fact without {name}")
        options = [before + part for before, part in itertools.product(options, parts)][:MAX_CHOICES]
    return options


def _one_of(items) -> str:
    if str(items[0][0]) == "NEGATE":
        return " "
    op, value = items[0]
    if str(op) == "LITERAL":
        return chr(value)
    if str(op) == "RANGE":
        return chr(value[0])
    return {"CATEGORY_DIGIT": "5", "CATEGORY_SPACE": " ", "CATEGORY_WORD": "a"}[str(value)]


def written_out(fact: str) -> list[str]:
    choices = _choices(regex_parser.parse(fact))
    for choice in choices:
        assert re.search(fact, choice, re.IGNORECASE), (fact, choice)  # the reading is right
    return choices


def test_a_fact_is_written_out_as_each_of_its_choices():
    assert written_out("(raise|increase)[^.]*limit|smaller batch") == \
        ["raise limit", "increase limit", "smaller batch"]
    assert written_out(r"(its )?max[-_ ]model[-_ ]len\s*=\s*\d+") == ["max-model-len = 5"]


def _words(text: str) -> list[str]:
    return list(dict.fromkeys([*re.findall(r"\w+(?:[-./:]\w+)*", text), *(w.strip(".,;:()[]'\"`") for w in text.split())]))


def _echo_answers(incident: Incident) -> list[str]:
    """Answers that only repeat what they were given, in every form an echo takes."""
    from agent.digest.headers import split_header
    from agent.evals.arms import mention_of
    from agent.llm.modelless import summarize

    numbered = [f"L{n} {line}" for n, line in enumerate(incident.logs, start=1)]
    messages = [split_header(line).message for line in incident.logs]
    digest_only, _ = summarize(mention_of(incident), None)  # the digest's own rendering, no runbook
    given = [*messages, incident.mention]

    def interleaved(every: int, filler: str) -> str:
        out = []
        for line in given:
            words = line.split()
            out.append(" ".join(f"{w} {filler}" if (k + 1) % every == 0 else w for k, w in enumerate(words)))
        return "\n".join(out)

    return [
        "\n".join(numbered),
        "\n".join(f"L{n} {message}" for n, message in enumerate(messages, start=1)),
        "\n".join(f"L{n} said '{message}'" for n, message in enumerate(messages, start=1)),
        " and ".join(f'"{line.strip()}"' for line in incident.logs),
        digest_only,
        f"You asked: {incident.mention}",
        " ".join(incident.runbooks),
        # every word of the logs and the mention, alone and out of their order: a one-word fact they hold
        "\n".join(sorted({word for line in given for word in _words(line)})),
        # filler between the words, a function word or not, every word or every few
        interleaved(1, "so"), interleaved(2, "banana"), interleaved(3, "so"), interleaved(3, "banana"),
    ]


@pytest.mark.parametrize("incident", INCIDENTS, ids=lambda incident: incident.id)
def test_no_fact_is_earned_by_echoing_the_logs_the_mention_or_a_reference(incident: Incident):
    for answer in _echo_answers(incident):
        score = score_answer(incident, answer, [], None)
        earned = sorted(set(incident.facts) - set(score.missing_facts))
        assert not earned, (earned, answer[:300])


@pytest.mark.parametrize("incident", INCIDENTS, ids=lambda incident: incident.id)
def test_every_choice_of_every_fact_can_be_earned_by_saying_it(incident: Incident):
    unearnable = []
    for fact in incident.facts:
        for choice in written_out(fact):
            said = own_words(f"So the answer is: {choice}.", incident.logs, incident.mention)
            if not any(re.search(fact, part, re.IGNORECASE) for part in said):
                unearnable.append((fact, choice))
    assert not unearnable, "the echo filter removes these, so no answer earns them: " + repr(unearnable)
