"""What an answer says in its own words: the answer without what it repeats of what it was given
(the logs, the mention) and without the names of runbook sections (docs/eval.md, "Scores").

An echo is caught in the forms it takes: a whole line or a run of words, with or without its
timestamp, quoted in any quotes or not quoted, the digest's rendering of it (`<*>` for a variable,
`…` for a cut), the line's words in their order with other words put between them (filler every
few words beats a rule about words in a row, not one about a line's words in order), and the name
of an error the logs raised. A setting's name is not an echo: "raise `gpu_memory_utilization`"
is the fix, even when the logs print the name.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

RUNBOOK_CITE = re.compile(r"RB:[\w.-]+#[\w-]+")
# A quoted span: backticks, double quotes, or single quotes that are not apostrophes.
_QUOTED = re.compile(r"`([^`\n]{1,2000})`|\"([^\"\n]{1,2000})\"|(?<![\w'])'([^'\n]{1,2000})'(?![\w'])")
# Words as logs and answers write them: a flag, a path, a host:port or a dotted name is one word.
_TOKEN = re.compile(r"\w+(?:[-./:]\w+)*")
# The name of an error as programs raise it: an exception class (`GatedRepoError`,
# `redis.exceptions.ReadOnlyError`) or a gRPC status (the canonical codes, grpc/doc/statuscodes.md).
# Naming it says which error happened, which the logs already said; it is not a cause or a fix.
_ERROR_CLASS = re.compile(r"^(?:\w+\.)*[A-Z]\w*[a-z]\w*(?:Error|Exception|Exceeded|Fault|Failure|Timeout|Denied|Refused)$")
_STATUS_CODES = frozenset(
    "CANCELLED UNKNOWN INVALID_ARGUMENT DEADLINE_EXCEEDED NOT_FOUND ALREADY_EXISTS PERMISSION_DENIED "
    "RESOURCE_EXHAUSTED FAILED_PRECONDITION ABORTED OUT_OF_RANGE UNIMPLEMENTED INTERNAL UNAVAILABLE DATA_LOSS "
    "UNAUTHENTICATED".lower().split())
# Words that carry no content of their own: skipped when an answer's words are compared with a
# line's in order, so "lock held by so another session" is still the line's "lock held another session".
_FUNCTION_WORDS = frozenset(
    "a about again all also am an and any are as at be been being both but by can could did do does doing "
    "down during each few for from further had has have having he her here hers him his how i if in into is "
    "it its itself just like me more most my no nor not now of off on once only or other our ours out over "
    "own same she should so some such than that the their theirs them then there these they this those "
    "through to too under until up very was we were what when where which while who whom why will with "
    "would yes yet you your um uh er ah oh eh hmm well ok okay etc".split())
# This many words in a row, as a log line or the mention has them, are an echo; fewer may be the
# name of a thing ("advisory lock 4242"), which an answer has to use to talk about it. The same
# number of a line's content words in the line's order is an echo too, with up to MAX_FILLER
# other content words between two of them in the answer and up to MAX_SKIPPED of the line's left out.
ECHO_RUN = 4
MAX_FILLER = 2
MAX_SKIPPED = 1


def _tokens(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group(0)) for m in _TOKEN.finditer(text)]


def _is_error_name(word: str) -> bool:
    return bool(_ERROR_CLASS.match(word)) or word.lower() in _STATUS_CODES


class Echoes:
    """What an answer could repeat of its sources (log lines, the mention)."""

    def __init__(self, sources: Iterable[str]) -> None:
        lines = [line for line in sources if line.strip()]
        self.words = [[word.lower() for _, _, word in _tokens(line)] for line in lines]
        self.runs = {tuple(words[i:i + ECHO_RUN]) for words in self.words for i in range(len(words) - ECHO_RUN + 1)}
        self.error_names = {name.lower() for line in lines for _, _, word in _tokens(line) if _is_error_name(word)
                            for name in (word, word.rsplit(".", 1)[-1])}
        # where each content word stands in each line: (line, its place among the line's content words)
        self.places: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for number, words in enumerate(self.words):
            for place, word in enumerate(word for word in words if word not in _FUNCTION_WORDS):
                self.places[word].append((number, place))

    def quoted_from_one_line(self, span: str) -> bool:
        """A quoted span of three words or more all from one source line (a digest template's
        fragments between its `<*>`, a line cut with `…` mid-word), or two side by side in one;
        one quoted word is a name, and two a line has apart (`max_model_len=5632`, a setting and
        the value a message estimated) are the answer's own."""
        words = [word.lower() for _, _, word in _tokens(span)]
        if len(words) == 2:
            return any(_is_word(words[0], line[i]) and _is_word(words[1], line[i + 1])
                       for line in self.words for i in range(len(line) - 1))
        return len(words) > 2 and any(all(_part_of(word, line) for word in words) for line in self.words)

    def covered(self, text: str) -> list[tuple[int, int]]:
        """Character spans of `text` that repeat a source: runs of ECHO_RUN words in a row, a
        line's content words in its order with filler between them (the filler too), and error
        names, as a source has them."""
        tokens = _tokens(text)
        words = [word.lower() for _, _, word in tokens]
        marked = [False] * len(tokens)
        for i in range(len(tokens) - ECHO_RUN + 1):
            if tuple(words[i:i + ECHO_RUN]) in self.runs:
                marked[i:i + ECHO_RUN] = [True] * ECHO_RUN
        for first, last in self._in_order(words):
            marked[first:last + 1] = [True] * (last + 1 - first)
        for i, word in enumerate(words):
            if word in self.error_names:
                marked[i] = True
        return [(start, end) for (start, end, _), hit in zip(tokens, marked) if hit]

    def _in_order(self, words: list[str]) -> list[tuple[int, int]]:
        """Token spans (first, last) of `words` whose content words are ECHO_RUN or more of one
        line's content words in the line's order, allowing filler and skipped words."""
        content = [(index, word) for index, word in enumerate(words) if word not in _FUNCTION_WORDS]
        # chains[i]: for each (line, place) the i-th content word stands at, the longest chain
        # ending there: (its length, the token index it starts at)
        chains: list[dict[tuple[int, int], tuple[int, int]]] = []
        spans = []
        for i, (index, word) in enumerate(content):
            here = {}
            for line, place in self.places.get(word, ()):
                length, start = 1, index
                for before in chains[max(0, i - 1 - MAX_FILLER):i]:
                    for earlier in range(place - 1 - MAX_SKIPPED, place):
                        chain = before.get((line, earlier))
                        if chain is not None and chain[0] + 1 > length:
                            length, start = chain[0] + 1, chain[1]
                here[(line, place)] = (length, start)
                if length >= ECHO_RUN:
                    spans.append((start, index))
            chains.append(here)
        return spans


def _is_word(word: str, other: str) -> bool:
    """The word is the line's word, or (3 characters or more) its start or end: a cut (`…`) or a
    mask (`<*>`) may split a word of the line."""
    return word == other or (len(word) >= 3 and (other.startswith(word) or other.endswith(word)))


def _part_of(word: str, line: list[str]) -> bool:
    return any(_is_word(word, other) for other in line)


def own_words(answer: str, logs: Iterable[str], mention: str = "", names: Iterable[str] = ()) -> list[str]:
    """The parts of the answer it says itself: without its runbook references (`RB:…`, and the
    section `names` written without `RB:`), and without what it repeats of the logs or the mention.
    A fact must be found within one part: a removed stretch separates the words on either side."""
    echoes = Echoes([*logs, *mention.splitlines()])
    text = RUNBOOK_CITE.sub("\n", answer)
    for name in sorted(set(names), key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", "\n", text, flags=re.IGNORECASE)

    def quoted(span: re.Match) -> str:
        inner = next(group for group in span.groups() if group is not None)
        return "\n" if echoes.quoted_from_one_line(inner) else span.group(0)

    text = _QUOTED.sub(quoted, text)
    out, at = [], 0
    for start, end in echoes.covered(text):
        out += [text[at:start], "\n"]
        at = end
    return [part for part in ("".join(out) + text[at:]).split("\n") if part.strip()]
