"""The vLLM side of Gemma 4 output parsing: raw model text -> content / reasoning / tool calls.

This re-implements, for the emulator only, what vLLM 0.33.0's `gemma4` tool and reasoning
parsers do with raw Gemma 4 text (reference/gemma4-wire.md §2.2 rules, §2.4 streaming,
vectors §2.5/§2.6/§2.8). It deliberately shares nothing with the bot's own client-side parser
in `agent/`: the emulator stands for a process we do not own, and two independent
implementations are what make the bot's repair code testable.

Non-streaming: `parse_output(raw, tools=..., ...)`.
Streaming: `StreamParser.feed(delta_text)` per engine step, returning a delta or None; it works
the way vLLM does — accumulate, re-derive the stable state, emit only the new suffix — so the
concatenated argument fragments equal the non-streaming `arguments` string. Arguments are read
and typed by `gemma_args` (vLLM's rules). tests/test_vllm_conformance.py replays the recorded
outputs of the real 0.33.0 parsers (`../shared/conformance/`) against both paths.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from .gemma_args import arguments_json, safe_arg_prefix, streamable_string_keys, tool_properties

TOOL_CALL_OPEN = "<|tool_call>"
TOOL_CALL_CLOSE = "<tool_call|>"
CHANNEL_OPEN = "<|channel>"
CHANNEL_CLOSE = "<channel|>"
THOUGHT_LABEL = "thought\n"

# Text that must never leak half-typed into content/reasoning while streaming.
_CONTENT_TERMINALS = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE, CHANNEL_OPEN, CHANNEL_CLOSE)
_REASONING_TERMINALS = (CHANNEL_CLOSE, TOOL_CALL_OPEN)


def new_tool_call_id() -> str:
    # vLLM 0.33.0: `chatcmpl-tool-` + random_uuid() (16 hex characters).
    return f"chatcmpl-tool-{secrets.token_hex(8)}"


# --------------------------------------------------------------------------------------------
# Segmentation of the raw text (the CONTENT/REASONING/TOOL_* state machine of §2.1)
# --------------------------------------------------------------------------------------------


@dataclass
class RawCall:
    name: str
    args_text: str  # text after the opening bracket, up to <tool_call|> or end
    closed: bool  # <tool_call|> seen
    start: int  # where <|tool_call> begins in the text
    # Spans of text that produce parser events (the opener, the name, the arguments and the
    # closer); `call:` and the bracket are silent transitions.
    event_spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class Segments:
    # Content in text order: (position, text, follows a call).
    content: list[tuple[int, str, bool]] = field(default_factory=list)
    reasoning_blocks: list[str] = field(default_factory=list)
    reasoning_open: bool = False  # the last reasoning block has no <channel|> yet
    calls: list[RawCall] = field(default_factory=list)
    pending_preamble: bool = False  # inside <|tool_call> before `call:`

    @property
    def content_before(self) -> str:
        return "".join(t for _p, t, after in self.content if not after)

    @property
    def in_call(self) -> bool:
        return self.pending_preamble or bool(self.calls and not self.calls[-1].closed)


def needs_synthetic_channel(first_delta: str) -> bool:
    """0.33.0 `_preprocess_feed`: a first delta starting with the bare `thought` label, or
    closing a channel that was never opened, gets a synthetic `<|channel>` prepended."""
    if CHANNEL_OPEN in first_delta:
        return False
    return first_delta.startswith(THOUGHT_LABEL) or first_delta == "thought" or CHANNEL_CLOSE in first_delta


def _first(text: str, i: int, needles: tuple[str, ...]) -> tuple[int, str]:
    best, which = -1, ""
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
    tool_terms = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE) if tool_parser else ()
    content_terms = (CHANNEL_OPEN, CHANNEL_CLOSE) + tool_terms
    reasoning_terms = (CHANNEL_CLOSE, CHANNEL_OPEN) + tool_terms[:1]

    def add_content(pos: int, s: str) -> None:
        if s:
            seg.content.append((pos, s, bool(seg.calls)))

    while i < n:
        if state == "CONTENT":
            k, which = _first(text, i, content_terms)
            if k < 0:
                add_content(i, text[i:])
                break
            add_content(i, text[i:k])
            i = k + len(which)
            if which == CHANNEL_OPEN:
                state = "REASONING"
                seg.reasoning_blocks.append("")
                seg.reasoning_open = True
            elif which == TOOL_CALL_OPEN:
                i = _parse_call(text, k, seg)
            # a stray <channel|> or <tool_call|> in CONTENT is swallowed
        else:  # REASONING
            k, which = _first(text, i, reasoning_terms)
            if k < 0:
                seg.reasoning_blocks[-1] += text[i:]
                break
            seg.reasoning_blocks[-1] += text[i:k]
            i = k + len(which)
            if which == CHANNEL_OPEN:
                continue  # a second opener inside reasoning is swallowed
            seg.reasoning_open = False
            state = "CONTENT"
            if which == TOOL_CALL_OPEN:  # a call ends reasoning implicitly
                i = _parse_call(text, k, seg)
    return seg


def _parse_call(text: str, start: int, seg: Segments) -> int:
    """`start`: where <|tool_call> begins. Returns the index where CONTENT resumes."""
    n = len(text)
    i = start + len(TOOL_CALL_OPEN)
    spans = [(start, i)]
    rest = text[i:]
    # TOOL_PREAMBLE: `call:` or a bare `:` (#53444); <tool_call|> ends an empty call.
    if rest.startswith("call:"):
        i += len("call:")
    elif rest.startswith(":"):
        i += 1
    else:
        close = text.find(TOOL_CALL_CLOSE, i)
        if close < 0:
            seg.pending_preamble = True  # `call` may still become `call:`
            return n
        return close + len(TOOL_CALL_CLOSE)  # nothing named: no call
    k, which = _first(text, i, ("{", "(", TOOL_CALL_CLOSE))
    if k < 0:
        # Name still being typed, or cut off by max_tokens (then it comes back with `{}`).
        seg.calls.append(RawCall(name=text[i:].strip(), args_text="", closed=False, start=start,
                                 event_spans=spans + [(i, n)]))
        return n
    name = text[i:k].strip()
    spans.append((i, k))
    if which == TOOL_CALL_CLOSE:
        # Escape hatch: a call with no brackets at all.
        end = k + len(TOOL_CALL_CLOSE)
        seg.calls.append(RawCall(name=name, args_text="", closed=True, start=start, event_spans=spans + [(k, end)]))
        return end
    args_start = k + 1
    end = text.find(TOOL_CALL_CLOSE, args_start)
    closed = end >= 0
    stop = end + len(TOOL_CALL_CLOSE) if closed else n
    args_text = text[args_start:end] if closed else text[args_start:]
    seg.calls.append(RawCall(name=name, args_text=args_text, closed=closed, start=start,
                             event_spans=spans + [(args_start, stop)]))
    return stop


def _strip_label(block: str) -> str:
    return block[len(THOUGHT_LABEL) :] if block.startswith(THOUGHT_LABEL) else block


def _finished_calls(seg: Segments) -> list[RawCall]:
    """The calls vLLM reports once generation ended: every call with a name, including one
    cut off inside its name (it comes back with `{}`)."""
    return [c for c in seg.calls if c.name]


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


def keeps_tool_calls(tools: list[dict[str, Any]] | None, tool_choice: Any) -> bool:
    """vLLM's `keeps_tool_calls`: calls come back for a named/required choice, or `auto` with tools."""
    return isinstance(tool_choice, dict) or tool_choice == "required" or (tool_choice == "auto" and bool(tools))


def parse_output(
    raw: str,
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = "auto",
    tool_parser: bool = True,
    start_in_reasoning: bool = False,
) -> ParsedOutput:
    """What vLLM 0.33.0 returns for a whole completion (reference §2.2, §2.5, §2.8).

    The gemma4 parser reads calls whether or not the request declared tools; without tools
    the server drops them but keeps the parser's content (the text before the call).
    `tool_parser=False` simulates a deployment whose tool parser did not run: the raw
    `<|tool_call>…<tool_call|>` text stays in `content` (the reasoning parser still runs).
    """
    text = raw
    if not start_in_reasoning and needs_synthetic_channel(text):
        text = CHANNEL_OPEN + text
    suppressed = tool_choice == "none" and bool(tools)
    seg = segment(text, tool_parser=tool_parser, start_in_reasoning=start_in_reasoning)
    reasoning = "".join(_strip_label(b) for b in seg.reasoning_blocks).rstrip() or None
    calls = _finished_calls(seg) if tool_parser else []
    if calls and not suppressed:
        # Text after a call is deferred and never released in one pass; content is stripped.
        content = seg.content_before.strip() or None
        if not keeps_tool_calls(tools, tool_choice):
            return ParsedOutput(content=content, reasoning=reasoning, tool_calls=[])
        parsed = [
            ParsedToolCall(id=new_tool_call_id(), name=c.name, arguments=arguments_json(c.args_text, c.name, tools))
            for c in calls
        ]
        return ParsedOutput(content=content, reasoning=reasoning, tool_calls=parsed)
    content = "".join(t for _p, t, _a in seg.content)
    if suppressed and calls:
        content = seg.content_before.strip()
    return ParsedOutput(content=content or None, reasoning=reasoning, tool_calls=[])


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
    """The part of the final `arguments` JSON that can no longer change (vLLM's
    `_safe_arg_prefix` over the partial conversion); the whole of it once the call closed or
    generation ended."""
    if call.closed or final:
        return arguments_json(call.args_text, call.name, tools)
    current = arguments_json(call.args_text, call.name, tools, partial=True)
    return safe_arg_prefix(current, streamable_string_keys(tool_properties(tools, call.name)))


@dataclass
class _CallState:
    id: str
    name_sent: bool = False
    args_sent: str = ""
    broken: bool = False  # a streamed prefix the final arguments contradict: vLLM stops here


class StreamParser:
    """Feeds engine-step text and yields OpenAI deltas like 0.33.0's streaming path.

    Content that follows a call is streamed too (non-streaming drops it), with vLLM's
    deferral: text that comes after a tool event in the same delta waits for a delta without
    tool-call output, and is then released after that delta's own text (its reordering bug).
    """

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
        self.tool_parser = tool_parser
        self.suppressed = tool_choice == "none" and bool(tools)
        self.keep_calls = tool_parser and not self.suppressed and keeps_tool_calls(tools, tool_choice)
        self.start_in_reasoning = start_in_reasoning
        self.acc = ""
        self._started = False
        self._fed_to = 0  # how much of `acc` earlier deltas covered
        self._content_done = 0  # content characters already emitted or deferred
        self._deferred = ""
        self._has_nonws = False
        self._reasoning_sent = ""
        self._calls: list[_CallState] = []

    @property
    def tool_calls_emitted(self) -> int:
        return sum(1 for c in self._calls if c.name_sent) if self.keep_calls else 0

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
        """End of generation: held partial terminals and open values are released."""
        return self._diff(final=True)

    def _diff(self, final: bool) -> dict[str, Any] | None:
        seg = segment(self.acc, tool_parser=self.tool_parser, start_in_reasoning=self.start_in_reasoning)
        fed_from, self._fed_to = self._fed_to, len(self.acc)
        delta: dict[str, Any] = {}
        reasoning = self._reasoning(seg, final)
        if reasoning:
            delta["reasoning"] = reasoning
        entries = self._tool_entries(seg, final)
        content = self._content(seg, final, fed_from, bool(entries))
        if content:
            delta["content"] = content
        if entries and self.keep_calls:
            delta["tool_calls"] = entries
        return delta or None

    def _reasoning(self, seg: Segments, final: bool) -> str:
        """Reasoning: label stripped, half-typed label and terminals withheld."""
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
            new = reasoning[len(self._reasoning_sent) :]
            self._reasoning_sent = reasoning
            return new
        return ""

    def _content(self, seg: Segments, final: bool, fed_from: int, tool_output: bool) -> str:
        pieces = list(seg.content)
        if pieces and not final and not seg.in_call:
            pos, text, after = pieces[-1]
            terms = _CONTENT_TERMINALS if self.tool_parser else (CHANNEL_OPEN, CHANNEL_CLOSE)
            pieces[-1] = (pos, _withhold_partial_terminal(text, terms), after)
        events = [] if self.suppressed else [
            max(a, fed_from) for c in seg.calls for a, b in c.event_spans if b > fed_from and b > a
        ]
        if final and seg.in_call and not self.suppressed:
            events.append(len(self.acc))  # the engine closes the open call at the end
        first_event = min(events) if events else None
        # New content of this delta, split by whether a tool event precedes it in the delta.
        before_event, after_event = "", ""
        seen = 0
        for pos, text, _after in pieces:
            for offset, ch in enumerate(text):
                if seen >= self._content_done:
                    if first_event is not None and pos + offset > first_event:
                        after_event += ch
                    else:
                        before_event += ch
                seen += 1
        self._content_done = max(self._content_done, seen)
        carried = self._deferred
        self._deferred += after_event
        parts = [before_event]
        if self._deferred and (first_event is None or not tool_output):
            if carried:
                parts.insert(0, carried)
            if after_event:
                parts.append(after_event)
            self._deferred = ""
        out = "".join(parts)
        if self._has_nonws or not out:
            return out
        if out.strip():
            self._has_nonws = True
            return out
        if seg.calls or seg.pending_preamble:
            return ""  # whitespace-only content once a call began: dropped
        if not final:
            self._deferred = out  # leading whitespace waits until we know what follows
            return ""
        return out

    def _tool_entries(self, seg: Segments, final: bool) -> list[dict[str, Any]]:
        if not self.tool_parser or self.suppressed:
            return []
        entries = []
        for index, call in enumerate(seg.calls):
            if index >= len(self._calls):
                self._calls.append(_CallState(id=new_tool_call_id()))
            st = self._calls[index]
            if st.broken or not call.name:
                continue
            entry: dict[str, Any] = {}
            if not st.name_sent:
                # The name goes out with the first argument text (or when the call ends).
                if not (call.closed or call.args_text or final):
                    continue
                entry = {"id": st.id, "type": "function", "index": index, "function": {"name": call.name}}
                st.name_sent = True
            args = stable_arguments_prefix(call, self.tools, final=final)
            if args and not args.startswith(st.args_sent):
                st.broken = call.closed or final
            elif len(args) > len(st.args_sent):
                new = args[len(st.args_sent) :]
                st.args_sent = args
                if not entry:
                    entry = {"index": index, "function": {}}
                entry["function"]["arguments"] = new
            if entry:
                entries.append(entry)
        return entries
