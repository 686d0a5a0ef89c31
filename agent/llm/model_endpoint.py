"""The mention agent's endpoint and client: resolved in agent/actions/model_endpoint.py, shared with the model actions."""

from __future__ import annotations

from agent.actions.model_endpoint import ModelEndpoint, openai_client, resolve_endpoint

__all__ = ["ModelEndpoint", "openai_client", "resolve_endpoint"]
