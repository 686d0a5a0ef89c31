"""Scripted model turns and how a turn becomes engine output (tokens, stop token, finish reason).

A turn is the raw Gemma 4 text the model "generates" for one request, stop token excluded:
- `str`: tokenized by `tokens.split_tokens`; one token per engine step;
- `list[str]`: explicit engine-step chunks (each delivered in one step, like a stream interval),
  used to reproduce the chunkings of reference §2.6;
- `Turn(...)`: the above plus options;
- a callable `(request_json) -> any of the above`, for turns that depend on the request.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Union

from .gemma_text import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from .tokens import TOOL_RESPONSE_ID, TURN_END_ID, count_tokens, split_tokens

Stop = Literal["auto", "tool_response", "turn", "eos", "length"]


@dataclass
class Turn:
    text: str | None = None
    chunks: list[str] | None = None
    # False: the tool parser leaves raw `<|tool_call>…` text in `content` (a deployment where the
    # parser did not catch the call); None: the emulator's default.
    tool_parser: bool | None = None
    # How generation ended. "auto": `<|tool_response>` after a call, `<turn|>` after text, and
    # "length" when the text ends inside an unclosed call (only truncation does that).
    stop: Stop = "auto"
    # Streaming only: the connection is dropped after this many chunks (0: right after the role
    # chunk), with no finish chunk and no [DONE] — a proxy or a restarting pod in between.
    reset_after: int | None = None

    def step_chunks(self) -> list[str]:
        if self.chunks is not None:
            return [c for c in self.chunks if c]
        return split_tokens(self.text or "")


TurnSpec = Union[str, list, Turn, Callable[[dict], Any]]


def to_turn(spec: TurnSpec, request: dict[str, Any]) -> Turn:
    if callable(spec) and not isinstance(spec, Turn):
        spec = spec(request)
    if isinstance(spec, Turn):
        return spec
    if isinstance(spec, str):
        return Turn(text=spec)
    if isinstance(spec, list):
        return Turn(chunks=[str(c) for c in spec])
    raise TypeError(f"a scripted turn must be str, list[str], Turn or a callable, not {type(spec).__name__}")


class Script:
    """Thread-safe queue of turns: tests push from their thread, the server pops on its loop."""

    def __init__(self, turns: list[TurnSpec] | None = None) -> None:
        self._lock = threading.Lock()
        self._turns: collections.deque[TurnSpec] = collections.deque(turns or [])

    def push(self, *turns: TurnSpec) -> None:
        with self._lock:
            self._turns.extend(turns)

    def pop(self) -> TurnSpec | None:
        with self._lock:
            return self._turns.popleft() if self._turns else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._turns)


FILLER_WORDS = (" sandbox", " filler", " token", " bench")


@dataclass
class OutputPlan:
    chunks: list[str]  # text per delivering step
    ends: list[int]  # cumulative generated-token count at which each chunk is delivered
    total_tokens: int  # completion tokens, the stop token included
    finish_reason: str  # engine reason: "stop" or "length"
    stop_reason: int | None
    reset_after: int | None = None  # see Turn.reset_after

    @property
    def text(self) -> str:
        return "".join(self.chunks)


def plan_output(turn: Turn, *, max_tokens: int, ignore_eos: bool = False) -> OutputPlan:
    chunks = turn.step_chunks()
    sizes = [max(1, count_tokens(c)) for c in chunks]
    text = "".join(chunks)
    stop = turn.stop
    if stop == "auto":
        if text.rfind(TOOL_CALL_OPEN) > text.rfind(TOOL_CALL_CLOSE):
            stop = "length"
        elif text.rstrip().endswith(TOOL_CALL_CLOSE):
            stop = "tool_response"
        else:
            stop = "turn"
    if ignore_eos:
        # Bench traffic: exactly max_tokens tokens, stop tokens ignored, filler after the text.
        i = 0
        while sum(sizes) < max_tokens:
            chunks.append(FILLER_WORDS[i % len(FILLER_WORDS)])
            sizes.append(1)
            i += 1
        stop = "length"
    stop_token = {"tool_response": TOOL_RESPONSE_ID, "turn": TURN_END_ID, "eos": None}.get(stop)
    total = sum(sizes) + (0 if stop == "length" else 1)
    finish, stop_reason = ("length", None) if stop == "length" else ("stop", stop_token)
    if total > max_tokens:
        # Cut at max_tokens generated tokens; a chunk crossing the limit is cut by its pieces.
        kept, kept_sizes, used = [], [], 0
        for chunk, size in zip(chunks, sizes):
            if used + size <= max_tokens:
                kept.append(chunk)
                kept_sizes.append(size)
                used += size
                continue
            pieces = split_tokens(chunk)[: max_tokens - used]
            if pieces:
                kept.append("".join(pieces))
                kept_sizes.append(len(pieces))
                used += len(pieces)
            break
        chunks, sizes, total = kept, kept_sizes, used
        finish, stop_reason = "length", None
    ends, acc = [], 0
    for size in sizes:
        acc += size
        ends.append(acc)
    return OutputPlan(chunks=chunks, ends=ends, total_tokens=max(total, 1), finish_reason=finish, stop_reason=stop_reason,
                      reset_after=turn.reset_after)
