"""Turn one vLLM chat-completion reply (whole or streamed) into what the agent acts on.

vLLM 0.33 with `--tool-call-parser gemma4 --reasoning-parser gemma4` usually hands us clean
`tool_calls` and `content`. What it leaves behind (reference `gemma4-wire.md` §2–§4):
- raw `<|tool_call>call:name{…}<tool_call|>` text in `content` when the tool parser is missing,
  old, or a call slipped through (§4 items 4, 7, 14) → parsed with `gemma4_syntax`, ids made up;
- `<|channel>…<channel|>`, a bare `thought\\n`, or reasoning ending in a stray `<channel|>` in
  `content` (§2.8, §4 items 3, 8) → moved to `reasoning`;
- stop/markup tokens in `content` (`<turn|>`, `<eos>`, `<|tool_response>`) → cut / removed;
- `content` null and the whole answer in `reasoning` (an unclosed channel, #49717, or a
  `thought\\n`-prefixed answer, §2.2) → the reasoning is used as the answer.
`repaired` names each fix so the loop can log and count them.

The reasoning field is `reasoning` (PR #27752; `reasoning_content` was removed from responses in
PR #33402, §3.1). The openai client keeps it as an extra attribute; we also accept
`reasoning_content` in case an older server or a proxy renames it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.llm import gemma4_syntax

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionChunk, ChatCompletionMessage

# Repair labels (stable: used as log fields and metric label values).
REPAIR_TOOL_CALL_IN_CONTENT = "tool_call_in_content"
REPAIR_TOOL_CALL_IN_REASONING = "tool_call_in_reasoning"
REPAIR_REASONING_IN_CONTENT = "reasoning_in_content"
REPAIR_REASONING_AS_CONTENT = "reasoning_used_as_content"
REPAIR_MARKUP_IN_CONTENT = "markup_in_content"
REPAIR_MISSING_TOOL_CALL_ID = "missing_tool_call_id"
REPAIR_NON_FUNCTION_TOOL_CALL = "non_function_tool_call_ignored"

_REASONING_NOTES = {
    gemma4_syntax.NOTE_REASONING_BLOCK,
    gemma4_syntax.NOTE_THOUGHT_LABEL,
    gemma4_syntax.NOTE_ORPHAN_CHANNEL_CLOSE,
}
_MARKUP_NOTES = {gemma4_syntax.NOTE_STOP_TOKEN, gemma4_syntax.NOTE_STRAY_TOKEN}
_REASONING_KEYS = ("reasoning", "reasoning_content")


@dataclass(frozen=True)
class ToolCallRequest:
    id: str
    name: str
    arguments_raw: str  # a JSON object as text; validate with tool_args.coerce_arguments


@dataclass
class NormalizedTurn:
    content: str | None
    tool_calls: list[ToolCallRequest]
    reasoning: str | None
    repaired: list[str] = field(default_factory=list)
    finish_reason: str | None = None  # "length" means a call or answer may be cut off (§2.2)
    completion_tokens: int | None = None  # usage.completion_tokens, when the server said

    def cut_off(self, max_tokens: int) -> bool:
        """Generation stopped at the `max_tokens` the request sent, so the last call or the answer
        may be incomplete. vLLM 0.33.0 says finish_reason "length"; 0.32.0 (the TPU image) says
        "tool_calls" for a non-streamed call cut off there, with arguments its parser closed, so
        the token count is what both releases give. A raw call in the text that never reached
        `<tool_call|>` is cut off too."""
        if self.finish_reason == "length" or gemma4_syntax.NOTE_TRUNCATED in self.repaired:
            return True
        return self.completion_tokens is not None and self.completion_tokens >= max_tokens


def new_tool_call_id() -> str:
    # Same shape vLLM 0.33 uses (`chatcmpl-tool-<16 hex>`, §3.1); ids are opaque everywhere.
    return f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"


IdFactory = Callable[[], str]


def normalize_message(
    message: ChatCompletionMessage,
    *,
    finish_reason: str | None = None,
    id_factory: IdFactory = new_tool_call_id,
) -> NormalizedTurn:
    """Non-streaming: `completion.choices[0].message` → what to act on."""
    repaired: list[str] = []
    parser_calls: list[ToolCallRequest] = []
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if function is None:
            # A `custom` tool call: vLLM never sends one and we declare only functions.
            repaired.append(REPAIR_NON_FUNCTION_TOOL_CALL)
            continue
        call_id = call.id
        if not call_id:
            call_id = id_factory()
            repaired.append(REPAIR_MISSING_TOOL_CALL_ID)
        parser_calls.append(ToolCallRequest(call_id, function.name, function.arguments or ""))
    return _repair(message.content, read_reasoning(message), parser_calls, repaired, finish_reason, id_factory)


def normalize_choice(choice: Any, *, usage: Any = None, id_factory: IdFactory = new_tool_call_id) -> NormalizedTurn:
    """`completion.choices[0]` → turn, keeping `finish_reason` and the completion's token count
    (`completion.usage`), which together say whether it was cut off."""
    turn = normalize_message(choice.message, finish_reason=choice.finish_reason, id_factory=id_factory)
    turn.completion_tokens = getattr(usage, "completion_tokens", None)
    return turn


def read_reasoning(obj: Any) -> str | None:
    """`reasoning` from a message or delta: an undeclared field on the openai models (§3.3)."""
    extra = getattr(obj, "model_extra", None) or {}
    for key in _REASONING_KEYS:
        value = extra.get(key, getattr(obj, key, None))
        if isinstance(value, str):
            return value
    return None


class StreamAccumulator:
    """Feed every `ChatCompletionChunk` of one streamed reply; `result()` gives the turn.

    vLLM stream shape (§2.4, §3.2): a role chunk with `content:""`; per call a name chunk with
    `id`, `type`, `index` and no `arguments`; argument fragments carrying only `index`; several
    whole calls may share one chunk (index 0 and 1); a final `delta:{}` with `finish_reason`;
    maybe a usage chunk with `choices: []`. Only choice 0 is tracked (we never ask for n>1).
    """

    def __init__(self, *, id_factory: IdFactory = new_tool_call_id) -> None:
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._id_factory = id_factory
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.system_fingerprint: str | None = None  # rides on the finish or the usage chunk (§3.2)

    def feed(self, chunk: ChatCompletionChunk) -> None:
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.system_fingerprint:
            self.system_fingerprint = chunk.system_fingerprint
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                self._content.append(delta.content)
            reasoning = read_reasoning(delta)
            if reasoning:
                self._reasoning.append(reasoning)
            for fragment in delta.tool_calls or []:
                self._feed_tool_call(fragment)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def _feed_tool_call(self, fragment: Any) -> None:
        partial = self._calls.setdefault(fragment.index, _PartialCall())
        if fragment.id and not partial.id:
            # The id rides only on the first fragment of each index (§3.3).
            partial.id = fragment.id
        function = fragment.function
        if function is None:
            return
        if function.name:
            partial.name += function.name
        # `arguments` is absent (None) on vLLM 0.33's name chunk (§2.4): treat as "".
        partial.arguments.append(function.arguments or "")

    def preview(self) -> str:
        """Visible text so far, cleaned, for a live Slack update. A half-received special
        token at the end (`<|tool_ca`) is held back until it resolves."""
        text = "".join(self._content)
        cut = text.rfind("<")
        if cut >= 0 and ">" not in text[cut:]:
            text = text[:cut]
        return gemma4_syntax.parse_text(text).text

    def result(self) -> NormalizedTurn:
        repaired: list[str] = []
        calls: list[ToolCallRequest] = []
        for index in sorted(self._calls):
            partial = self._calls[index]
            call_id = partial.id
            if not call_id:
                call_id = self._id_factory()
                repaired.append(REPAIR_MISSING_TOOL_CALL_ID)
            calls.append(ToolCallRequest(call_id, partial.name, "".join(partial.arguments)))
        content = "".join(self._content)
        reasoning = "".join(self._reasoning)
        turn = _repair(content, reasoning or None, calls, repaired, self.finish_reason, self._id_factory)
        turn.completion_tokens = getattr(self.usage, "completion_tokens", None)
        return turn


@dataclass
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# The repairs shared by both paths


def _repair(
    content: str | None,
    reasoning: str | None,
    calls: list[ToolCallRequest],
    repaired: list[str],
    finish_reason: str | None,
    id_factory: IdFactory,
) -> NormalizedTurn:
    calls = list(calls)
    parsed = gemma4_syntax.parse_text(content or "")
    calls.extend(_synthesize(parsed.calls, id_factory, repaired, REPAIR_TOOL_CALL_IN_CONTENT))
    if _REASONING_NOTES & set(parsed.notes):
        repaired.append(REPAIR_REASONING_IN_CONTENT)
    if _MARKUP_NOTES & set(parsed.notes):
        repaired.append(REPAIR_MARKUP_IN_CONTENT)
    reasoning_text = _clean_reasoning(reasoning, calls, repaired, id_factory)
    reasoning_parts = [r for r in (reasoning_text, parsed.reasoning) if r]
    final_reasoning = "\n".join(reasoning_parts) or None
    visible = parsed.text or None
    if visible is None and not calls and final_reasoning:
        # #49717 / unclosed channel / bare `thought\n` answer: the reply is in the reasoning.
        visible = final_reasoning
        repaired.append(REPAIR_REASONING_AS_CONTENT)
    return NormalizedTurn(visible, calls, final_reasoning, list(dict.fromkeys(repaired)), finish_reason)


def _clean_reasoning(
    reasoning: str | None, calls: list[ToolCallRequest], repaired: list[str], id_factory: IdFactory
) -> str | None:
    """vLLM ends reasoning at `<|tool_call>` (§2.1), so a call should never sit in `reasoning`;
    if raw call text does, the model did emit the call token — run it rather than lose it."""
    if not reasoning:
        return None
    if gemma4_syntax.TOOL_CALL_OPEN not in reasoning:
        return reasoning.strip() or None
    parsed = gemma4_syntax.parse_text(reasoning)
    calls.extend(_synthesize(parsed.calls, id_factory, repaired, REPAIR_TOOL_CALL_IN_REASONING))
    parts = [p for p in (parsed.reasoning, parsed.text) if p]
    return "\n".join(parts) or None


def _synthesize(
    raw_calls: list[gemma4_syntax.RawToolCall], id_factory: IdFactory, repaired: list[str], label: str
) -> list[ToolCallRequest]:
    out = []
    for raw in raw_calls:
        out.append(ToolCallRequest(id_factory(), raw.name, raw.arguments_json()))
        repaired.append(label)
        repaired.extend(raw.notes)
    return out
