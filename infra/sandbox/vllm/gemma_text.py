"""The vLLM side of Gemma 4 output parsing: raw model text -> content / reasoning / tool calls.

This re-implements, for the emulator only, what vLLM 0.33.0's `gemma4` tool and reasoning
parsers do with raw Gemma 4 text (reference/gemma4-wire.md §2.2 rules, §2.4 streaming,
vectors §2.5/§2.6/§2.8). It deliberately shares nothing with the bot's own client-side parser
in `agent/`: the emulator stands for a process we do not own, and two independent
implementations are what make the bot's repair code testable.

Non-streaming: `parse_output(raw, tools=..., ...)`.
Streaming: `StreamParser.feed(delta_text)` per engine step, returning a delta or None; it works
the way vLLM does — accumulate, re-derive the stable state, emit only the new suffix — so the
concatenated argument fragments equal the non-streaming `arguments` string.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_OPEN = "<|tool_call>"
TOOL_CALL_CLOSE = "<tool_call|>"
CHANNEL_OPEN = "<|channel>"
CHANNEL_CLOSE = "<channel|>"
STR_DELIM = '<|"|>'
THOUGHT_LABEL = "thought\n"

# Text that must never leak half-typed into content/reasoning while streaming.
_CONTENT_TERMINALS = (TOOL_CALL_OPEN, CHANNEL_OPEN, CHANNEL_CLOSE)
_REASONING_TERMINALS = (CHANNEL_CLOSE, TOOL_CALL_OPEN)


def new_tool_call_id() -> str:
    # vLLM 0.33.0: `chatcmpl-tool-` + random_uuid() (16 hex characters).
    return f"chatcmpl-tool-{secrets.token_hex(8)}"


# --------------------------------------------------------------------------------------------
# Argument text -> Python values (all leaves are strings, as in 0.33.0's _parse_gemma4_args)
# --------------------------------------------------------------------------------------------


@dataclass
class _Last:
    """What the streaming serializer needs to know about the last top-level value."""

    key: str | None = None
    open_string: bool = False  # the value is a <|"|> string whose closing delimiter is missing
    is_string: bool = False


class _ArgParser:
    def __init__(self, text: str, partial: bool) -> None:
        self.s = text
        self.n = len(text)
        self.partial = partial
        self.stopped = False  # partial mode hit an unstable value: nothing after it counts
        self.last = _Last()

    def _skip_ws(self, i: int) -> int:
        while i < self.n and self.s[i].isspace():
            i += 1
        return i

    def parse_object(self, i: int, top: bool) -> tuple[dict[str, Any], int, bool]:
        """Parse `k:v,...` until `}` (nested) or end of text. Returns (dict, index, closed)."""
        out: dict[str, Any] = {}
        while not self.stopped:
            i = self._skip_ws(i)
            while i < self.n and self.s[i] == ",":
                i = self._skip_ws(i + 1)
            if i >= self.n:
                return out, i, False
            if self.s[i] == "}":
                return out, i + 1, True
            # key: `<|"|>key<|"|>` or bare text up to ':'
            if self.s.startswith(STR_DELIM, i):
                end = self.s.find(STR_DELIM, i + len(STR_DELIM))
                if end < 0:
                    return out, self.n, False
                key = self.s[i + len(STR_DELIM) : end]
                colon = self.s.find(":", end + len(STR_DELIM))
            else:
                colon = self.s.find(":", i)
                key = self.s[i:colon].strip() if colon >= 0 else ""
            if colon < 0:
                # `key=value` or a half-typed key: no progress possible -> stop (vLLM logs a warning).
                return out, self.n, False
            j = self._skip_ws(colon + 1)
            if j >= self.n:
                # `key:` with nothing after: "" when complete, dropped while partial.
                if not self.partial:
                    out[key] = ""
                    self._note(top, key, is_string=True)
                else:
                    self.stopped = True
                return out, self.n, False
            value, i, ok = self.parse_value(j, top, key)
            if not ok:
                self.stopped = True
                return out, i, False
            out[key] = value
        return out, i, False

    def _note(self, top: bool, key: str, *, is_string: bool, open_string: bool = False) -> None:
        if top:
            self.last = _Last(key=key, open_string=open_string, is_string=is_string)

    def parse_value(self, j: int, top: bool, key: str | None) -> tuple[Any, int, bool]:
        """Returns (value, next index, usable). `usable` False means: partial and not yet stable."""
        s = self.s
        if s.startswith(STR_DELIM, j):
            start = j + len(STR_DELIM)
            end = s.find(STR_DELIM, start)
            if end < 0:
                # No closing delimiter: the rest of the text is the string.
                if key is not None:
                    self._note(top, key, is_string=True, open_string=True)
                return s[start:], self.n, True
            if key is not None:
                self._note(top, key, is_string=True)
            return s[start:end], end + len(STR_DELIM), True
        if s[j] == "{":
            obj, i, closed = self.parse_object(j + 1, top=False)
            if key is not None:
                self._note(top, key, is_string=False)
            if not closed and self.partial:
                return obj, i, True  # the streaming serializer withholds a trailing object anyway
            return obj, i, True
        if s[j] == "[":
            arr, i, _closed = self.parse_array(j + 1)
            if key is not None:
                self._note(top, key, is_string=False)
            return arr, i, True
        # Bare value: raw text up to , } or ] -- kept as a STRING (#47906); typing is the schema's job.
        i = j
        while i < self.n and s[i] not in ",}]":
            i += 1
        raw = s[j:i].strip()
        if self.partial and (i >= self.n or raw.endswith(".")):
            # Could still grow (`4` -> `42`, `3.` -> `3.14`): withheld (fix for #42047).
            return None, i, False
        if key is not None:
            self._note(top, key, is_string=False)
        return raw, i, True

    def parse_array(self, i: int) -> tuple[list[Any], int, bool]:
        out: list[Any] = []
        while not self.stopped:
            i = self._skip_ws(i)
            while i < self.n and self.s[i] == ",":
                i = self._skip_ws(i + 1)
            if i >= self.n:
                return out, i, False
            if self.s[i] == "]":
                return out, i + 1, True
            value, i, ok = self.parse_value(i, top=False, key=None)
            if not ok:
                self.stopped = True
                return out, i, False
            out.append(value)
        return out, i, False


def parse_args(text: str, *, partial: bool = False) -> dict[str, Any]:
    """Gemma 4 argument text (between the braces) -> dict whose leaves are strings."""
    return _ArgParser(text, partial).parse_object(0, top=True)[0]


def _parse_args_partial(text: str) -> tuple[dict[str, Any], _Last]:
    p = _ArgParser(text, partial=True)
    d = p.parse_object(0, top=True)[0]
    return d, p.last


# --------------------------------------------------------------------------------------------
# Schema coercion (0.33.0 `_fix_arg_types`): only declared types turn strings into values.
# --------------------------------------------------------------------------------------------


def _schema_type(schema: dict[str, Any] | None) -> str | None:
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    return t if isinstance(t, str) else None


def _coerce(value: Any, schema: dict[str, Any] | None) -> Any:
    t = _schema_type(schema)
    if t is None:
        return value
    if isinstance(value, str):
        try:
            if t == "integer":
                return int(value)
            if t == "number":
                try:
                    return int(value)
                except ValueError:
                    return float(value)
            if t == "boolean":
                low = value.strip().lower()
                if low in ("true", "1"):
                    return True
                if low in ("false", "0"):
                    return False
                return value
            if t == "null":
                return None if value.strip().lower() == "null" else value
            if t in ("object", "array"):
                return _coerce(json.loads(value), schema)
        except (ValueError, TypeError):
            return value
        return value
    if isinstance(value, dict) and t == "object":
        return fix_arg_types(value, schema.get("properties") or {})
    if isinstance(value, list) and t == "array":
        items = schema.get("items")
        return [_coerce(v, items) for v in value]
    return value


def fix_arg_types(args: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    return {k: _coerce(v, properties.get(k)) if k in properties else v for k, v in args.items()}


def tool_properties(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
    """`parameters.properties` of the declared tool `name`, or None when it is not declared."""
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            params = fn.get("parameters") or {}
            return params.get("properties") or {}
    return None


def dump_args(args: dict[str, Any]) -> str:
    # Python's default separators (", " and ": ") and raw UTF-8, exactly as vLLM serializes.
    return json.dumps(args, ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# Segmentation of the raw text (the CONTENT/REASONING/TOOL_* state machine of §2.1)
# --------------------------------------------------------------------------------------------


@dataclass
class RawCall:
    name: str
    name_complete: bool  # `{` or `(` (or `<tool_call|>`) seen after the name
    args_text: str  # text after the opening bracket, up to <tool_call|> or end
    closed: bool  # <tool_call|> seen
    bracket: str = "{"


@dataclass
class Segments:
    content_before: str = ""  # content before the first call
    content_after: str = ""  # content between/after calls (dropped by the tool parser)
    reasoning_blocks: list[str] = field(default_factory=list)
    reasoning_open: bool = False  # the last reasoning block has no <channel|> yet
    calls: list[RawCall] = field(default_factory=list)
    pending_preamble: bool = False  # inside <|tool_call> before a usable name


def needs_synthetic_channel(first_delta: str) -> bool:
    """0.33.0 `_preprocess_feed`: a first delta starting with the bare `thought` label, or
    closing a channel that was never opened, gets a synthetic `<|channel>` prepended."""
    if first_delta.startswith(THOUGHT_LABEL) or first_delta == "thought":
        return True
    close = first_delta.find(CHANNEL_CLOSE)
    return close >= 0 and first_delta.find(CHANNEL_OPEN, 0, close) < 0


def _first(text: str, i: int, needles: tuple[str, ...]) -> tuple[int, str | None]:
    best, which = -1, None
    for needle in needles:
        k = text.find(needle, i)
        if k >= 0 and (best < 0 or k < best):
            best, which = k, needle
    return best, which


def segment(text: str, *, tool_parser: bool = True, start_in_reasoning: bool = False) -> Segments:
    seg = Segments()
    n = len(text)
    i = 0
    state = "REASONING" if start_in_reasoning else "CONTENT"
    if start_in_reasoning:
        seg.reasoning_blocks.append("")
        seg.reasoning_open = True
    content_terms = (CHANNEL_OPEN, CHANNEL_CLOSE) + ((TOOL_CALL_OPEN,) if tool_parser else ())
    reasoning_terms = (CHANNEL_CLOSE,) + ((TOOL_CALL_OPEN,) if tool_parser else ())

    def add_content(s: str) -> None:
        if seg.calls or seg.pending_preamble:
            seg.content_after += s
        else:
            seg.content_before += s

    while i < n:
        if state == "CONTENT":
            k, which = _first(text, i, content_terms)
            if k < 0:
                add_content(text[i:])
                break
            add_content(text[i:k])
            i = k + len(which)
            if which == CHANNEL_OPEN:
                state = "REASONING"
                seg.reasoning_blocks.append("")
                seg.reasoning_open = True
            elif which == CHANNEL_CLOSE:
                pass  # a stray <channel|> in CONTENT is swallowed
            else:
                i = _parse_call(text, i, seg)
        else:  # REASONING
            k, which = _first(text, i, reasoning_terms)
            if k < 0:
                seg.reasoning_blocks[-1] += text[i:]
                break
            seg.reasoning_blocks[-1] += text[i:k]
            seg.reasoning_open = False
            i = k + len(which)
            state = "CONTENT"
            if which == TOOL_CALL_OPEN:  # a call ends reasoning implicitly
                i = _parse_call(text, i, seg)
    return seg


def _parse_call(text: str, i: int, seg: Segments) -> int:
    """Called just after <|tool_call>. Returns the index where CONTENT resumes."""
    n = len(text)
    rest = text[i:]
    # TOOL_PREAMBLE: `call:` or a bare `:` (#53444). Anything else is taken as the name.
    if rest.startswith("call:"):
        i += len("call:")
    elif rest.startswith(":"):
        i += 1
    elif "call:".startswith(rest) or rest == "":
        seg.pending_preamble = True  # streaming: `call` may still become `call:`
        return n
    k, which = _first(text, i, ("{", "(", TOOL_CALL_CLOSE))
    if k < 0:
        # Name still being typed (or truncated): not a call yet.
        seg.pending_preamble = True
        return n
    name = text[i:k].strip()
    if which == TOOL_CALL_CLOSE:
        # Escape hatch: a call with no brackets at all.
        seg.calls.append(RawCall(name=name, name_complete=True, args_text="", closed=True))
        return k + len(TOOL_CALL_CLOSE)
    start = k + 1
    end = text.find(TOOL_CALL_CLOSE, start)
    closed = end >= 0
    args_text = text[start:end] if closed else text[start:]
    seg.calls.append(RawCall(name=name, name_complete=True, args_text=args_text, closed=closed, bracket=which))
    return end + len(TOOL_CALL_CLOSE) if closed else n


def _trim_args_text(raw: str, bracket: str) -> str:
    """Drop the call's own closing bracket: a trailing `}`, or `)` when unbalanced."""
    body = raw.rstrip()
    if bracket == "(":
        if body.endswith(")") and body.count(")") > body.count("("):
            return body[:-1]
        return body
    if body.endswith("}"):
        return body[:-1]
    return body


def call_arguments(call: RawCall, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    args = parse_args(_trim_args_text(call.args_text, call.bracket))
    props = tool_properties(tools, call.name)
    return fix_arg_types(args, props) if props is not None else args


def _strip_label(block: str) -> str:
    return block[len(THOUGHT_LABEL) :] if block.startswith(THOUGHT_LABEL) else block


# --------------------------------------------------------------------------------------------
# Non-streaming result
# --------------------------------------------------------------------------------------------


@dataclass
class ParsedToolCall:
    id: str
    name: str
    arguments: str  # JSON string


@dataclass
class ParsedOutput:
    content: str | None
    reasoning: str | None
    tool_calls: list[ParsedToolCall]


def parse_output(
    raw: str,
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = "auto",
    tool_parser: bool = True,
    start_in_reasoning: bool = False,
) -> ParsedOutput:
    """What vLLM 0.33.0 returns for a whole completion (reference §2.2, §2.5, §2.8).

    `tool_parser=False` simulates a deployment whose tool parser did not run: the raw
    `<|tool_call>…<tool_call|>` text stays in `content` (the reasoning parser still runs).
    """
    text = raw
    if not start_in_reasoning and needs_synthetic_channel(text):
        text = CHANNEL_OPEN + text
    parse_calls = tool_parser and bool(tools)
    seg = segment(text, tool_parser=parse_calls, start_in_reasoning=start_in_reasoning)
    return _assemble(seg, tools, tool_choice, parse_calls)


def _assemble(
    seg: Segments, tools: list[dict[str, Any]] | None, tool_choice: Any, parse_calls: bool
) -> ParsedOutput:
    reasoning = "".join(_strip_label(b) for b in seg.reasoning_blocks).rstrip()
    calls = [c for c in seg.calls if c.name]
    if parse_calls and calls:
        content = seg.content_before.strip() or None
        if tool_choice == "none":
            # [ran] the call is consumed; neither tool_calls nor the call text comes back.
            return ParsedOutput(content=content, reasoning=reasoning or None, tool_calls=[])
        parsed = [
            ParsedToolCall(id=new_tool_call_id(), name=c.name, arguments=dump_args(call_arguments(c, tools)))
            for c in calls
        ]
        return ParsedOutput(content=content, reasoning=reasoning or None, tool_calls=parsed)
    content = seg.content_before + seg.content_after
    return ParsedOutput(content=content or None, reasoning=reasoning or None, tool_calls=[])


# --------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------


def _withhold_partial_terminal(text: str, terminals: tuple[str, ...]) -> str:
    """Cut a trailing proper prefix of any terminal (e.g. `<`, `<|tool_`) that may complete later."""
    for cut in range(min(len(text), max(len(t) for t in terminals) - 1), 0, -1):
        tail = text[-cut:]
        if any(t.startswith(tail) and t != tail for t in terminals):
            return text[:-cut]
    return text


def stable_arguments_prefix(call: RawCall, tools: list[dict[str, Any]] | None, final: bool = False) -> str:
    """The part of the final `arguments` JSON that can no longer change (§2.4 withholding).

    `final` (generation ended, e.g. a call cut off by max_tokens): everything that parses is
    released, like vLLM's end-of-stream check for unstreamed argument text, so the fragments
    always add up to the non-streaming `arguments`.
    """
    if call.closed or final:
        return dump_args(call_arguments(call, tools))
    body = _trim_args_text(call.args_text, call.bracket)
    args, last = _parse_args_partial(body)
    if not args:
        return ""
    props = tool_properties(tools, call.name)
    coerced = fix_arg_types(args, props) if props is not None else args
    key = last.key if last.key in coerced else next(reversed(coerced))
    schema_t = _schema_type((props or {}).get(key)) if props is not None else None
    streams_as_string = isinstance(coerced[key], str) and last.is_string and schema_t in (None, "string")
    if streams_as_string:
        value = coerced[key]
        if last.open_string:
            value = _withhold_partial_terminal(value, (STR_DELIM,))
        head = dict(coerced)
        head[key] = value
        return dump_args(head)[:-2]  # drop the closing `"}`
    # Non-string (or schema-coerced) trailing value: emit up to `"key": ` and withhold the value.
    head = dict(coerced)
    del head[key]
    prefix = dump_args(head)[:-1]
    if head:
        prefix += ", "
    return prefix + json.dumps(key, ensure_ascii=False) + ": "


@dataclass
class _CallState:
    id: str
    name_sent: bool = False
    args_sent: str = ""


class StreamParser:
    """Feeds engine-step text and yields OpenAI deltas exactly like 0.33.0's streaming path."""

    def __init__(
        self,
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = "auto",
        tool_parser: bool = True,
        start_in_reasoning: bool = False,
    ) -> None:
        self.tools = tools
        self.tool_choice = tool_choice
        self.parse_calls = tool_parser and bool(tools)
        self.start_in_reasoning = start_in_reasoning
        self.acc = ""
        self._started = False
        self._content_sent = ""
        self._reasoning_sent = ""
        self._calls: list[_CallState] = []

    @property
    def tool_calls_emitted(self) -> int:
        return sum(1 for c in self._calls if c.name_sent)

    def feed(self, delta_text: str) -> dict[str, Any] | None:
        if not delta_text:
            return None  # e.g. the stop-token step: no parser delta
        if not self._started and not self.start_in_reasoning:
            if needs_synthetic_channel(delta_text):
                self.acc = CHANNEL_OPEN
        self._started = True
        self.acc += delta_text
        return self._diff(final=False)

    def finish(self) -> dict[str, Any] | None:
        """End of generation: release deferred leading whitespace of a plain answer."""
        return self._diff(final=True)

    def _diff(self, final: bool) -> dict[str, Any] | None:
        seg = segment(self.acc, tool_parser=self.parse_calls, start_in_reasoning=self.start_in_reasoning)
        delta: dict[str, Any] = {}

        # Reasoning: label stripped, half-typed label and terminals withheld.
        reasoning = ""
        for idx, block in enumerate(seg.reasoning_blocks):
            still_open = idx == len(seg.reasoning_blocks) - 1 and seg.reasoning_open
            if still_open and not final and THOUGHT_LABEL.startswith(block) and block != THOUGHT_LABEL:
                break  # `thought` without its newline yet: could be the label
            body = _strip_label(block)
            if still_open and not final:
                body = _withhold_partial_terminal(body, _REASONING_TERMINALS)
            reasoning += body
        if reasoning.startswith(self._reasoning_sent) and len(reasoning) > len(self._reasoning_sent):
            delta["reasoning"] = reasoning[len(self._reasoning_sent) :]
            self._reasoning_sent = reasoning

        # Content: only before the first call (after a call it is deferred and dropped).
        content = seg.content_before
        if not final and not seg.calls and not seg.pending_preamble:
            terms = _CONTENT_TERMINALS if self.parse_calls else (CHANNEL_OPEN, CHANNEL_CLOSE)
            content = _withhold_partial_terminal(content, terms)
        has_call = bool(seg.calls) or seg.pending_preamble
        if not self._content_sent and content.strip() == "" and (not final or has_call):
            content = ""  # leading whitespace waits until we know whether a call follows
        if content.startswith(self._content_sent) and len(content) > len(self._content_sent):
            delta["content"] = content[len(self._content_sent) :]
            self._content_sent = content

        # Tool calls.
        if self.parse_calls and self.tool_choice != "none":
            entries = []
            for index, call in enumerate(seg.calls):
                if index >= len(self._calls):
                    self._calls.append(_CallState(id=new_tool_call_id()))
                st = self._calls[index]
                entry: dict[str, Any] = {}
                if not st.name_sent:
                    # The name is known once `{` and at least one argument character arrived.
                    if not (call.closed or call.args_text or final):
                        continue
                    entry = {"id": st.id, "type": "function", "index": index, "function": {"name": call.name}}
                    st.name_sent = True
                args = stable_arguments_prefix(call, self.tools, final=final)
                if args.startswith(st.args_sent) and len(args) > len(st.args_sent):
                    new = args[len(st.args_sent) :]
                    st.args_sent = args
                    if not entry:
                        entry = {"index": index, "function": {}}
                    entry["function"]["arguments"] = new
                if entry:
                    entries.append(entry)
            if entries:
                delta["tool_calls"] = entries
        return delta or None
