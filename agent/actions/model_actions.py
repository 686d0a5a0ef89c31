"""ask_model and model_health: the channel's model asked directly, and how it is doing (read-only).

Both resolve the endpoint the mention agent uses (agent/actions/model_endpoint.py: the channel's READY
TPU first) and talk to it through the same `openai` client, with the key the endpoint carries.
`ask_model` returns the answer with the benchmark's timing definitions (infra/model_query.py);
`model_health` adds the server's own view: model id, vLLM version, KV cache use and queue.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from agent.actions.lease_actions import NoArgs
from agent.actions.run_context import RunContext
from agent.actions.registry import ActionResult, ActionStatus, action
from agent.context import AgentDeps
from agent.actions.model_endpoint import ModelEndpoint, endpoint_label, openai_client, resolve_endpoint
from agent.redact import redact
from infra.images import PreparedImage, image_content_parts
from infra.local_files import LocalFileError
from infra.model_query import TimedAnswer, ask_timed
from infra.vllm_metrics import EngineGauges, read_gauges, read_version, version_from_fingerprint

if TYPE_CHECKING:
    import openai

NO_ENDPOINT = ("No model to ask: this channel has no READY TPU (and no GEMMA_BASE_URL is set). `provision` "
               "(`/tpu up`) first, then try again once `status` says READY.")
MAX_PROMPT_CHARS = 8000
MAX_IMAGE_ARGS = 16  # paths accepted at all; the endpoint's --limit-mm-per-prompt decides how many are read


class AskModelArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(..., min_length=1, max_length=MAX_PROMPT_CHARS, description="what to ask the model")
    max_tokens: int = Field(256, ge=1, le=2048, description="most tokens the answer may have")
    images: list[str] = Field(default_factory=list, max_length=MAX_IMAGE_ARGS,
                              description="image files (PNG, JPEG, WebP, GIF or BMP) under the working directory "
                                          "to show the model with the prompt (`tpubot mcp` only); at most the "
                                          "endpoint's per-prompt image limit are read, in the order given")


def timing_line(answer: TimedAnswer) -> str:
    tpot = "TPOT n/a (one token)" if answer.tpot_ms is None else f"TPOT {answer.tpot_ms:.1f} ms"
    return (f"TTFT {answer.ttft_ms:.0f} ms · {tpot} · {answer.tokens_per_s:.1f} tok/s · "
            f"{answer.prompt_tokens} prompt + {answer.output_tokens} output tokens")


def endpoint_data(endpoint: ModelEndpoint) -> dict:
    return {"endpoint": endpoint.base_url, "source": endpoint.source}


@action("ask_model", "Ask this channel's model a question directly and get its answer with timings: time to "
        "first token (TTFT), time per output token (TPOT), tokens/s and token counts.", AskModelArgs)
async def ask_model(svc: AgentDeps, run: RunContext, args: AskModelArgs) -> ActionResult:
    endpoint = await resolve_endpoint(svc, run.actor, include_degraded=True)
    if endpoint is None:
        return ActionResult.refused(NO_ENDPOINT, {"endpoint": None})
    config = svc.model
    images, lines = await asyncio.to_thread(read_images, svc, args.images, config.max_images)
    content: str | list = redact(args.prompt)
    if images:
        content = [{"type": "text", "text": content}, *image_content_parts(images, [i.name for i in images])]
    async with openai_client(endpoint, config) as client:
        answer = await ask_timed(client, config.model, [{"role": "user", "content": content}],
                                 max_tokens=args.max_tokens, temperature=config.temperature)
    data = {**endpoint_data(endpoint), "model": answer.model or config.model,
            "images_read": [image.name for image in images], "image_notes": lines}
    if images:
        lines.insert(0, f"Read {len(images)} image{'s' * (len(images) != 1)}: "
                        f"{', '.join(image.describe() for image in images)}.")
    if not answer.ok:
        return ActionResult.refused(f"The model at {endpoint.base_url} ({endpoint.source}) did not answer: "
                                    f"{answer.error}", {**data, "error": answer.error})
    text = redact(answer.text) or "(the model returned no text)"
    cut = " (cut at max_tokens)" if answer.finish_reason == "length" else ""
    via = endpoint_label(endpoint, answer.system_fingerprint)
    text = "\n".join([*lines, text]) if lines else text
    return ActionResult.done(f"{text}\n\n— {answer.model} via {via}: {timing_line(answer)}{cut}",
                             {**data, "answer": text, "finish_reason": answer.finish_reason, **answer.timings()})


def read_images(svc: AgentDeps, paths: list[str], limit: int) -> tuple[list[PreparedImage], list[str]]:
    """The images at `paths` (at most `limit`), and a line for each that was not read and why."""
    images: list[PreparedImage] = []
    lines: list[str] = []
    for path in paths:
        if len(images) >= limit:
            lines.append(f"Not read: {path}: the model takes at most {limit} image{'s' * (limit != 1)} per "
                         "prompt (--limit-mm-per-prompt).")
            continue
        try:
            images.append(svc.local_files.read_image(path))
        except LocalFileError as error:
            lines.append(f"Not read: {error}")
    return images, lines


@action("model_health", "Check this channel's model endpoint: model id, vLLM version, KV cache use, running "
        "and waiting requests, and a one-token round trip.", NoArgs)
async def model_health(svc: AgentDeps, run: RunContext, args: NoArgs) -> ActionResult:
    endpoint = await resolve_endpoint(svc, run.actor, include_degraded=True)
    if endpoint is None:
        return ActionResult.refused(NO_ENDPOINT, {"endpoint": None})
    config = svc.model
    async with openai_client(endpoint, config) as client:
        models, version, gauges = await asyncio.gather(served_models(client), read_version(endpoint.base_url),
                                                       read_gauges(endpoint.base_url))
        # After the readings, so the gauges do not count our own request.
        probe = await ask_timed(client, config.model, [{"role": "user", "content": "Say OK."}], max_tokens=1)
    version = version or version_from_fingerprint(probe.system_fingerprint)
    data = {**endpoint_data(endpoint), "models": models if isinstance(models, list) else [],
            "vllm_version": version or None, "kv_cache_usage": gauges.kv_usage,
            "requests_running": gauges.running, "requests_waiting": gauges.waiting,
            "round_trip_ok": probe.ok, "round_trip_ms": round(probe.e2el_ms, 1) if probe.ok else None}
    lines = [f"*Endpoint:* {endpoint.base_url} ({endpoint.source})"]
    lines.append(f"*Model:* {', '.join(models)}" if isinstance(models, list) else f"*Model:* unknown ({models})")
    lines.append(f"*vLLM:* {version or 'version not reported'}")
    lines.append(engine_line(gauges))
    lines.append(f"*One-token round trip:* {probe.e2el_ms:.0f} ms (TTFT {probe.ttft_ms:.0f} ms)" if probe.ok
                 else f"*One-token round trip failed:* {probe.error}")
    ok = probe.ok and isinstance(models, list)
    return ActionResult(ActionStatus.done_if(ok), "\n".join(lines), data)


async def served_models(client: openai.AsyncOpenAI) -> list[str] | str:
    """The model ids `/v1/models` lists, or why it could not be read."""
    import openai  # at the call, as in openai_client

    try:
        page = await client.models.list()
    except openai.APIStatusError as error:
        return f"HTTP {error.status_code} from /v1/models"
    except openai.APIError as error:
        return type(error).__name__
    return [model.id for model in page.data]


def engine_line(gauges: EngineGauges) -> str:
    if gauges.error:
        return f"*Engine:* metrics unavailable ({gauges.error})"

    def count(value: float | None) -> str:
        return "?" if value is None else f"{value:g}"

    kv = "?" if gauges.kv_usage is None else f"{gauges.kv_usage * 100:.1f}%"
    return f"*Engine:* KV cache {kv} used · {count(gauges.running)} running · {count(gauges.waiting)} waiting"
