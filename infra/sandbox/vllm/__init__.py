"""Emulated vLLM (0.32.0 or 0.33.0) OpenAI-compatible endpoint serving "google/gemma-4-E2B-it" (sandbox).

Public API: `VllmEmulator`, `LatencyModel`, `Turn`; see server.py for an example.
Modules: gemma_text (vLLM-side Gemma 4 parsing), gemma_args (call arguments, typed by the
schema), chat_template (the prompt as Gemma 4's template renders it, and what renders badly),
responses (JSON/SSE shapes), scheduler (latency and KV model), tokens (token estimate), script
(turns), heuristic, served_version (which release it answers as).
"""

from .scheduler import LatencyModel, simulate_closed_loop
from .script import Turn
from .served_version import DEFAULT_SERVED_VERSION, SERVED_VERSIONS
from .server import METRICS_MODES, MODEL_FAULTS, VllmEmulator

__all__ = ["DEFAULT_SERVED_VERSION", "LatencyModel", "METRICS_MODES", "MODEL_FAULTS", "SERVED_VERSIONS", "Turn",
           "VllmEmulator", "simulate_closed_loop"]
