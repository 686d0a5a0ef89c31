"""Which Gemma endpoint answers a mention, and the `openai` client that talks to it.

Order: the channel's own READY lease (its vLLM on the TPU), else the fixed `GEMMA_BASE_URL`,
else any READY bot-managed endpoint in the workspace. None means the model-less path.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from openai import AsyncOpenAI

from agent.context import Actor, Services
from agent.model_config import ModelConfig
from infra.state.leases import LeaseState



@dataclass(frozen=True)
class ModelEndpoint:
    base_url: str
    source: str  # said to people: "this channel's TPU", "GEMMA_BASE_URL", "the TPU in <#C…>"


SANDBOX_FINGERPRINT_SUFFIX = "-sandbox"  # infra/sandbox/vllm labels every response so


def answered_by(endpoint: ModelEndpoint, fingerprint: str | None) -> str:
    """Who answered, for the footer: the server's own `system_fingerprint` says when it is the
    sandbox model (a labelled heuristic, also when the local stack set the URL for us)."""
    if fingerprint and fingerprint.endswith(SANDBOX_FINGERPRINT_SUFFIX):
        if endpoint.source == "GEMMA_BASE_URL":
            return "the sandbox model (a heuristic stand-in, not Gemma)"
        return f"the sandbox model on {endpoint.source} (a heuristic stand-in, not Gemma)"
    return f"the model ({endpoint.source})"


def _usable(url: str) -> bool:
    return url.startswith(("http://", "https://"))


async def resolve_endpoint(svc: Services, actor: Actor) -> ModelEndpoint | None:
    config = svc.model or ModelConfig()
    if not config.enabled:
        return None
    own = await svc.leases.get(actor.team, actor.channel)
    if own is not None and own.state == LeaseState.READY.value and _usable(own.endpoint):
        return ModelEndpoint(own.endpoint, "this channel's TPU")
    if _usable(config.base_url):
        return ModelEndpoint(config.base_url.rstrip("/"), "GEMMA_BASE_URL")
    for lease in await svc.leases.all():
        if lease.state == LeaseState.READY.value and _usable(lease.endpoint):
            return ModelEndpoint(lease.endpoint, f"the TPU in <#{lease.channel}>")
    return None


def openai_client(endpoint: ModelEndpoint, config: ModelConfig) -> AsyncOpenAI:
    timeout = httpx.Timeout(config.read_timeout, connect=config.connect_timeout)
    return AsyncOpenAI(base_url=endpoint.base_url, api_key=config.api_key, timeout=timeout,
                       max_retries=config.max_retries)
