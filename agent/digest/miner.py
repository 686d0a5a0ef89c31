"""Template mining over masked messages, in two phases.

1. Online, per line: the masked message is looked up in a dict. A repeat costs one lookup,
   which is where a million-line incident spends its time; a new one gets a *signature* id.
2. At the end, signatures are merged into templates, Drain-style: within a bucket of equal
   token count and equal first token, a signature joins the most similar template when enough
   of its constant tokens agree (`<*>` positions do not count as agreement); differing positions
   become `<*>`. Signatures are visited most-frequent first so big templates form first.

3. Merging at the end (rather than online, as Drain does) lets counts undo a merge: a position
   that holds a few plain words, each of them frequent (`VM Started` / `VM Resumed`, `"GET` /
   `"POST`), separates different events, while a word that varies over many signatures, some
   of them rare (`Invalid user webmaster` / `… test` / `… oracle`), is a variable. Two words
   only are always two events: a variable would show more values than that.
4. Finally templates that agree once bracketed placeholders are dropped are one event whose
   lines carry an optional part (`… bytes (<*>) sent` / `… bytes sent`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from agent.digest.masking import WILDCARD

# Share of a signature's constant tokens that must match a template to join it.
DEFAULT_SIMILARITY = 0.6
# A word is "frequent" when its lines are at least this share of all lines (and at least
# MIN_FREQUENT_LINES). A position holding 2..MAX_CONSTANT_VARIANTS words, all frequent, is a
# constant that tells events apart, not a variable.
FREQUENT_SHARE = 0.002
MIN_FREQUENT_LINES = 3
MAX_CONSTANT_VARIANTS = 6
# Messages longer than this are compared on their first tokens only (monster lines).
MAX_TOKENS = 200
BUCKET_BY_FIRST = True

# A constant-looking token: a word, possibly quoted or bracketed (`"GET`, `SOCKS5`, `Started`),
# or a key=word pair (`user=root` and `user=guest` are different events to an operator).
_WORD_RE = re.compile(r"""(?:[\w.\-]+=)?["'(\[]*[A-Za-z][\w\-]*[.,:;)\]"'+]*""")
# A token that is nothing but a placeholder in brackets (`(<*>)`, `[<*>]`) is an optional part
# when some lines of an event carry it and others do not (`… 3184 bytes (3.10 KB) received` vs
# `… 942 bytes received`). A bare `<*>` is not: it may stand for words merged away (`user=root`).
_PURE_VARIABLE_RE = re.compile(r"[(\[{]+<\*>[)\]}]+[,;:]?")
# Templates are merged over optional parts only if this many constant tokens remain to agree on.
MIN_CONSTANTS_FOR_OPTIONAL_MERGE = 3
# A token that is only placeholders and separators (`<*>,<*>` from `10.0.0.1,10.0.0.2`) is one
# variable, however many items the list had.
_WILDCARD_LIST_RE = re.compile(r"<\*>(?:[,;:/|]<\*>)+")


@dataclass(frozen=True)
class Templates:
    """The result of mining: one template string per cluster and each signature's cluster."""

    templates: list[str]
    cluster_of: list[int]  # signature id -> cluster id


class TemplateMiner:
    def __init__(self, similarity: float = DEFAULT_SIMILARITY) -> None:
        self.similarity = similarity
        self.signatures: list[str] = []
        self.counts: list[int] = []
        self._ids: dict[str, int] = {}

    def add(self, masked: str) -> int:
        """Signature id for one masked message (counted)."""
        signature_id = self._ids.get(masked)
        if signature_id is None:
            signature_id = len(self.signatures)
            self._ids[masked] = signature_id
            self.signatures.append(masked)
            self.counts.append(1)
        else:
            self.counts[signature_id] += 1
        return signature_id

    def templates(self) -> Templates:
        """Merge the signatures seen so far into templates."""
        total = sum(self.counts)
        frequent = max(MIN_FREQUENT_LINES, total * FREQUENT_SHARE)
        token_lists = [
            [WILDCARD if _WILDCARD_LIST_RE.fullmatch(token) else token for token in signature.split()[:MAX_TOKENS]]
            for signature in self.signatures
        ]
        buckets: dict[tuple[int, str], list[int]] = defaultdict(list)
        for signature_id, tokens in enumerate(token_lists):
            buckets[(len(tokens), tokens[0] if tokens and BUCKET_BY_FIRST else "")].append(signature_id)

        groups: list[list[int]] = []  # signature ids per template
        for members in buckets.values():
            members.sort(key=lambda sid: -self.counts[sid])
            local: list[tuple[list[str], list[int]]] = []  # (template tokens, signature ids)
            for signature_id in members:
                tokens = token_lists[signature_id]
                best = None
                best_score = -1.0
                for entry in local:
                    score = _similarity(entry[0], tokens)
                    if score > best_score:
                        best, best_score = entry, score
                if best is not None and best_score >= self.similarity:
                    best[0][:] = [a if a == b else WILDCARD for a, b in zip(best[0], tokens)]
                    best[1].append(signature_id)
                else:
                    local.append((list(tokens), [signature_id]))
            for _, signature_ids in local:
                groups.extend(self._split_constant_words(signature_ids, token_lists, frequent))

        merged_tokens = []
        for signature_ids in groups:
            merged = token_lists[signature_ids[0]]
            for signature_id in signature_ids[1:]:
                merged = [a if a == b else WILDCARD for a, b in zip(merged, token_lists[signature_id])]
            merged_tokens.append(merged)

        cluster_of = [0] * len(self.signatures)
        templates: list[str] = []
        for members in self._merge_optional_parts(groups, merged_tokens):
            cluster_id = len(templates)
            # the template of the event's biggest wording
            largest = max(members, key=lambda group: sum(self.counts[s] for s in groups[group]))
            templates.append(" ".join(merged_tokens[largest]))
            for group in members:
                for signature_id in groups[group]:
                    cluster_of[signature_id] = cluster_id
        return Templates(templates, cluster_of)

    @staticmethod
    def _merge_optional_parts(groups: list[list[int]], merged_tokens: list[list[str]]) -> list[list[int]]:
        """Group indexes whose templates agree once bracketed placeholders are dropped.

        Merging above needs equal token counts; an optional variable part changes the count
        (`<*> bytes (<*>) sent` / `<*> bytes sent`), so one event would become several."""
        by_core: dict[tuple[str, ...], list[int]] = {}
        result: list[list[int]] = []
        for group, tokens in enumerate(merged_tokens):
            core = tuple(token for token in tokens if not _PURE_VARIABLE_RE.fullmatch(token))
            if len(core) < MIN_CONSTANTS_FOR_OPTIONAL_MERGE:
                result.append([group])
                continue
            members = by_core.get(core)
            if members is None:
                by_core[core] = members = []
                result.append(members)
            members.append(group)
        return result

    def _split_constant_words(
        self, signature_ids: list[int], token_lists: list[list[str]], frequent: float
    ) -> list[list[int]]:
        """Undo merges over positions that hold a few plain words, each of them frequent.

        `VM Started` / `VM Resumed` / `VM Paused` are distinct events; `user root` / `user news`
        / `user oracle` / `user test` (with some rare names) is one event with a variable."""
        if len(signature_ids) < 2:
            return [signature_ids]
        width = len(token_lists[signature_ids[0]])
        constant_positions = []
        for position in range(width):
            lines_per_word: dict[str, int] = defaultdict(int)
            for signature_id in signature_ids:
                word = token_lists[signature_id][position]
                if word == WILDCARD or not _WORD_RE.fullmatch(word):
                    break
                lines_per_word[word] += self.counts[signature_id]
            else:
                variants = len(lines_per_word)
                if 1 < variants <= MAX_CONSTANT_VARIANTS and (
                    # two words: a constant with a rare alternative (`HTTPS` x952 / `SOCKS5` x2)
                    # is two events; a variable this narrow would show more values
                    variants == 2 or min(lines_per_word.values()) >= frequent
                ):
                    constant_positions.append(position)
        if not constant_positions:
            return [signature_ids]
        split: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for signature_id in signature_ids:
            tokens = token_lists[signature_id]
            split[tuple(tokens[position] for position in constant_positions)].append(signature_id)
        return list(split.values())


def _similarity(template: list[str], tokens: list[str]) -> float:
    constants = 0
    same = 0
    for a, b in zip(template, tokens):
        if b == WILDCARD:
            continue
        constants += 1
        if a == b:
            same += 1
    if constants == 0:
        return 1.0
    return same / constants
