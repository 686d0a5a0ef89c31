"""Which Gemma endpoint answers in a channel, and the `openai` client that talks to it.

Order: the channel's own READY lease (its vLLM on the TPU), else the fixed `GEMMA_BASE_URL`,
else any READY bot-managed endpoint in the workspace. None means the model-less path; a channel
whose own lease is DEGRADED (its model failed the boot's correctness checks) gets None too.

Here, in the actions room, because both the mention agent (agent/llm) and the model actions
(`ask_model`, `model_health` in agent/actions) resolve the same endpoint the same way. The
endpoint carries the key its callers must send, so a per-lease key is decided here, once; and
the redactor of one agent run, which knows every live lease's key (run_redactor).
"""

from __future__ import annotations

import functools
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.context import Actor, AgentDeps, ChannelDeps
from agent.lease.model_boot import degraded_reason
from agent.model_config import ModelConfig
from agent.redact import Redactor
from infra.model_keys import ModelKeyError
from infra.state.leases import Lease, LeaseState

if TYPE_CHECKING:
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelEndpoint:
    base_url: str
    source: str  # said to people: "this channel's TPU", "GEMMA_BASE_URL", "the TPU in <#C…>"
    api_key: str = ""  # what every request to this endpoint sends: a lease's own vLLM key (never shown, never in a prompt)


def _usable(url: str) -> bool:
    return url.startswith(("http://", "https://"))


async def resolve_endpoint(svc: AgentDeps, actor: Actor, *, include_degraded: bool = False) -> ModelEndpoint | None:
    """`include_degraded`: also the channel's own DEGRADED model (asked for by name, to debug it);
    by default a channel whose model failed its correctness checks gets no model at all, so its
    mentions are answered model-less and say why (`degraded_reason_here`), never by a model known to be wrong."""
    config = svc.model
    if not config.enabled:
        return None
    own = await svc.leases.get(actor.team, actor.channel)
    if own is not None and own.state == LeaseState.DEGRADED and _usable(own.endpoint):
        return await _lease_endpoint(svc, own, "this channel's TPU (DEGRADED)") if include_degraded else None
    if own is not None and own.state == LeaseState.READY and _usable(own.endpoint):
        return await _lease_endpoint(svc, own, "this channel's TPU")
    if _usable(config.base_url):
        return ModelEndpoint(config.base_url.rstrip("/"), config.base_url_source, config.api_key)
    for lease in await svc.leases.all():
        if lease.state == LeaseState.READY and _usable(lease.endpoint):
            return await _lease_endpoint(svc, lease, f"the TPU in <#{lease.channel}>")
    return None


async def degraded_reason_here(svc: ChannelDeps, actor: Actor) -> str | None:
    """What the channel's own DEGRADED lease failed (why its mentions get no model); None: not DEGRADED."""
    own = await svc.leases.get(actor.team, actor.channel)
    return degraded_reason(own) if own is not None and own.state == LeaseState.DEGRADED else None


async def _lease_endpoint(svc: AgentDeps, lease: Lease, source: str) -> ModelEndpoint:
    """The lease's vLLM with its per-lease key (issue 15), or the configured key where endpoints run without one."""
    try:
        key = await svc.model_keys.key(lease.lease_id) or ""
    except ModelKeyError:
        key = ""  # the call then answers 401, which the caller reports as the model being unavailable
    return ModelEndpoint(lease.endpoint, source, key or svc.model.api_key)


def openai_client(endpoint: ModelEndpoint, config: ModelConfig) -> AsyncOpenAI:
    """The one `openai` client every caller of a Gemma endpoint uses: the mention agent, `ask_model`,
    `model_health`, the eval's arms.

    `openai` is imported here, at the first call (and inside each function that catches its errors):
    importing it costs about half of a bot process's start-up CPU (its API types are hundreds of
    pydantic models), and a web process, or a worker no one mentions, never calls the model."""
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient, Timeout

    # openai's own Timeout: httpx's before openai 3, httpx2's since (an httpx one is converted per request)
    timeout = Timeout(config.read_timeout, connect=config.connect_timeout)
    return AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key or config.api_key, timeout=timeout,
                       max_retries=config.max_retries, http_client=DefaultAsyncHttpxClient(verify=_tls_context()))


@functools.cache
def _tls_context() -> ssl.SSLContext | bool:
    """The certificate check every model client of this process shares, built once as openai's HTTP
    client builds its default (SSL_CERT_FILE and SSL_CERT_DIR honoured). Each client used to build
    its own, reading the CA bundle again: ~20 ms of CPU per answer, a third of `tpubot eval`'s."""
    try:
        from httpx2 import create_ssl_context  # openai 3's HTTP client
    except ImportError:
        try:
            from httpx import create_ssl_context  # openai 1 and 2's (httpx 0.28+)
        except ImportError:
            return True  # an older httpx: each client builds its own, as before
    return create_ssl_context()


SANDBOX_FINGERPRINT_SUFFIX = "-sandbox"  # infra/sandbox/vllm labels every response so


def from_sandbox_model(fingerprint: str | None) -> bool:
    return fingerprint is not None and fingerprint.endswith(SANDBOX_FINGERPRINT_SUFFIX)


def endpoint_label(endpoint: ModelEndpoint, fingerprint: str | None) -> str:
    """Where an answer came from, said to people: the sandbox model says it is one whoever set
    the URL (the local stack sets GEMMA_BASE_URL for itself), else the endpoint's source."""
    if not from_sandbox_model(fingerprint):
        return endpoint.source
    if endpoint.source == "GEMMA_BASE_URL":
        return "the sandbox model (a heuristic stand-in, not Gemma)"
    return f"the sandbox model on {endpoint.source} (a heuristic stand-in, not Gemma)"


def answered_by(endpoint: ModelEndpoint, fingerprint: str | None) -> str:
    """Who answered, for the footer of a mention's answer."""
    label = endpoint_label(endpoint, fingerprint)
    return label if from_sandbox_model(fingerprint) else f"the model ({label})"


# The secret values one agent run must never show: the deployment's own (`Services.redactor`)
# plus the model API key of every live lease.
#
# A lease's key (infra/model_keys.py) is random text with no shape a pattern could find, and it
# can reach a run as data: vLLM logs its start-up args, key included, to Cloud Logging, and any
# channel's tool may read a log line that names another lease's key. So each run's redactor is
# built when the run starts, from the leases that exist then.


async def run_redactor(svc: AgentDeps) -> Redactor:
    """`svc.redactor` that also knows every live lease's model key (read now; cached per process)."""
    keys = []
    for lease in await svc.leases.all():
        try:
            key = await svc.model_keys.key(lease.lease_id)
        except ModelKeyError as error:
            # Not knowable now: the patterns still catch it in vLLM's own `'api_key': [...]` shape.
            log.warning("the model key of lease %s could not be read for redaction: %s", lease.lease_id, error.message)
            continue
        if key:
            keys.append(key)
    return svc.redactor.with_secrets(keys)
