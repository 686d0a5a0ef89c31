"""Build a log digest: lines in, a ranked, budgeted, citable summary out.

Pipeline per line: strip the header (headers.py) -> mask variables (masking.py) -> signature
(miner.py), done once per line *shape* (shapes.py: a repeat with other digits is one lookup).
Per signature we keep count, first/last line, the highest severity and the first and last
original lines (times are read from them at the end); nothing else of the input is retained, so
a million-line log costs memory per distinct message, not per line. At the end signatures are merged into
templates, ranked (ranking.py) and cut to a token budget (tokens.py), and rendered with the
original line numbers (`L123`) so an answer can cite them. Exemplar text is redacted and
truncated before it is counted or shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.digest.headers import split_header
from agent.digest.masking import mask
from agent.digest.miner import TemplateMiner
from agent.digest.ranking import burst_factor, rank, salience
from agent.digest.severity import DEFAULT, ERROR, infer_severity, severity_name
from infra.plurals import counted
from agent.digest.shapes import LineShapes
from agent.digest.tokens import EstimatedTokens, TokenCounter, estimate_tokens
from agent.redact import redact

# Gemma 4's context, minus the agent's instructions and room for the answer
# (reference/logs-metrics.md, "Budget arithmetic for 16,384 tokens").
CONTEXT_TOKENS = 16_384
INSTRUCTION_RESERVE = 1_536
ANSWER_RESERVE = 1_024
DEFAULT_BUDGET = CONTEXT_TOKENS - INSTRUCTION_RESERVE - ANSWER_RESERVE

MAX_EXEMPLARS = 3
# A shown line or template is cut here: single log lines reach 2,000+ tokens (HDFS block lists).
MAX_SHOWN_CHARS = 300
# Only this much of a message is masked and mined; the rest of a monster line cannot change its event.
MAX_MESSAGE_CHARS = 2_000
# Share of the budget spent on template lines before any exemplar is added: more for ERROR and
# above, so every error template is listed before quiet templates get example lines.
TEMPLATE_FIRST_SHARE = 0.4
ERROR_TEMPLATE_FIRST_SHARE = 0.75


class Exemplar:
    """One original line of a template: its number and its text, redacted and truncated.

    Redaction runs on first use of `text`: most templates of a big log are never shown, and
    redacting every kept line was a third of the digest's fixed cost. Nothing unredacted is
    ever handed out."""

    __slots__ = ("line", "_raw", "_text")

    def __init__(self, line: int, raw: str) -> None:
        self.line = line  # 1-based line number in the original input
        self._raw = raw
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text, self._raw = shorten(redact(self._raw)), ""
        return self._text

    def __repr__(self) -> str:
        return f"Exemplar(line={self.line})"

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text}


@dataclass
class TemplateSummary:
    id: int
    template: str
    count: int
    severity: int
    first_line: int
    last_line: int
    first_text: str = field(repr=False)  # the first and last original lines, for their times
    last_text: str = field(repr=False)
    exemplars: list[Exemplar] = field(default_factory=list)
    burst: float = 1.0
    first_error: bool = False

    # Times are read from the header on demand: only shown templates need them.
    @property
    def first_time(self) -> str | None:
        return _time_of(self.first_text)

    @property
    def last_time(self) -> str | None:
        return _time_of(self.last_text)

    @property
    def severity_name(self) -> str:
        return severity_name(self.severity)

    def summary_line(self) -> str:
        span = f"L{self.first_line}" if self.count == 1 else f"L{self.first_line}-L{self.last_line}"
        flags = "".join(
            (" first-error" if self.first_error else "", f" burst x{self.burst:.0f}" if self.burst >= 10 else "")
        )
        return f"T{self.id} {self.severity_name} x{self.count} {span}{flags}: {self.template}"

    def to_json(self, exemplars: int | None = None) -> dict[str, Any]:
        shown = self.exemplars if exemplars is None else self.exemplars[:exemplars]
        return {
            "id": self.id,
            "template": self.template,
            "count": self.count,
            "severity": self.severity_name,
            "first_line": self.first_line,
            "last_line": self.last_line,
            "first_time": self.first_time,
            "last_time": self.last_time,
            "burst": round(self.burst, 1),
            "first_error": self.first_error,
            "exemplars": [exemplar.to_json() for exemplar in shown],
        }


@dataclass
class Digest:
    templates: list[TemplateSummary]  # shown, in reading order
    shown_exemplars: dict[int, int]  # template id -> exemplars rendered
    ranked: list[TemplateSummary]  # every template, in reading order
    total_lines: int
    first_time: str | None
    last_time: str | None
    budget: int
    tokens: int
    tokens_exact: bool
    text: str = field(repr=False)
    # The first and last line of every distinct message shape (numbered, unredacted): what runbook
    # symptoms are matched against, never shown. A template's middle lines can differ in words
    # its `<*>` hides (`state: FAILED` among `state: ACTIVE`); each shape's own lines do not.
    representatives: list[tuple[int, str]] = field(default_factory=list, repr=False)

    @property
    def omitted(self) -> list[TemplateSummary]:
        shown = {template.id for template in self.templates}
        return [template for template in self.ranked if template.id not in shown]

    def render(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        omitted = self.omitted
        return {
            "total_lines": self.total_lines,
            "template_count": len(self.ranked),
            "first_time": self.first_time,
            "last_time": self.last_time,
            "budget": self.budget,
            "tokens": self.tokens,
            "tokens_exact": self.tokens_exact,
            "omitted_templates": len(omitted),
            "omitted_lines": sum(template.count for template in omitted),
            "templates": [template.to_json(self.shown_exemplars.get(template.id, 0)) for template in self.templates],
        }


def shorten(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    text = text.rstrip("\r\n")
    if len(text) <= limit:
        return text
    return f"{text[:limit]} …[+{len(text) - limit} chars]"


BLANK = -1  # what `DigestBuilder.add` returns for a blank line: no signature, no template


class DigestBuilder:
    """Feed lines with `add`, then `build` at any budget: the templates are summarised once."""

    def __init__(self) -> None:
        self.total_lines = 0
        self.first_time: str | None = None
        self.last_time: str | None = None
        self._miner = TemplateMiner()
        self._shapes = LineShapes()
        # per signature id
        self._first_line: list[int] = []
        self._last_line: list[int] = []
        self._first_text: list[str] = []
        self._last_text: list[str] = []
        self._severity: list[int] = []
        self._inferred: list[int] = []  # severity from the first line's words
        self._first_error: tuple[int, str, int] | None = None  # (line, text, signature id)
        self._representatives: list[tuple[int, str]] = []  # each signature's first and last line, once summarised
        # the first and last line whose header carried a time; times are read only at the end
        self._first_timed: str | None = None
        self._last_timed: str | None = None
        self._ranked: list[TemplateSummary] | None = None

    def add(self, line: str) -> int:
        """Take the next line; return its signature id (stable; see `template_ids`), or BLANK for a
        line of nothing but whitespace: it keeps the numbering of the lines after it and belongs to
        no template (a run of blank lines is not an event, and `contains` blanks the lines it drops)."""
        self.total_lines = number = self.total_lines + 1
        if not line.strip():
            return BLANK
        shape = self._shapes.shape(line)
        known = self._shapes.get(shape)
        if known is None:
            return self._add_new_shape(number, line, shape)
        signature, severity, timed = known
        self._miner.counts[signature] += 1
        self._last_line[signature] = number
        self._last_text[signature] = line
        if timed:
            self._last_timed = line
        if severity > self._severity[signature]:
            self._severity[signature] = severity
        if severity >= ERROR and self._first_error is None:
            self._first_error = (number, line, signature)
        return signature

    def _add_new_shape(self, number: int, line: str, shape: bytes | None) -> int:
        parsed = split_header(line)
        message = parsed.message
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS]
        signature = self._miner.add(mask(message))
        # Per shape, so computed once: a header without a time (`OSError: …` in a traceback) must
        # not become the span's last time, which would then read as None.
        timed = parsed.timestamp is not None
        if timed:
            if self._first_timed is None:
                self._first_timed = line
            self._last_timed = line
        if signature == len(self._first_line):
            # The header too: a tag such as `OSError:` is all that says a traceback's last line is an error.
            inferred = infer_severity(f"{parsed.header}{message}")
            severity = inferred if parsed.severity is None else parsed.severity
            self._inferred.append(inferred)
            self._first_line.append(number)
            self._last_line.append(number)
            self._first_text.append(line)
            self._last_text.append(line)
            self._severity.append(severity)
        else:
            severity = self._inferred[signature] if parsed.severity is None else parsed.severity
            self._last_line[signature] = number
            self._last_text[signature] = line
            if severity > self._severity[signature]:
                self._severity[signature] = severity
        if severity >= ERROR and self._first_error is None:
            self._first_error = (number, line, signature)
        self._shapes.put(shape, (signature, severity, timed))
        return signature

    def template_ids(self) -> list[int]:
        """signature id -> template id, for callers that kept `add`'s return values (BLANK is in none)."""
        self._shapes.clear()
        return self._miner.templates().cluster_of

    def summaries(self) -> list[TemplateSummary]:
        """Every template, ranked (the same list on every call)."""
        if self._ranked is None:
            self._ranked = self._summarise()
        return self._ranked

    def _summarise(self) -> list[TemplateSummary]:
        self._shapes.clear()  # the peak of memory is here: make room
        self.first_time = _time_of(self._first_timed)
        self.last_time = _time_of(self._last_timed)
        mined = self._miner.templates()
        members: list[list[int]] = [[] for _ in mined.templates]
        for signature, cluster in enumerate(mined.cluster_of):
            members[cluster].append(signature)
        first_error = self._first_error
        first_error_signature = first_error[2] if first_error else None
        summaries = []
        first_error_summary = None
        for cluster, signatures in enumerate(members):
            first = min(signatures, key=self._first_line.__getitem__)
            last = max(signatures, key=self._last_line.__getitem__)
            count = sum(self._miner.counts[s] for s in signatures)
            exemplar_lines = {self._first_line[first]: self._first_text[first]}
            is_first_error = first_error_signature in signatures
            if first_error is not None and is_first_error:
                line, text, _ = first_error
                exemplar_lines[line] = text
            if len(signatures) > 1:
                # a second wording of the same event shows what varies
                other = max((s for s in signatures if s != first), key=self._miner.counts.__getitem__)
                exemplar_lines.setdefault(self._first_line[other], self._first_text[other])
            exemplar_lines.setdefault(self._last_line[last], self._last_text[last])
            ordered = sorted(exemplar_lines.items())
            if first_error is not None and is_first_error:  # the first error must survive a cut to one exemplar
                ordered.sort(key=lambda item: item[0] != first_error[0])
            exemplars = [Exemplar(number, text) for number, text in ordered[:MAX_EXEMPLARS]]
            summary = TemplateSummary(
                id=0,
                template=shorten(redact(mined.templates[cluster])),
                count=count,
                severity=max(self._severity[s] for s in signatures) if signatures else DEFAULT,
                first_line=self._first_line[first],
                last_line=self._last_line[last],
                first_text=self._first_text[first],
                last_text=self._last_text[last],
                exemplars=exemplars,
                first_error=is_first_error,
            )
            summary.burst = burst_factor(summary, self.total_lines)
            if is_first_error:
                first_error_summary = summary
            summaries.append(summary)
        # The first error that says something: a traceback's header or a "see above" wrapper is
        # where a crash starts printing, not its cause.
        telling = [s for s in summaries if s.severity >= ERROR and salience(s.template) >= 0]
        if telling and (first_error_summary is None or salience(first_error_summary.template) < 0):
            if first_error_summary is not None:
                first_error_summary.first_error = False
            first_error_summary = min(telling, key=lambda s: s.first_line)
            first_error_summary.first_error = True
        ranked = rank(summaries, self.total_lines, first_error_summary)
        for number, summary in enumerate(ranked, start=1):
            summary.id = number
        self._representatives = sorted({**dict(zip(self._first_line, self._first_text)),
                                        **dict(zip(self._last_line, self._last_text))}.items())
        return ranked

    def build(self, budget_tokens: int = DEFAULT_BUDGET, tokenizer: TokenCounter | None = None) -> Digest:
        ranked = self.summaries()
        counter: TokenCounter = tokenizer or EstimatedTokens()
        # Allocate with the (additive, offline) estimate, then check with the real counter; an
        # exact counter that disagrees rescales the allocation budget and we try again.
        allocation_budget = budget_tokens
        digest = None
        for _ in range(4):
            digest = self._allocate(ranked, allocation_budget, budget_tokens)
            tokens = counter.count(digest.text)
            exact = bool(getattr(counter, "exact", False))
            digest.tokens, digest.tokens_exact = tokens, exact
            if tokens <= budget_tokens:
                if not exact or tokens == 0 or allocation_budget != budget_tokens:
                    return digest
                # The estimate over-counts: spend what the exact count says is left, once.
                estimate = estimate_tokens(digest.text)
                if estimate <= tokens:
                    return digest
                scaled = self._allocate(ranked, int(budget_tokens * estimate / tokens), budget_tokens)
                scaled_tokens = counter.count(scaled.text)
                if scaled_tokens <= budget_tokens:
                    scaled.tokens, scaled.tokens_exact = scaled_tokens, bool(getattr(counter, "exact", False))
                    return scaled
                return digest
            allocation_budget = max(1, int(allocation_budget * budget_tokens / tokens) - 8)
        assert digest is not None
        return digest

    def _allocate(self, ranked: list[TemplateSummary], allocation_budget: int, budget_tokens: int) -> Digest:
        # Fixed parts first, shrinking them for tiny budgets: the full header and the citation
        # note, then without the note, then without the time span, then nothing at all.
        note = "Cite lines as L<number> (original line numbers); <*> marks a variable part."
        footer_worst = f"({len(ranked)} more templates with {self.total_lines} lines not shown)"
        footer_cost = estimate_tokens(footer_worst) + 1
        used = 0
        fixed: list[str] = []
        for with_time, with_note in ((True, True), (True, False), (False, False)):
            header = self._header_line(len(ranked), len(ranked), with_time)
            parts = [header, note] if with_note else [header]
            cost = sum(estimate_tokens(part) + 1 for part in parts) + footer_cost
            if cost <= allocation_budget:
                fixed, used = parts, cost
                break
        shown: list[TemplateSummary] = []
        exemplars_shown: dict[int, int] = {}

        def try_add(cost: int) -> bool:
            nonlocal used
            if used + cost > allocation_budget:
                return False
            used += cost
            return True

        def add_templates(limit: float, error_limit: float) -> None:
            for summary in ranked[len(shown) :]:
                over = used >= (error_limit if summary.severity >= ERROR else limit)
                if (shown and over) or not try_add(estimate_tokens(summary.summary_line()) + 1):
                    return
                shown.append(summary)
                exemplars_shown[summary.id] = 0

        def add_exemplars(upto: int) -> None:
            for summary in shown:
                while exemplars_shown[summary.id] < min(upto, len(summary.exemplars)):
                    exemplar = summary.exemplars[exemplars_shown[summary.id]]
                    if not try_add(estimate_tokens(_exemplar_line(exemplar)) + 1):
                        break
                    exemplars_shown[summary.id] += 1

        if fixed:
            # Template lines for the top of the ranking, then one exemplar each, then more
            # templates, then the remaining exemplars.
            free = allocation_budget - used
            add_templates(used + free * TEMPLATE_FIRST_SHARE, used + free * ERROR_TEMPLATE_FIRST_SHARE)
            add_exemplars(1)
            add_templates(allocation_budget, allocation_budget)
            add_exemplars(MAX_EXEMPLARS)

        lines = list(fixed)
        if lines:
            lines[0] = fixed[0].replace(f"({len(ranked)} shown)", f"({len(shown)} shown)")
        for summary in shown:
            lines.append(summary.summary_line())
            lines.extend(_exemplar_line(e) for e in summary.exemplars[: exemplars_shown[summary.id]])
        omitted = ranked[len(shown) :]
        if omitted and fixed:
            lines.append(f"({counted(len(omitted), 'more template')} with {counted(sum(t.count for t in omitted), 'line')} "
                         "not shown)")
        text = "\n".join(lines)
        return Digest(
            templates=shown,
            shown_exemplars=exemplars_shown,
            ranked=ranked,
            total_lines=self.total_lines,
            first_time=self.first_time,
            last_time=self.last_time,
            budget=budget_tokens,
            tokens=estimate_tokens(text),
            tokens_exact=False,
            text=text,
            representatives=self._representatives,
        )

    def _header_line(self, templates: int, shown: int, with_time: bool = True) -> str:
        span = ""
        if self.first_time and with_time:
            span = f", {self.first_time}" + (f" .. {self.last_time}" if self.last_time != self.first_time else "")
        return f"Log digest: {counted(self.total_lines, 'line')}, {counted(templates, 'template')} ({shown} shown){span}"


def _time_of(line: str | None) -> str | None:
    """The header time of a kept line, parsed again: only the few lines shown need it."""
    return None if line is None else split_header(line).timestamp


def _exemplar_line(exemplar: Exemplar) -> str:
    return f"  L{exemplar.line} | {exemplar.text}"


def mine(lines: Iterable[str]) -> DigestBuilder:
    """`lines` (any iterable of str; line numbers count from 1) mined once, to be built at any budget."""
    builder = DigestBuilder()
    add = builder.add
    for line in lines:
        add(line)
    return builder


def build_digest(
    lines: Iterable[str], budget_tokens: int = DEFAULT_BUDGET, tokenizer: TokenCounter | None = None
) -> Digest:
    """Digest of `lines` within `budget_tokens`."""
    return mine(lines).build(budget_tokens, tokenizer)
