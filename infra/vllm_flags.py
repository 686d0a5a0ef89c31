"""The vLLM command line, built once from the deployment's model settings.

Everything that starts or imitates vLLM — the startup script on the TPU VM, the sandbox's
emulated endpoint, `tpubot render-startup-script` — takes its flags from `vllm_flags`, so the
served model can never disagree with what the bot believes it serves (design §4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# A release tag, never `nightly`/`latest`: what boots must be what was tested. Which versions can
# serve Gemma 4 E2B on a TPU at all is infra/vllm_images.py's to say.
from infra.vllm_images import DEFAULT_IMAGE

# Images only, and audio and video at 0 said out loud: on a TPU, tpu-inference 0.32.0 skips Gemma 4's
# audio tower weights at load and embeds `pixel_values` only (models/jax/gemma4_mm.py; video raises
# "Video not yet supported"), and a modality left out of --limit-mm-per-prompt gets vLLM's default
# of 999 (config/multimodal.py), so a request with audio would reach a model that cannot embed it.
DEFAULT_MM_LIMITS = '{"image":4,"audio":0,"video":0}'
TPU_UNSERVED_MODALITIES = ("audio", "video")
# google/gemma-4-E2B-it as several unrelated public projects pin it: its chat_template.jinja is a
# known blob (fbe3b59b…, reference/vllm-tpu.md §3); the weights are those of commit 70af34e2….
DEFAULT_MODEL_REVISION = "3e22461f65e89153144f8adb70e3b8c2cc9845a7"

# The most tokens one multimodal item of Gemma 4 can take, as vLLM's Gemma 4 processor plans them
# (`Gemma4ProcessingInfo.get_mm_max_tokens_per_item`, vllm/model_executor/models/gemma4_mm.py).
# With chunked multimodal input disabled, vLLM refuses to start when --max_num_batched_tokens is
# below the largest item of any modality the limits allow; a modality the limits leave out still
# counts (only an explicit 0 drops it), which is why the default limits need 2,496: a video.
GEMMA4_MAX_TOKENS_PER_ITEM = {
    "image": 280,  # vision_config.default_output_length
    # 30 s at 25 tokens/s, Gemma 4's audio length; unverified against the processor's
    # audio_seq_length, and below the video figure either way.
    "audio": 750,
    "video": 32 * (70 + 2 + 6),  # 32 frames × (70 soft tokens + <boi>/<eoi> + ~6 timestamp tokens)
}

# --max-num-seqs: vLLM 0.32.0 leaves it at 256 on TPU (only the batched-token default changes there).
# tpu-inference's own CI for E2B (.buildkite/models/google_gemma-4-E2B-it.yml) ran out of memory in
# the `jit_structured_decode_fn` precompile at 16,384 tokens / 256 sequences / 0.98 and runs 64 at
# 0.94; PR #3408 shows such a failure 28 minutes into start-up (reference/vllm-tpu.md §2). That CI
# runs on v6e, 32 GB of HBM a chip (reference/gcp-apis.md §8); a v5e chip has 16 GB. The precompile
# buffers that ran out grow with the sequence count (the sampler's logits over a 262,144-token
# vocabulary, per sequence), so half the chip gets half the count: 32 at the default 16,384-token
# context. Fewer sequences also mean fewer compile buckets, a shorter cold boot; a chat-ops bot
# rarely has 32 requests in flight.
V5E_MAX_NUM_SEQS = 32

# Above this --gpu-memory-utilization a v5e chip (16 GiB HBM) cannot allocate E2B's compiled
# programs: 0.92 boots (vLLM 0.32.0's default: the parser recorded in
# infra/sandbox/data/vllm-tpu-0.32.0-serve-args.json declares it), 0.95
# failed with RuntimeProgramAllocationFailure after a 691 s compile (reference/vllm-tpu.md §2).
# Measured on v5litepod-1.
V5E_MAX_GPU_MEMORY_UTILIZATION = 0.92


def image_limit(limit_mm_per_prompt: str) -> int:
    """How many images one prompt may hold under these limits (JSON): vLLM refuses a request with
    more ("At most N image(s) may be provided in one prompt.", HTTP 400). A limits object without
    "image" is taken as 1 image, the cautious reading (vLLM's own default for an absent modality
    is not relied on)."""
    return max(0, int(json.loads(limit_mm_per_prompt).get("image", 1)))


def explicit_mm_limits(limit_mm_per_prompt: str) -> dict[str, int]:
    """The limits (JSON) with every modality the TPU cannot serve said, at 0 where the setting left it
    out: vLLM's default for a missing modality is 999, not 0."""
    limits = json.loads(limit_mm_per_prompt)
    return {**limits, **{m: int(limits.get(m, 0)) for m in TPU_UNSERVED_MODALITIES}}


def largest_mm_item(limit_mm_per_prompt: str) -> tuple[str, int]:
    """(modality, tokens) of the largest multimodal item these limits (JSON) let a prompt hold."""
    limits = json.loads(limit_mm_per_prompt)
    allowed = [(tokens, modality) for modality, tokens in GEMMA4_MAX_TOKENS_PER_ITEM.items()
               if limits.get(modality, 1) > 0]
    tokens, modality = max(allowed, default=(0, ""))
    return modality, tokens


@dataclass(frozen=True)
class VllmConfig:
    model: str = "google/gemma-4-E2B-it"
    port: int = 8000
    image: str = DEFAULT_IMAGE
    max_model_len: int = 16384
    max_num_batched_tokens: int = 4096
    limit_mm_per_prompt: str = DEFAULT_MM_LIMITS  # compact JSON object
    max_num_seqs: int = V5E_MAX_NUM_SEQS
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None  # None: no flag, vLLM's own default
    # The Hugging Face commit of the model repository. vLLM applies the chat template that ships
    # with the weights (no --chat-template), so this pins the template too; the sandbox renders
    # that revision's template (infra/sandbox/vllm/chat_template.py). "" = the repo's main.
    revision: str = DEFAULT_MODEL_REVISION

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
        "--max-num-seqs", str(config.max_num_seqs),
        "--limit-mm-per-prompt", json.dumps(explicit_mm_limits(config.limit_mm_per_prompt), separators=(",", ":")),
        "--tensor-parallel-size", str(config.tensor_parallel_size),
        "--enable-auto-tool-choice",
        "--tool-call-parser", "gemma4",
        "--reasoning-parser", "gemma4",
        "--disable_chunked_mm_input",
    ] + (["--revision", config.revision] if config.revision else []) + (
        ["--gpu-memory-utilization", f"{config.gpu_memory_utilization:g}"]
        if config.gpu_memory_utilization is not None else [])
