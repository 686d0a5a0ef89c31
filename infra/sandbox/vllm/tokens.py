"""A deterministic stand-in for Gemma 4's tokenizer, and a rough render of its chat template.

We do not ship the real tokenizer (it needs the HF weights repo). The estimate only has to be
deterministic, monotone in text length and in the right ballpark, because it drives three
visible things: `usage`, the max-model-len check, and how many engine steps a turn takes.

Rules (one token each):
- every Gemma 4 special token (`<|tool_call>`, `<|"|>`, `<|turn>`, … — §1.1 ids kept);
- a run of up to 8 letters, with one optional leading space (`" weather"` is one token);
- a run of up to 3 digits, with one optional leading space;
- one punctuation character, with one optional leading space;
- a run of newlines; any other single whitespace character.
English prose comes out at roughly 3.5–4.5 characters per token, close to Gemma's SentencePiece.

Prompt tokens = tokens of `render_prompt(messages, tools)`: a simplified Gemma 4 chat template
(§1.2, §1.4, §1.6) — system turn with tool declarations, `<|turn>user\n…<turn|>\n`, model
turns with re-rendered tool calls and tool responses, and the generation prompt. Image/audio
content parts count a fixed 256 tokens each (a placeholder, not Gemma's real soft-token count).
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

SPECIAL_TOKEN_IDS = {
    "<pad>": 0,
    "<eos>": 1,
    "<bos>": 2,
    "<|tool>": 46,
    "<tool|>": 47,
    "<|tool_call>": 48,
    "<tool_call|>": 49,
    "<|tool_response>": 50,
    "<tool_response|>": 51,
    '<|"|>': 52,
    "<|think|>": 98,
    "<|channel>": 100,
    "<channel|>": 101,
    "<|turn>": 105,
    "<turn|>": 106,
}
TOOL_RESPONSE_ID = 50  # stop token after a tool call
TURN_END_ID = 106  # stop token after a normal answer
VOCAB_SIZE = 262_144
MEDIA_PART_TOKENS = 256

_special = "|".join(re.escape(t) for t in sorted(SPECIAL_TOKEN_IDS, key=len, reverse=True))
_PIECE = re.compile(
    rf"{_special}| ?[^\W\d_]{{1,8}}| ?\d{{1,3}}| ?[^\w\s]| ?_|\n+|\s",
    re.DOTALL,
)


def split_tokens(text: str) -> list[str]:
    """Text -> token pieces (concatenating them gives the text back)."""
    return _PIECE.findall(text)


def count_tokens(text: str) -> int:
    return sum(1 for _ in _PIECE.finditer(text))


def token_id(piece: str) -> int:
    special = SPECIAL_TOKEN_IDS.get(piece)
    if special is not None:
        return special
    # Stable pseudo-ids above the special range.
    return 256 + zlib.crc32(piece.encode()) % (VOCAB_SIZE - 256)


def token_ids(text: str) -> list[int]:
    return [token_id(p) for p in split_tokens(text)]


# --------------------------------------------------------------------------------------------
# Simplified chat template
# --------------------------------------------------------------------------------------------

Q = '<|"|>'


def _fmt(value: Any, upper_types: bool = False) -> str:
    """Gemma's `format_argument`: bare keys, <|"|>strings<|"|>, sorted keys."""
    if isinstance(value, dict):
        items = []
        for k in sorted(value):
            v = value[k]
            if upper_types and k == "type" and isinstance(v, str):
                v = v.upper()
            items.append(f"{k}:{_fmt(v, upper_types)}")
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_fmt(v, upper_types) for v in value) + "]"
    if isinstance(value, str):
        return f"{Q}{value}{Q}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _text_of(content: Any) -> tuple[str, int]:
    """(text, extra media tokens) of a message's content (string or content-parts array)."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    text, media = "", 0
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text += str(part.get("text", ""))
            elif isinstance(part, dict):
                media += MEDIA_PART_TOKENS
            else:
                text += str(part)
    return text, media


def thinking_enabled(request: dict[str, Any]) -> bool:
    kwargs = request.get("chat_template_kwargs") or {}
    return bool(kwargs.get("enable_thinking"))


def render_prompt(request: dict[str, Any]) -> tuple[str, int]:
    """(approximate Gemma 4 prompt text, extra media tokens) for a chat request."""
    messages = list(request.get("messages") or [])
    tools = request.get("tools") or []
    thinking = thinking_enabled(request)
    out = ["<bos>"]
    media = 0
    system_text = ""
    if messages and messages[0].get("role") in ("system", "developer"):
        system_text, m = _text_of(messages.pop(0).get("content"))
        media += m
    if tools or thinking or system_text:
        out.append("<|turn>system\n")
        if thinking:
            out.append("<|think|>\n")
        out.append(system_text)
        for tool in tools:
            fn = tool.get("function", tool) if isinstance(tool, dict) else {}
            decl = {k: v for k, v in fn.items() if k != "name"}
            out.append(f"<|tool>declaration:{fn.get('name', '')}{_fmt(decl, upper_types=True)}<tool|>")
        out.append("<turn|>\n")
    call_names: dict[str, str] = {}
    in_model_turn = False
    for msg in messages:
        role = msg.get("role")
        text, m = _text_of(msg.get("content"))
        media += m
        if role == "assistant":
            if not in_model_turn:
                out.append("<|turn>model\n")
                in_model_turn = True
            out.append(text)
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                call_names[call.get("id", "")] = fn.get("name", "")
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except (TypeError, ValueError):
                    args = {}
                if not isinstance(args, dict):
                    args = {}
                out.append(f"<|tool_call>call:{fn.get('name', '')}{_fmt(args)}<tool_call|>")
            if not msg.get("tool_calls"):
                out.append("<turn|>\n")
                in_model_turn = False
        elif role == "tool":
            name = call_names.get(msg.get("tool_call_id", "")) or msg.get("name") or "unknown"
            # Tool results stay inside the model turn (§1.4).
            out.append(f"<|tool_response>response:{name}{{value:{Q}{text}{Q}}}<tool_response|>")
        else:
            if in_model_turn:
                out.append("<turn|>\n")
                in_model_turn = False
            out.append(f"<|turn>{'user' if role != 'system' else 'system'}\n{text}<turn|>\n")
    if in_model_turn:
        if thinking and messages and messages[-1].get("role") == "tool":
            out.append("<|channel>thought\n")  # the template opens the channel itself (#45834)
    else:
        out.append("<|turn>model\n")
        if not thinking:
            out.append("<|channel>thought\n<channel|>")
    return "".join(out), media


def prompt_ends_in_open_channel(request: dict[str, Any]) -> bool:
    """After a tool response with thinking on, 0.33.0 starts parsing in REASONING (§2.2)."""
    messages = request.get("messages") or []
    return thinking_enabled(request) and bool(messages) and messages[-1].get("role") == "tool"


def count_prompt_tokens(request: dict[str, Any]) -> int:
    text, media = render_prompt(request)
    return count_tokens(text) + media
