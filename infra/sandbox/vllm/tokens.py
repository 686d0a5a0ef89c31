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

Prompt tokens = tokens of `render_prompt(request)`: Gemma 4's chat template as rendered by
`chat_template.render`. An image counts what vLLM's Gemma 4 processor plans for its size
(<boi>, its soft tokens, <eoi>: images.py); audio and video parts a fixed 256 tokens each (a
placeholder, not Gemma's real count).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from typing import Any

from . import chat_template

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
# The prompt (chat_template.py renders Gemma 4's template)
# --------------------------------------------------------------------------------------------


def thinking_enabled(request: dict[str, Any]) -> bool:
    kwargs = request.get("chat_template_kwargs") or {}
    return bool(kwargs.get("enable_thinking"))


def render_prompt(request: dict[str, Any], image_tokens: Sequence[int] = ()) -> tuple[str, int]:
    """(Gemma 4 prompt text, media tokens) for a chat request; `image_tokens`: each image's cost, as
    loaded (images.py); other media parts cost MEDIA_PART_TOKENS each. The template's placeholders
    (`<|image|>`) are left out of the text: vLLM replaces each with the item's own tokens."""
    rendered = chat_template.render(request)
    text = rendered.text
    for placeholder in chat_template.MEDIA_PLACEHOLDERS.values():
        text = text.replace(placeholder, "")
    return text, sum(image_tokens) + (rendered.media_parts - len(image_tokens)) * MEDIA_PART_TOKENS


def prompt_ends_in_open_channel(request: dict[str, Any]) -> bool:
    """After a tool response with thinking on, 0.33.0 starts parsing in REASONING (§2.2)."""
    messages = request.get("messages") or []
    return thinking_enabled(request) and bool(messages) and messages[-1].get("role") == "tool"


def count_prompt_tokens(request: dict[str, Any], image_tokens: Sequence[int] = ()) -> int:
    text, media = render_prompt(request, image_tokens)
    return count_tokens(text) + media
