"""The mention agent's endpoint and client (resolved in agent/actions/model_endpoint.py, shared with
the model actions), and how the answer's footer names who answered."""

from __future__ import annotations

from agent.actions.model_endpoint import (
    SANDBOX_FINGERPRINT_SUFFIX,
    ModelEndpoint,
    answered_by,
    degraded_reason_here,
    openai_client,
    resolve_endpoint,
)

__all__ = ["ModelEndpoint", "SANDBOX_FINGERPRINT_SUFFIX", "answered_by", "degraded_reason_here", "openai_client",
           "resolve_endpoint"]
