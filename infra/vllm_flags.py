"""The vLLM command line, built once from the deployment's model settings.

Everything that starts or imitates vLLM — the startup script on the TPU VM, the sandbox's
emulated endpoint, `tpubot render-startup-script` — takes its flags from `vllm_flags`, so the
served model can never disagree with what the bot believes it serves (design §4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# A release tag, never `nightly`/`latest`: what boots must be what was tested. v0.19.0 is the first
# vLLM release with Gemma 4 (architecture, `gemma4` tool-call and reasoning parsers).
DEFAULT_IMAGE = "vllm/vllm-tpu:v0.19.0"
DEFAULT_MM_LIMITS = '{"image":4,"audio":1}'


@dataclass(frozen=True)
class VllmConfig:
    model: str = "google/gemma-4-E2B-it"
    port: int = 8000
    image: str = DEFAULT_IMAGE
    max_model_len: int = 16384
    max_num_batched_tokens: int = 4096
    limit_mm_per_prompt: str = DEFAULT_MM_LIMITS  # compact JSON object
    tensor_parallel_size: int = 1
    # The Hugging Face commit of the model repository. vLLM applies the chat template that ships
    # with the weights (no --chat-template), so this pins the template too; the sandbox renders
    # Gemma 4's current template (infra/sandbox/vllm/chat_template.py). "" = the repo's main.
    revision: str = ""

    def __post_init__(self) -> None:
        limits = json.loads(self.limit_mm_per_prompt)
        if not isinstance(limits, dict):
            raise ValueError(f"limit_mm_per_prompt must be a JSON object, got {self.limit_mm_per_prompt!r}")


def vllm_flags(config: VllmConfig) -> list[str]:
    """`vllm serve MODEL` arguments after the model name (argv items, never a shell string).

    Gemma 4 needs vLLM's `gemma4` tool-call and reasoning parsers for tool use (gemma4-wire.md §2);
    chunked multimodal input is disabled because Gemma 4's audio/vision towers need whole items.
    """
    return [
        "--host", "0.0.0.0",
        "--port", str(config.port),
        "--max-model-len", str(config.max_model_len),
        "--max_num_batched_tokens", str(config.max_num_batched_tokens),
        "--limit-mm-per-prompt", json.dumps(json.loads(config.limit_mm_per_prompt), separators=(",", ":")),
        "--tensor-parallel-size", str(config.tensor_parallel_size),
        "--enable-auto-tool-choice",
        "--tool-call-parser", "gemma4",
        "--reasoning-parser", "gemma4",
        "--disable_chunked_mm_input",
    ] + (["--revision", config.revision] if config.revision else [])
