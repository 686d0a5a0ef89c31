"""Which vLLM release the sandbox answers as, and the one place where the releases differ.

The image `vllm/vllm-tpu:v0.32.0` serves vLLM 0.32.0; vLLM itself is at 0.33.0 (no TPU build of
it yet). Their gemma4 parsers are byte-identical; their chat-completion serving layers differ in
one answer (`../shared/conformance/vllm-tpu-0.32-gemma4-parser.json` against the 0.33 file):
a NON-streaming reply whose auto tool call was cut off at `max_tokens` says
`finish_reason: "tool_calls"` on 0.32.0 (its `serving.py` sets `auto_tools_called` whatever the
engine's finish) and `"length"` on 0.33.0. Streaming is step-for-step identical.
"""

from __future__ import annotations

from typing import Any

DEFAULT_SERVED_VERSION = "0.32.0"  # what the default image runs
SERVED_VERSIONS = ("0.32.0", "0.33.0")


def served_version_for(image: str) -> str:
    """The release the sandbox answers as for VLLM_IMAGE: 0.33.0's serving layer for an image that
    serves 0.33 or later, 0.32.0's otherwise (what infra/vllm_images.py cannot read, a mirror's own
    tag say, is taken to be the default's)."""
    from infra.vllm_images import served_vllm_version

    version = served_vllm_version(image)
    if version is not None and _keeps_length_on_cut_off_call(version):
        return "0.33.0"
    return DEFAULT_SERVED_VERSION


def check_served_version(version: str) -> str:
    if version not in SERVED_VERSIONS:
        raise ValueError(f"the sandbox vLLM answers as one of {', '.join(SERVED_VERSIONS)}, not {version!r}")
    return version


def _keeps_length_on_cut_off_call(version: str) -> bool:
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= (0, 33)


def non_streaming_finish(version: str, engine_finish: str, tool_calls: bool, tool_choice: Any) -> str:
    """`finish_reason` of a whole (non-streaming) chat completion.

    A named tool_choice never says "tool_calls"; a call that ended on its stop token does. A call
    cut off at max_tokens (engine "length") under auto tool choice: "tool_calls" on 0.32.0,
    "length" from 0.33.0 on. `required` is not the auto branch: it keeps the engine's reason.
    """
    if not tool_calls or isinstance(tool_choice, dict):
        return engine_finish
    if engine_finish == "stop":
        return "tool_calls"
    if tool_choice != "required" and not _keeps_length_on_cut_off_call(version):
        return "tool_calls"
    return engine_finish


def streaming_finish(engine_finish: str, tool_calls: bool, tool_choice: Any) -> str:
    """`finish_reason` of the last streamed chunk: the same on 0.32.0 and 0.33.0."""
    if engine_finish == "stop" and tool_calls and not isinstance(tool_choice, dict):
        return "tool_calls"
    return engine_finish
