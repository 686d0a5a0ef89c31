"""Plain-language intent rules: what a person's own words ask for, without a model.

Two uses: the model-less path (no endpoint reachable) answers from these rules, and the model
loop asks `asked_for` before it turns a model's provision/teardown call into a confirm card,
so words inside logs, files or the thread can never lead to one (they are not the request).
"""

from __future__ import annotations

import enum
import re


class Intent(str, enum.Enum):
    UP = "up"
    DOWN = "down"
    STATUS = "status"
    ZONES = "zones"
    COST = "cost"
    LOGS = "logs"


_NEGATION = r"(?:don'?t|do not|never|no need to|not|without)\s+(?:\w+\s+){0,2}"
_QUESTION_UP = re.compile(r"\b(?:is|are)\b[^.?!]*\b(?:up|running|ready|alive)\b|\b(?:up|running)\s*\?")
_RULES: tuple[tuple[Intent, re.Pattern[str]], ...] = (
    (Intent.DOWN, re.compile(
        r"\b(?:tear(?:ing)?\s*(?:it\s+|the\s+\w+\s+)?down|teardown|shut\s*(?:it\s+|the\s+\w+\s+)?down|"
        r"turn\s+(?:it\s+|the\s+\w+\s+)?off|release\s+(?:it|the\s+\w+)|delete\s+(?:it|the\s+\w+)|"
        r"destroy|(?:take|bring)\s+(?:it\s+|the\s+\w+\s+)?down)\b")),
    (Intent.UP, re.compile(
        r"\b(?:bring\s+(?:it\s+|the\s+[\w-]+\s+|\w+\s+)?up|spin\s+(?:it\s+|one\s+|a\s+\w+\s+|the\s+\w+\s+)?up|"
        r"provision|start\s+(?:a|the|one)\s+\w+|turn\s+(?:it\s+|the\s+\w+\s+)?on|launch|boot\s+(?:a|the)\s+\w+|"
        r"(?:need|want|get)\s+(?:a|the)\s+(?:tpu|model|gemma))\b")),
    (Intent.STATUS, re.compile(r"\b(?:status|state|health|deadline|expir\w*|lease|how long)\b")),
    (Intent.ZONES, re.compile(r"\b(?:zones?|regions?|capacity|where can)\b")),
    (Intent.COST, re.compile(r"(?:\bcosts?\b|\bprice\b|\bpricing\b|\bspend\b|\bbill\w*|how much|\$)")),
    (Intent.LOGS, re.compile(r"\b(?:logs?|summari[sz]e|errors?|incident|what (?:happened|broke|failed|went wrong)|"
                             r"stack\s*trace|crash\w*|traceback)\b")),
)
# Verbs that make a command the subject of a sentence ("/tpu up fails instantly"), not a request.
_DESCRIBED_BY = (r"works?|worked|fails?|failed|failing|errors?|errored|erroring|calls?|keeps?|says|said|returns?|"
                 r"returned|hangs?|hung|times?|timed|is|was|does|did|doesn'?t|didn'?t|won'?t|gives?|gave|goes|went|"
                 r"command|requests?|only|still|never|just")
_COMMAND_ASKED = re.compile(r"((?:^|[.!?;]\s+)(?:(?:please|pls|can you|could you|would you|go ahead and|run|do|just|ok|okay)[,\s]+)*)"
                            r"/tpu (up|down)\b(?!\s+(?:" + _DESCRIBED_BY + r")\b)")
_COMMAND_NAMED = re.compile(r"/tpu (?:up|down)\b")
# A question asking for advice ("should I tear it down?", "do we need to bring it up again?") asks
# what to do, not for it to be done: it never counts as a request to provision or tear down.
# "Could we …?" and "shall we …?" are polite requests ("could we bring up a TPU for 2h?"), not advice.
_ADVICE = re.compile(r"\bshould\s+(?:i|we)\b[^.!?]*\??|\b(?:do|would|will)\s+(?:i|we)\s+need\s+to\b"
                     r"[^.!?]*\??|\bwould it help to\b[^.!?]*\??|\bis it worth\b[^.!?]*\??")
_CHANGES = (Intent.UP, Intent.DOWN)
ACTION_INTENTS = {"provision": Intent.UP, "teardown": Intent.DOWN}
_ZONE = re.compile(r"\b([a-z]+-[a-z]+\d+-[a-z])\b")
_HOURS = re.compile(r"\b(\d+(?:\.\d+)?)\s*(?:h|hrs?|hours?)\b")
_MINUTES = re.compile(r"\b(\d+)\s*(?:m|mins?|minutes?)\b")


def classify(request: str) -> list[Intent]:
    """Every intent the request expresses, in rule order; negated verbs do not count."""
    text = " ".join((request or "").lower().split())
    # "/tpu up" where a sentence starts is the command asked for; anywhere else ("why did /tpu up
    # fail?", "did my /tpu down go through?") it is talked about, and asks for nothing.
    text = _COMMAND_ASKED.sub(lambda m: m.group(1) + {"up": "provision", "down": "teardown"}[m.group(2)], text)
    text = _COMMAND_NAMED.sub("the command", text)
    asked = _ADVICE.sub(" ", text)
    found: list[Intent] = []
    for intent, pattern in _RULES:
        scope = asked if intent in _CHANGES else text
        for match in pattern.finditer(scope):
            if re.search(_NEGATION + r"$", scope[: match.start()]):
                continue
            found.append(intent)
            break
    if _QUESTION_UP.search(text) and Intent.UP in found and not re.search(r"\b(?:bring|spin|start|provision)\b", text):
        found.remove(Intent.UP)
    if _QUESTION_UP.search(text) and Intent.STATUS not in found:
        found.append(Intent.STATUS)
    return found


def asked_for(request: str, action_name: str) -> bool:
    """Did the person's own words ask for this WRITE action? (The gate for every proposal card.)
    Judged on the request with the material its line carries taken out (a log record, a quoted
    line or phrase, a transcript: agent/llm/material.request_words), so an instruction pasted in the
    same line as the words never asks for a card."""
    from agent.llm.material import request_words

    intent = ACTION_INTENTS.get(action_name)
    return intent is not None and intent in classify(request_words(request))


def provision_details(request: str) -> dict:
    """The zone and hours a provision request names (`start a TPU in us-west4-a for 2h`)."""
    text = " ".join((request or "").lower().split())
    details: dict = {}
    zone = _ZONE.search(text)
    if zone:
        details["zone"] = zone.group(1)
    hours = _HOURS.search(text)
    minutes = _MINUTES.search(text)
    if hours:
        details["hours"] = float(hours.group(1))
    elif minutes:
        details["hours"] = round(int(minutes.group(1)) / 60, 2)
    return details
