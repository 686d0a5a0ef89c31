"""The mention agent's endpoint and client (resolved in agent/actions/model_endpoint.py, shared with
the model actions), and how the answer's footer names who answered."""

from __future__ import annotations

from agent.actions.model_endpoint import ModelEndpoint, openai_client, resolve_endpoint

__all__ = ["ModelEndpoint", "SANDBOX_FINGERPRINT_SUFFIX", "answered_by", "openai_client", "resolve_endpoint"]

SANDBOX_FINGERPRINT_SUFFIX = "-sandbox"  # infra/sandbox/vllm labels every response so


def answered_by(endpoint: ModelEndpoint, fingerprint: str | None) -> str:
    """Who answered, for the footer: the server's own `system_fingerprint` says when it is the
    sandbox model (a labelled heuristic, also when the local stack set the URL for us)."""
    if fingerprint and fingerprint.endswith(SANDBOX_FINGERPRINT_SUFFIX):
        if endpoint.source == "GEMMA_BASE_URL":
            return "the sandbox model (a heuristic stand-in, not Gemma)"
        return f"the sandbox model on {endpoint.source} (a heuristic stand-in, not Gemma)"
    return f"the model ({endpoint.source})"
