"""Our own parser for Gemma 4's native tool-call syntax and thinking markup.

Used when raw model text reaches us instead of parsed fields: a deployment without
`--tool-call-parser gemma4`, an old vLLM, or a leak (reference `gemma4-wire.md` §4 items 3, 7, 8).

Grammar (reference §1.3, §2.2):
    <|tool_call>call:NAME{key:value,...}<tool_call|>
    value  := <|"|>literal text<|"|> | bare | {key:value,...} | [value,...]
Strings between `<|"|>` delimiters are literal: no escaping, and braces, commas, quotes and
newlines may appear inside. Bare values run up to `,` `}` `]`.

Where we deliberately differ from vLLM 0.33.0 (every case is pinned by tests):
- Text between and after calls is kept (vLLM drops it, §2.2 / §4 item 14).
- Bare values are typed like JSON literals (`42` -> 42, `true` -> True, `null` -> None); anything
  else stays a string. vLLM returns every bare value as a string and types it only through the
  tool schema (§2.2, #47906); we have no schema here and the syntax itself says "not a string".
- `key=value` is read as `key:value` (vLLM silently returns `{}`, §2.5 row 19).
- Plain-quoted values `"x"` / `'x'` are unquoted (vLLM keeps the quotes, #51284, §2.5 row 15).
- Calls are delimited by `<tool_call|>`, the next `<|tool_call>`, or a stop token, so a call
  missing its closer does not swallow the next one (#53431).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STRING_DELIM = '<|"|>'
TOOL_CALL_OPEN = "<|tool_call>"
TOOL_CALL_CLOSE = "<tool_call|>"
CHANNEL_OPEN = "<|channel>"
CHANNEL_CLOSE = "<channel|>"
THOUGHT_LABEL = "thought"

# Stop tokens (generation_config eos_token_id [1, 106, 50], §1.1). vLLM never returns them, so if
# one shows up in text, whatever follows was generated past a stop the server did not honour:
# usually a hallucinated `<|tool_response>response:…` or the next user turn. We cut there.
STOP_TOKENS = ("<eos>", "<turn|>", "<|tool_response>")
# Markup with no meaning in visible text; removed wherever it appears outside a call.
STRAY_TOKENS = ("<tool_call|>", "<tool_response|>", "<|turn>", "<bos>", "<pad>", "<|think|>", "<|tool>", "<tool|>")

# Repair notes (stable strings: they end up in logs and metric labels).
NOTE_TRUNCATED = "truncated_tool_call"
NOTE_BARE_OPENER = "bare_tool_call_opener"
NOTE_ROUND_BRACKETS = "round_bracket_args"
NOTE_KEY_EQUALS = "key_equals_value"
NOTE_PLAIN_QUOTES = "plain_quoted_value"
NOTE_NO_ARGS_BRACES = "tool_call_without_braces"
NOTE_UNPARSED_ARGS = "unparsed_argument_text"
NOTE_REASONING_BLOCK = "reasoning_block_in_text"
NOTE_THOUGHT_LABEL = "bare_thought_label"
NOTE_ORPHAN_CHANNEL_CLOSE = "orphan_channel_close"
NOTE_STOP_TOKEN = "stop_token_in_text"
NOTE_STRAY_TOKEN = "stray_special_token"

_NAME_END = re.compile(r"[{(]")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_BARE_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}


@dataclass
class RawToolCall:
    """One call recovered from raw text. `arguments` is a plain dict (JSON-serializable)."""

    name: str
    arguments: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def arguments_json(self) -> str:
        # Same serialization vLLM uses for `function.arguments` (§2.2).
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class ParsedText:
    """Raw model text split into what the user may see, the model's reasoning, and calls."""

    calls: list[RawToolCall]
    text: str
    reasoning: str | None
    notes: list[str]


def extract_tool_calls(text: str) -> tuple[list[RawToolCall], str]:
    """Return the tool calls in `text` and the remaining visible text (reasoning removed)."""
    parsed = parse_text(text)
    return parsed.calls, parsed.text


def split_reasoning(text: str) -> tuple[str | None, str | None]:
    """(reasoning, content) for text that should hold no calls; mirrors vLLM's §2.8 table."""
    parsed = parse_text(text)
    return parsed.reasoning, (parsed.text or None)


def parse_text(text: str) -> ParsedText:
    """Scan raw model text once, like vLLM's state machine (§2.1), but lossless for visible text."""
    return _TextScanner(text).run()


# --------------------------------------------------------------------------------------------
# Text level: content, reasoning, calls, stop tokens.


class _TextScanner:
    def __init__(self, text: str) -> None:
        self.text = text or ""
        self.pos = 0
        self.calls: list[RawToolCall] = []
        self.reasoning: list[str] = []
        self.notes: list[str] = []
        # A tool call splits the visible text into separate utterances ("A <call> B").
        self.segments: list[list[str]] = [[]]

    def run(self) -> ParsedText:
        self._open_leading_reasoning()
        while self.pos < len(self.text):
            if not self._step_content():
                break
        visible = "\n".join(s for s in ("".join(seg).strip() for seg in self.segments) if s)
        reasoning = "\n".join(r for r in self.reasoning if r) or None
        return ParsedText(self.calls, visible, reasoning, _dedupe(self.notes))

    def _note(self, note: str) -> None:
        self.notes.append(note)

    def _open_leading_reasoning(self) -> None:
        """vLLM prepends a synthetic `<|channel>` when the output starts with the bare `thought`
        label, or when it contains `<channel|>` with no opener before it (`_preprocess_feed`, §2.2;
        leaks #57231, #45834). Text before that closer is reasoning, not content."""
        stripped = self.text.lstrip()
        if stripped.startswith(THOUGHT_LABEL + "\n") or stripped == THOUGHT_LABEL:
            self._note(NOTE_THOUGHT_LABEL)
            self.pos = len(self.text) - len(stripped)
            self._consume_reasoning()
            return
        close = self.text.find(CHANNEL_CLOSE)
        if close < 0:
            return
        earlier = [self.text.find(m) for m in (CHANNEL_OPEN, TOOL_CALL_OPEN, *STOP_TOKENS)]
        if all(e < 0 or e > close for e in earlier):
            self._note(NOTE_ORPHAN_CHANNEL_CLOSE)
            self._consume_reasoning()

    def _step_content(self) -> bool:
        """Consume content up to the next markup; return False once a stop token ends the text."""
        marker, at = _next_marker(self.text, self.pos, (TOOL_CALL_OPEN, CHANNEL_OPEN, CHANNEL_CLOSE, *STOP_TOKENS, *STRAY_TOKENS))
        if marker is None:
            self.segments[-1].append(self.text[self.pos :])
            self.pos = len(self.text)
            return True
        self.segments[-1].append(self.text[self.pos : at])
        self.pos = at + len(marker)
        if marker == TOOL_CALL_OPEN:
            self._consume_call()
        elif marker == CHANNEL_OPEN:
            self._note(NOTE_REASONING_BLOCK)
            self._consume_reasoning()
        elif marker in STOP_TOKENS:
            self._note(NOTE_STOP_TOKEN)
            return False
        else:
            # A stray `<channel|>` in content is swallowed by vLLM too (§2.1); others are markup.
            self._note(NOTE_ORPHAN_CHANNEL_CLOSE if marker == CHANNEL_CLOSE else NOTE_STRAY_TOKEN)
        return True

    def _consume_reasoning(self) -> None:
        """Reasoning runs to `<channel|>`; a `<|tool_call>` ends it implicitly (§2.1); an unclosed
        channel runs to the end (§2.8 'unclosed'). The `thought\\n` label is structural (§1.5)."""
        marker, at = _next_marker(self.text, self.pos, (CHANNEL_CLOSE, TOOL_CALL_OPEN, *STOP_TOKENS))
        end = len(self.text) if marker is None else at
        body = self.text[self.pos : end]
        if body.startswith(THOUGHT_LABEL + "\n"):
            body = body[len(THOUGHT_LABEL) + 1 :]
        elif body == THOUGHT_LABEL:
            body = ""
        self.reasoning.append(body.strip())
        # Leave `<|tool_call>` / stop tokens for the content loop; only the closer is consumed.
        self.pos = end + len(CHANNEL_CLOSE) if marker == CHANNEL_CLOSE else end

    def _consume_call(self) -> None:
        """From just after `<|tool_call>` to `<tool_call|>`, the next opener, a stop token, or EOF."""
        marker, at = _next_marker(self.text, self.pos, (TOOL_CALL_CLOSE, TOOL_CALL_OPEN, *STOP_TOKENS))
        end = len(self.text) if marker is None else at
        call = parse_call_body(self.text[self.pos : end])
        if marker != TOOL_CALL_CLOSE:
            call.notes.append(NOTE_TRUNCATED)
        self.pos = end + len(TOOL_CALL_CLOSE) if marker == TOOL_CALL_CLOSE else end
        if call.name:
            self.calls.append(call)
            self.notes.extend(call.notes)
        self.segments.append([])


def _next_marker(text: str, start: int, markers: tuple[str, ...]) -> tuple[str | None, int]:
    best: tuple[str | None, int] = (None, -1)
    for marker in markers:
        at = text.find(marker, start)
        if at >= 0 and (best[0] is None or at < best[1]):
            best = (marker, at)
    return best


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --------------------------------------------------------------------------------------------
# Call level: `call:NAME{args}` between the tool-call tokens.


def parse_call_body(body: str) -> RawToolCall:
    """Parse what sits between `<|tool_call>` and `<tool_call|>` (or the truncation point)."""
    notes: list[str] = []
    rest = body.lstrip()
    if rest.startswith("call:"):
        rest = rest[len("call:") :]
    elif rest.startswith(":"):
        # `<|tool_call>:name{…}` — accepted by vLLM since PR #53444 (#53431).
        notes.append(NOTE_BARE_OPENER)
        rest = rest[1:]
    else:
        # No `call:` at all; more opener variants are proposed upstream (PR #54778).
        notes.append(NOTE_BARE_OPENER)
    match = _NAME_END.search(rest)
    if match is None:
        # TOOL_NAME -> `<tool_call|>` escape hatch: a call with no braces has no arguments (§2.1).
        notes.append(NOTE_NO_ARGS_BRACES)
        return RawToolCall(rest.strip(), {}, notes)
    name = rest[: match.start()].strip()
    opener = match.group()
    if opener == "(":
        notes.append(NOTE_ROUND_BRACKETS)
    parser = _ArgParser(rest, match.end(), closer="}" if opener == "{" else ")")
    args = parser.parse_members()
    notes.extend(parser.notes)
    return RawToolCall(name, args, _dedupe(notes))


class _ArgParser:
    """Tolerant recursive-descent parser for the argument syntax (§1.3, §2.2). Never raises;
    anything it cannot read is skipped up to the next separator and noted."""

    def __init__(self, text: str, pos: int, closer: str) -> None:
        self.s = text
        self.i = pos
        self.top_closer = closer
        self.notes: list[str] = []

    # -- helpers ---------------------------------------------------------------------------
    def _skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def _at(self, token: str) -> bool:
        return self.s.startswith(token, self.i)

    def _peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def _stops(self, closer: str) -> str:
        # The top-level `(` form ends at `)`, not `}`: `call:f(a:1)`.
        return ",]" + closer

    # -- grammar -----------------------------------------------------------------------------
    def _parse_items(self, closer: str, read_item: Callable[[], None]) -> None:
        """Comma-separated items up to `closer` (consumed) or the end; `read_item` reads one."""
        while True:
            self._skip_ws()
            while self._peek() == ",":
                self.i += 1
                self._skip_ws()
            if self.i >= len(self.s):
                return
            if self._peek() == closer:
                self.i += 1
                return
            start = self.i
            read_item()
            self._skip_to_separator(closer)
            if self.i == start:  # no progress: give up rather than loop (vLLM does the same, §2.2)
                self.notes.append(NOTE_UNPARSED_ARGS)
                return

    def parse_members(self, closer: str | None = None) -> dict[str, Any]:
        end = closer or self.top_closer
        out: dict[str, Any] = {}

        def member() -> None:
            key = self._parse_key(end)
            if key is not None:
                out[key] = self._parse_value(end)

        self._parse_items(end, member)
        return out

    def _parse_key(self, closer: str) -> str | None:
        if self._peek() in ("{", "["):
            # A structure where a key belongs: consume it whole so its closer does not end us.
            self.notes.append(NOTE_UNPARSED_ARGS)
            self._parse_value(closer)
            return None
        if self._at(STRING_DELIM):
            key = self._read_delimited()
        elif self._peek() in ('"', "'"):
            key = self._read_plain_quoted(closer, stops=":=")
        else:
            j = self.i
            while j < len(self.s) and self.s[j] not in ":=," + closer:
                j += 1
            key = self.s[self.i : j].strip()
            self.i = j
        self._skip_ws()
        sep = self._peek()
        if sep not in (":", "="):
            # `{London}` or a key cut off by truncation: nothing to pair it with.
            if key:
                self.notes.append(NOTE_UNPARSED_ARGS)
            return None
        if sep == "=":
            # `key=value`: vLLM 0.33 returns `{}` silently (§2.5 row 19, §4 item 14).
            self.notes.append(NOTE_KEY_EQUALS)
        self.i += 1
        if not key:
            self.notes.append(NOTE_UNPARSED_ARGS)
            return None
        return key

    def _parse_value(self, closer: str) -> Any:
        self._skip_ws()
        if self._at(STRING_DELIM):
            return self._read_delimited()
        ch = self._peek()
        if ch == "{":
            self.i += 1
            return self.parse_members("}")
        if ch == "[":
            self.i += 1
            return self._parse_array()
        if ch in ('"', "'"):
            self.notes.append(NOTE_PLAIN_QUOTES)
            return self._read_plain_quoted(closer, stops=self._stops(closer))
        return self._read_bare(closer)

    def _parse_array(self) -> list[Any]:
        items: list[Any] = []
        self._parse_items("]", lambda: items.append(self._parse_value("]")))
        return items

    def _read_delimited(self) -> str:
        """`<|"|>…<|"|>`: literal content; unclosed (truncated) takes the rest (§2.2)."""
        self.i += len(STRING_DELIM)
        end = self.s.find(STRING_DELIM, self.i)
        if end < 0:
            value, self.i = self.s[self.i :], len(self.s)
            return value
        value, self.i = self.s[self.i : end], end + len(STRING_DELIM)
        return value

    def _read_plain_quoted(self, closer: str, stops: str) -> str:
        """`"x"` or `'x'` (#51284). The closing quote is the first matching quote followed by a
        separator, so inner quotes survive; `\\"` escapes are honoured when the text is JSON."""
        quote = self.s[self.i]
        j = self.i + 1
        while True:
            end = self.s.find(quote, j)
            if end < 0:
                value, self.i = self.s[self.i + 1 :], len(self.s)
                return value
            k = end + 1
            while k < len(self.s) and self.s[k].isspace():
                k += 1
            if k >= len(self.s) or self.s[k] in stops:
                break
            j = end + 1
        inner = self.s[self.i + 1 : end]
        self.i = end + 1
        if quote == '"' and "\\" in inner:
            try:
                return json.loads(f'"{inner}"')
            except ValueError:
                pass
        return inner

    def _read_bare(self, closer: str) -> Any:
        j = self.i
        stops = self._stops(closer)
        while j < len(self.s) and self.s[j] not in stops:
            j += 1
        raw = self.s[self.i : j].strip()
        self.i = j
        return _type_bare(raw)

    def _skip_to_separator(self, closer: str) -> None:
        """After a value, expect `,` or the closer; skip junk (e.g. `x"y` leftovers) up to one."""
        self._skip_ws()
        if self.i >= len(self.s) or self.s[self.i] in "," + closer:
            return
        self.notes.append(NOTE_UNPARSED_ARGS)
        while self.i < len(self.s) and self.s[self.i] not in "," + closer:
            self.i += 1


def _type_bare(raw: str) -> Any:
    """Bare values are JSON literals in Gemma's syntax (the template writes numbers and booleans
    unquoted, §1.3); anything else (`x y z`, `007`, `NaN`) stays a string (§2.5 row 20)."""
    if raw in _BARE_LITERALS:
        return _BARE_LITERALS[raw]
    if _JSON_NUMBER.fullmatch(raw):
        return json.loads(raw)
    return raw
