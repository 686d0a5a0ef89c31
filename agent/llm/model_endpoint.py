"""The mention agent's endpoint and client: resolved in agent/model_endpoint.py, shared with the model actions."""

from __future__ import annotations

from agent.model_endpoint import ModelEndpoint, openai_client, resolve_endpoint

__all__ = ["ModelEndpoint", "openai_client", "resolve_endpoint"]
