"""How to reach the Gemma endpoint (GEMMA_BASE_URL, timeouts, limits): a value built from Settings.

A root value type so Services can carry it without importing the mention agent that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODEL = "google/gemma-4-E2B-it"


@dataclass(frozen=True)
class ModelConfig:
    base_url: str = ""  # GEMMA_BASE_URL: a fixed OpenAI-compatible endpoint
    # What people are told base_url came from when it fails: `tpubot eval` sets it from --endpoint,
    # and a message naming GEMMA_BASE_URL would send them to a setting they never set.
    base_url_source: str = "GEMMA_BASE_URL"
    model: str = DEFAULT_MODEL
    api_key: str = "EMPTY"  # vLLM ignores it unless started with --api-key
    connect_timeout: float = 3.0
    read_timeout: float = 60.0  # one completion, streamed or not
    max_retries: int = 1  # openai retries connection errors, 408/409/429 and 5xx with backoff
    max_steps: int = 4
    stream: bool = True
    max_answer_tokens: int = 1024
    temperature: float = 0.3
    enabled: bool = True  # False: always the model-less path
    # What switched it off, as the person who did it would name it (a setting, or the shell's flag).
    off_by: str = "AGENT_USE_MODEL=false"
    max_images: int = 4  # images one prompt may hold: the endpoint's --limit-mm-per-prompt "image"
