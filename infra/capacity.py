"""How many tokens of KV cache a single TPU chip holds for Gemma 4 E2B under vLLM, and so how
many requests of a given context length can run at once before vLLM starts preempting.

The arithmetic is vLLM's own (TPU worker, `determine_available_memory`):

    KV pool bytes = HBM the runtime exposes × gpu_memory_utilization − resident bytes

where "resident" is everything vLLM's profiling run keeps on the chip besides the KV cache
(weights, plus the activation peak it measures). The pool is then cut into per-token slots of
`kv_bytes_per_token`.

Units, because they are easy to mix up:
- Spec pages quote HBM as "16 GB" (v5e) and "32 GB" (v6e). That label is not decimal gigabytes:
  16 GB decimal would be only 14.9 GiB. The chips carry 16 GiB / 32 GiB of HBM.
- What vLLM multiplies by the utilization is the runtime's `bytes_limit`, which on v5e-1 was
  measured at ~15.5 GiB (the runtime keeps the rest). For v6e-1 no measurement was made, so the
  nominal 32 GiB is used and its figures are an upper bound.
- Everything below is in bytes; GiB = 2**30 bytes, KiB = 2**10 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

GIB = 2**30
KIB = 2**10

# Measured on google/gemma-4-E2B-it served by vLLM on a v5e-1 (issue 7).
GEMMA4_E2B_RESIDENT_BYTES = round(8.97 * GIB)  # multimodal towers make it ~2x the 2B-parameter estimate
GEMMA4_E2B_KV_BYTES_PER_TOKEN = 18 * KIB
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default --gpu-memory-utilization
DEFAULT_MAX_MODEL_LEN = 16384  # the --max-model-len the startup script passes


@dataclass(frozen=True)
class AcceleratorProfile:
    """One TPU slice type as the planner sees it."""

    name: str  # what it is, beside the accelerator type people see first, e.g. "v5e, 1 chip"
    accelerator_type: str  # the name the TPU API accepts, e.g. "v5litepod-1"
    hbm_label: str  # as the spec page prints it, e.g. "16 GB"
    hbm_bytes: int  # what the runtime exposes to vLLM (its bytes_limit)
    hbm_source: str  # where hbm_bytes comes from
    chips: int = 1


V5E_1 = AcceleratorProfile(
    name="v5e, 1 chip",  # never "v5e-1": the TPU API and gcloud refuse that name
    accelerator_type="v5litepod-1",
    hbm_label="16 GB",
    hbm_bytes=round(15.5 * GIB),
    hbm_source="measured bytes_limit on v5litepod-1 (16 GiB physical, ~0.5 GiB kept by the runtime)",
)
V6E_1 = AcceleratorProfile(
    name="v6e, 1 chip",
    accelerator_type="v6e-1",
    hbm_label="32 GB",
    hbm_bytes=32 * GIB,
    hbm_source="nominal 32 GiB, not measured (upper bound)",
)
PROFILES: tuple[AcceleratorProfile, ...] = (V5E_1, V6E_1)


@dataclass(frozen=True)
class ModelFootprint:
    """What one served model costs in HBM."""

    name: str
    resident_bytes: int
    kv_bytes_per_token: int


GEMMA4_E2B = ModelFootprint(
    name="google/gemma-4-E2B-it",
    resident_bytes=GEMMA4_E2B_RESIDENT_BYTES,
    kv_bytes_per_token=GEMMA4_E2B_KV_BYTES_PER_TOKEN,
)


@dataclass(frozen=True)
class CapacityPlan:
    profile: AcceleratorProfile
    model: ModelFootprint
    gpu_memory_utilization: float
    context_tokens: int
    usable_bytes: int  # hbm × utilization
    kv_pool_bytes: int
    kv_pool_tokens: int
    max_concurrent_requests: int  # requests whose full context fits in the pool at once

    @property
    def hbm_gib(self) -> float:
        return self.profile.hbm_bytes / GIB

    @property
    def usable_gib(self) -> float:
        return self.usable_bytes / GIB

    @property
    def resident_gib(self) -> float:
        return self.model.resident_bytes / GIB

    @property
    def kv_pool_gib(self) -> float:
        return self.kv_pool_bytes / GIB


def usable_bytes(hbm_bytes: int, gpu_memory_utilization: float) -> int:
    """vLLM's cap: the share of HBM it allows itself (it truncates to whole bytes)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    return int(hbm_bytes * gpu_memory_utilization)


def kv_pool_bytes(hbm_bytes: int, gpu_memory_utilization: float, resident_bytes: int) -> int:
    """Bytes left for the KV cache; 0 when the model does not fit (vLLM then refuses to start)."""
    return max(usable_bytes(hbm_bytes, gpu_memory_utilization) - resident_bytes, 0)


def kv_pool_tokens(pool_bytes: int, kv_bytes_per_token: int) -> int:
    if kv_bytes_per_token <= 0:
        raise ValueError("kv_bytes_per_token must be positive")
    return pool_bytes // kv_bytes_per_token


def max_concurrent_requests(pool_tokens: int, context_tokens: int) -> int:
    """Requests that can each hold `context_tokens` of KV at the same time. Beyond this vLLM
    preempts (and later recomputes) running requests, which is the throughput wall."""
    if context_tokens <= 0:
        raise ValueError("context_tokens must be positive")
    return pool_tokens // context_tokens


def plan(
    profile: AcceleratorProfile = V5E_1,
    model: ModelFootprint = GEMMA4_E2B,
    *,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    context_tokens: int = DEFAULT_MAX_MODEL_LEN,
) -> CapacityPlan:
    usable = usable_bytes(profile.hbm_bytes, gpu_memory_utilization)
    pool = kv_pool_bytes(profile.hbm_bytes, gpu_memory_utilization, model.resident_bytes)
    tokens = kv_pool_tokens(pool, model.kv_bytes_per_token)
    return CapacityPlan(
        profile=profile,
        model=model,
        gpu_memory_utilization=gpu_memory_utilization,
        context_tokens=context_tokens,
        usable_bytes=usable,
        kv_pool_bytes=pool,
        kv_pool_tokens=tokens,
        max_concurrent_requests=max_concurrent_requests(tokens, context_tokens),
    )


def footprint(
    *, resident_gib: float | None = None, kv_kib_per_token: float | None = None, base: ModelFootprint = GEMMA4_E2B
) -> ModelFootprint:
    """The default model footprint with some measurements replaced (CLI options)."""
    changes: dict[str, Any] = {}
    if resident_gib is not None:
        changes["resident_bytes"] = round(resident_gib * GIB)
    if kv_kib_per_token is not None:
        changes["kv_bytes_per_token"] = round(kv_kib_per_token * KIB)
    return replace(base, **changes)
