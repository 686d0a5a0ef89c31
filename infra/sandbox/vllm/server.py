"""`VllmEmulator`: an aiohttp server that speaks vLLM 0.33.0's OpenAI-compatible API for Gemma 4.

The model side is raw Gemma 4 text per turn (scripted, or the labelled heuristic); the server
side turns it into what `vllm serve google/gemma-4-E2B-it --enable-auto-tool-choice
--tool-call-parser gemma4 --reasoning-parser gemma4` returns, with timing from one shared
engine simulation (scheduler.py). `served_version` is the vLLM release it answers as
(served_version.py: 0.32.0, what the default image runs, or 0.33.0).

Model faults (`model_fault`, one of MODEL_FAULTS; set at construction or flipped at runtime, like
`metrics_mode`), for the boot probe's "READY means correct" checks:
- "garbage_text": every chat completion is word salad (what the torchax path,
  `MODEL_IMPL_TYPE=vllm`, gave for E2B before tpu-inference #3406): the request's turn is still
  consumed, its text replaced; no tool call is ever parsed;
- "tool_calls_as_text": a server started without `--enable-auto-tool-choice --tool-call-parser
  gemma4` (the reasoning parser still on): vLLM keeps `skip_special_tokens` off for the
  reasoning parser, so `content` holds the raw `<|tool_call>call:…{…}<tool_call|>` text,
  `tool_calls` is empty and `finish_reason` is "stop" (0.33.0 `message_assembly.keeps_tool_calls`
  is false without auto tools; no 400 for `tool_choice: "auto"`).

    with VllmEmulator(latency=LatencyModel.instant(), script=[
        '<|tool_call>call:status{channel:<|"|>C1<|"|>}<tool_call|>',
        "All good.",
    ]) as emu:
        client = OpenAI(base_url=emu.base_url, api_key="x")
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import hashlib
import secrets
import socket
import threading
import time
from typing import Any

from aiohttp import web

from infra.vllm_flags import DEFAULT_MM_LIMITS, image_limit

from . import chat_template, heuristic
from .images import ImagePartError, SeenImage, check_images
from .gemma_text import StreamParser, parse_output
from .responses import (
    ChunkWriter,
    Usage,
    chat_completion,
    error_body,
    system_fingerprint,
    new_request_id,
    text_completion,
    text_completion_chunk,
    tool_call_body,
)
from .scheduler import AsyncEngine, LatencyModel, Sequence
from .served_version import DEFAULT_SERVED_VERSION, check_served_version, non_streaming_finish, streaming_finish
from .script import OutputPlan, Script, Turn, TurnSpec, plan_output, to_turn
from .tokens import count_prompt_tokens, count_tokens, prompt_ends_in_open_channel, token_ids, render_prompt

log = logging.getLogger(__name__)

METRICS_MODES = ("ok", "unreachable", "garbage", "not_found")
MODEL_FAULTS = ("none", "garbage_text", "tool_calls_as_text")  # see the module docstring
# Deterministic word salad in the shape of a broken serving path's output (mixed scripts,
# repeated fragments, no sentence): it must never pass for an answer.
GARBAGE_TEXT = " ".join(["ocompañ", "ериа", "tiếp", "izzazione", "ocompañ", "}}>", "ериа", "кого", "ocompañ",
                         "tiếp", "<unused17>", "nelle", "ериа", "ocompañ"] * 2)


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _json_error(message: str, *, status: int = 400, err_type: str = "BadRequestError", param: str | None = None):
    return web.json_response(error_body(message, err_type=err_type, code=status, param=param), status=status)


def _merge_deltas(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = dict(a or {})
    for key, value in (b or {}).items():
        if key in ("content", "reasoning"):
            out[key] = out.get(key, "") + value
        elif key == "tool_calls":
            out[key] = out.get(key, []) + value
    return out


class _Counters:
    def __init__(self) -> None:
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.prompt_tokens = 0
        self.generation_tokens = 0


def _reset(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
    """Drop the connection mid-stream, as a proxy reset does: no finish chunk, no [DONE]."""
    if request.transport is not None:
        request.transport.abort()
    return resp


class VllmEmulator:
    """Emulated vLLM endpoint. `start()` returns the base URL (ending in `/v1`)."""

    def __init__(
        self,
        model: str = "google/gemma-4-E2B-it",
        latency: LatencyModel | None = None,
        script: list[TurnSpec] | None = None,
        label: str = "sandbox model",
        max_model_len: int = 16384,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tool_parser: bool = True,
        api_key: str | None = None,
        sock: socket.socket | None = None,
        served_version: str = DEFAULT_SERVED_VERSION,
        model_fault: str = "none",
        limit_mm_per_prompt: str = DEFAULT_MM_LIMITS,
    ) -> None:
        self.model = model
        self.image_limit = image_limit(limit_mm_per_prompt)  # `--limit-mm-per-prompt`'s "image"
        self.served_version = check_served_version(served_version)  # the vLLM release answered as
        self.fingerprint = system_fingerprint(self.served_version)
        if model_fault not in MODEL_FAULTS:
            raise ValueError(f"model_fault must be one of {', '.join(MODEL_FAULTS)}, not {model_fault!r}")
        self.model_fault = model_fault  # see MODEL_FAULTS; flip at runtime for boot-probe tests
        # A socket already bound to (host, port) and held since the address was chosen: serving on
        # it means no other process can take the address in between (sandbox nodes, node_models.py).
        self._sock = sock
        self.latency = latency or LatencyModel()
        self.script = Script(script)
        self.label = label
        self.max_model_len = max_model_len
        self.host = host
        self.port = port
        # False: raw tool-call text stays in content for every turn
        self.tool_parser = tool_parser
        self.api_key = api_key  # `vllm serve --api-key`: /v1/* answers 401 without `Authorization: Bearer KEY`
        self.metrics_mode = "ok"  # see METRICS_MODES; flip at runtime for idle-clock tests
        self.requests: list[dict[str, Any]] = []  # every accepted request body, in arrival order
        self.images: list[list[SeenImage]] = []  # the images of each accepted chat request, as loaded
        # (index into `requests`, what Gemma 4's chat template renders badly in that request)
        self.prompt_problems: list[tuple[int, str]] = []
        self.counters = _Counters()
        self.engine: AsyncEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._ready = threading.Event()
        self._closed = False

    # ---------------------------------------------------------------- lifecycle

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("emulator not started")
        return self._base_url

    def start(self) -> str:
        """Serve on a background thread with its own event loop; returns `http://host:port/v1`."""
        if self._thread is not None:
            return self.base_url
        if self._closed:
            raise RuntimeError("emulator already stopped")
        ready = self._ready
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:  # surface bind errors to the caller
                failure.append(exc)
                ready.set()
                return
            loop.call_soon(ready.set)  # from inside the running loop: a stop() after it always lands
            loop.run_forever()
            loop.run_until_complete(self.stop_async())
            loop.close()

        self._thread = threading.Thread(target=run, name="vllm-emulator", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            self._thread = None
            raise failure[0]
        return self.base_url

    def stop(self) -> None:
        """Stop serving; also when called while `start` is still starting (it is then waited for),
        and for good: a stopped emulator does not start again."""
        self._closed = True
        if self._thread is None:
            if self._sock is not None:
                self._sock.close()
            return
        self._ready.wait(30)
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._thread = None

    def __enter__(self) -> VllmEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def start_async(self) -> str:
        """Serve on the running event loop (for callers that already have one)."""
        self.engine = AsyncEngine(self.latency)
        self.engine.start()
        self._runner = web.AppRunner(self.create_app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        if self._sock is not None:
            site: web.BaseSite = web.SockSite(self._runner, self._sock, backlog=1024)
        else:
            site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.port = port
        self._base_url = f"http://{host}:{port}/v1"
        return self._base_url

    async def stop_async(self) -> None:
        if self.engine:
            await self.engine.stop()
        if self._runner:
            await self._runner.cleanup()

    def create_app(self) -> web.Application:
        middlewares = [self._authenticate] if self.api_key else []
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=middlewares)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/metrics", self._metrics)
        return app

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """vLLM's AuthenticationMiddleware (entrypoints/openai/server_utils.py): only `/v1…` is guarded
        (`/health`, `/metrics`, `/tokenize` stay open), OPTIONS passes, the Bearer token is compared by
        SHA-256 digest, and a miss is `401 {"error": "Unauthorized"}`."""
        if request.method == "OPTIONS" or not request.path.startswith("/v1"):
            return await handler(request)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        expected = hashlib.sha256(str(self.api_key).encode()).digest()
        if scheme.lower() != "bearer" or not secrets.compare_digest(hashlib.sha256(token.encode()).digest(), expected):
            # starlette's JSONResponse renders compact JSON: exactly these bytes.
            return web.Response(text='{"error":"Unauthorized"}', status=401, content_type="application/json")
        return await handler(request)

    # ---------------------------------------------------------------- scripting

    def push_turns(self, *turns: TurnSpec) -> None:
        """Queue raw Gemma turns; each request consumes one. Empty queue → the heuristic."""
        self.script.push(*turns)

    @property
    def pending_turns(self) -> int:
        return len(self.script)

    def pause_engine(self) -> None:
        """Stop advancing engine steps (requests keep queueing) until `resume_engine()`."""
        assert self._loop is not None and self.engine is not None
        self._loop.call_soon_threadsafe(self.engine.pause)

    def resume_engine(self) -> None:
        assert self._loop is not None and self.engine is not None
        self._loop.call_soon_threadsafe(self.engine.resume)

    def engine_stats(self) -> dict[str, float]:
        """Simulated-time figures of the engine (deterministic, unlike wall time)."""
        assert self.engine is not None
        st = self.engine.stats
        return {
            "sim_seconds": self.engine.sim_now,
            "busy_sim_seconds": st.busy_sim_seconds,
            "steps": st.steps,
            "preemptions": st.preemptions,
            "generated_tokens": st.generated_tokens,
            "running": self.engine.num_running,
            "waiting": self.engine.num_waiting,
        }

    def _next_turn(self, body: dict[str, Any], images: list[SeenImage]) -> Turn:
        spec = self.script.pop()
        turn = Turn(text=heuristic.respond(body, self.label, images)) if spec is None else to_turn(spec, body)
        if self.model_fault == "garbage_text":
            return Turn(text=GARBAGE_TEXT, stop="turn")
        if self.model_fault == "tool_calls_as_text":
            return dataclasses.replace(turn, tool_parser=False)
        return turn

    # ---------------------------------------------------------------- validation

    async def _read_json(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as exc:
            raise _BadRequest(f"Invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise _BadRequest("The request body must be a JSON object.")
        return body

    def _check_model(self, body: dict[str, Any]) -> web.Response | None:
        name = body.get("model")
        if name is not None and name != self.model:
            return _json_error(
                f"The model `{name}` does not exist.", status=404, err_type="NotFoundError", param="model"
            )
        return None

    def _budget(self, body: dict[str, Any], prompt_tokens: int) -> int:
        if prompt_tokens + 1 > self.max_model_len:
            raise _BadRequest(
                f"This model's maximum context length is {self.max_model_len} tokens. However, your prompt "
                f"contains {prompt_tokens} input tokens, which leaves no room for output. Please reduce "
                f"the length of the input messages. (sandbox model: token counts are estimates)"
            )
        requested = body.get("max_completion_tokens")
        if requested is None:
            requested = body.get("max_tokens")
        if requested is None:
            return self.max_model_len - prompt_tokens
        if not isinstance(requested, int) or requested < 1:
            raise _BadRequest("max_tokens must be at least 1, got {}.".format(requested), param="max_tokens")
        if prompt_tokens + requested > self.max_model_len:
            raise _BadRequest(
                f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This model's maximum "
                f"context length is {self.max_model_len} tokens and your request has {prompt_tokens} input "
                f"tokens ({requested} > {self.max_model_len} - {prompt_tokens}).",
                param="max_tokens",
            )
        return requested

    @staticmethod
    def _validate_chat(body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest("messages must be a non-empty list.", param="messages")
        if body.get("tool_choice") is not None and not body.get("tools"):
            raise _BadRequest("When using `tool_choice`, `tools` must be set.", param="tool_choice")
        if body.get("stream_options") is not None and not body.get("stream"):
            raise _BadRequest("Stream options can only be defined when `stream=True`.", param="stream_options")

    def _note_prompt_problems(self, body: dict[str, Any]) -> None:
        """vLLM renders whatever it is sent; a history the template renders badly is only
        visible in the model's answers, so the sandbox records it (and logs it)."""
        for problem in chat_template.render(body).problems:
            self.prompt_problems.append((len(self.requests) - 1, problem))
            log.warning("sandbox vLLM: request %d renders badly: %s", len(self.requests) - 1, problem)

    # ---------------------------------------------------------------- engine plumbing

    async def _run_sequence(self, prompt_tokens: int, plan: OutputPlan):
        """Submit to the shared engine; yields (generated, finished, text delivered) per engine step."""
        assert self.engine is not None
        seq = Sequence(prompt_len=prompt_tokens, output_len=plan.total_tokens)
        wake = asyncio.Event()
        seq.on_progress = wake.set
        await self.engine.request_overhead()
        self.engine.submit(seq)
        delivered = 0  # chunks of the plan already yielded
        try:
            while True:
                await wake.wait()
                wake.clear()
                while seq.progress:
                    generated, _t = seq.progress.popleft()
                    done = generated >= seq.output_len
                    text = ""
                    while delivered < len(plan.chunks) and plan.ends[delivered] <= generated:
                        text += plan.chunks[delivered]
                        delivered += 1
                    yield generated, done, text
                    if done:
                        return
        finally:
            if not seq.finished:
                self.engine.abort(seq)
                self.counters.success["abort"] += 1

    def _account(self, prompt_tokens: int, plan: OutputPlan) -> None:
        self.counters.success[plan.finish_reason] = self.counters.success.get(plan.finish_reason, 0) + 1
        self.counters.prompt_tokens += prompt_tokens
        self.counters.generation_tokens += plan.total_tokens

    # ---------------------------------------------------------------- /v1/chat/completions

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._read_json(request)
            missing = self._check_model(body)
            if missing is not None:
                return missing
            self._validate_chat(body)
            images = check_images(body, self.image_limit)
            prompt_tokens = count_prompt_tokens(body, [image.prompt_tokens for image in images])
            max_tokens = self._budget(body, prompt_tokens)
        except _BadRequest as exc:
            return _json_error(str(exc), param=exc.param)
        except ImagePartError as exc:
            return _json_error(str(exc))
        self.requests.append(body)
        self.images.append(images)
        self._note_prompt_problems(body)
        model = body.get("model") or self.model
        ignore_eos = bool(body.get("ignore_eos"))
        turn = Turn(text="") if ignore_eos and not len(self.script) else self._next_turn(body, images)
        plan = plan_output(turn, max_tokens=max_tokens, ignore_eos=ignore_eos)
        tool_parser = self.tool_parser if turn.tool_parser is None else turn.tool_parser
        parse_kwargs = dict(
            tools=body.get("tools"),
            tool_choice=body.get("tool_choice", "auto"),
            tool_parser=tool_parser,
            start_in_reasoning=prompt_ends_in_open_channel(body),
        )
        request_id = new_request_id()
        created = int(time.time())
        if body.get("stream"):
            return await self._chat_stream(request, body, model, request_id, created, prompt_tokens, plan, parse_kwargs)
        async for _step in self._run_sequence(prompt_tokens, plan):
            pass
        self._account(prompt_tokens, plan)
        parsed = parse_output(plan.text, **parse_kwargs)
        tool_choice = body.get("tool_choice", "auto")
        forced = isinstance(tool_choice, dict) or tool_choice == "required"
        content = parsed.content
        if content is None and parsed.tool_calls and forced:
            content = ""
        finish = non_streaming_finish(self.served_version, plan.finish_reason, bool(parsed.tool_calls), tool_choice)
        reasoning = parsed.reasoning if body.get("include_reasoning", True) else None
        usage = Usage(prompt_tokens, plan.total_tokens, count_tokens(parsed.reasoning or ""))
        return web.json_response(
            chat_completion(
                request_id=request_id,
                created=created,
                model=model,
                content=content,
                reasoning=reasoning,
                tool_calls=[tool_call_body(c.id, c.name, c.arguments) for c in parsed.tool_calls],
                finish_reason=finish,
                stop_reason=plan.stop_reason,
                usage=usage,
                fingerprint=self.fingerprint,
            )
        )

    async def _chat_stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        model: str,
        request_id: str,
        created: int,
        prompt_tokens: int,
        plan: OutputPlan,
        parse_kwargs: dict[str, Any],
    ) -> web.StreamResponse:
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage"))
        writer = ChunkWriter(request_id, created, model, self.fingerprint, continuous_usage=bool(opts.get("continuous_usage_stats")))
        include_reasoning = body.get("include_reasoning", True)
        tool_choice = body.get("tool_choice", "auto")
        parser = StreamParser(**parse_kwargs)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(writer.role(Usage(prompt_tokens, 0)))
        sent = 0  # chunks written after the role chunk, for Turn.reset_after
        if plan.reset_after == 0:
            return _reset(request, resp)
        reasoning_text = ""
        generated = 0
        async for generated, finished, text in self._run_sequence(prompt_tokens, plan):
            delta = parser.feed(text)
            if finished:
                delta = _merge_deltas(delta, parser.finish())
            if delta and not include_reasoning:
                delta.pop("reasoning", None)
            if delta and "reasoning" in delta:
                reasoning_text += delta["reasoning"]
            usage = Usage(prompt_tokens, generated, count_tokens(reasoning_text))
            if finished:
                finish = streaming_finish(plan.finish_reason, parser.tool_calls_emitted > 0, tool_choice)
                await resp.write(
                    writer.finish(
                        delta or {}, finish, plan.stop_reason, with_fingerprint=not include_usage, usage=usage
                    )
                )
                self._account(prompt_tokens, plan)
                if include_usage:
                    await resp.write(writer.usage(usage))
            elif delta:
                await resp.write(writer.delta(delta, usage))
                sent += 1
                if plan.reset_after is not None and sent >= plan.reset_after:
                    return _reset(request, resp)
        await resp.write(ChunkWriter.DONE)
        await resp.write_eof()
        return resp

    # ---------------------------------------------------------------- /v1/completions

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._read_json(request)
            missing = self._check_model(body)
            if missing is not None:
                return missing
            prompt = body.get("prompt")
            if isinstance(prompt, list):
                prompt = "".join(str(p) for p in prompt)
            if not isinstance(prompt, str):
                raise _BadRequest("prompt must be a string.", param="prompt")
            prompt_tokens = count_tokens("<bos>" + prompt)
            max_tokens = self._budget(body, prompt_tokens)
        except _BadRequest as exc:
            return _json_error(str(exc), param=exc.param)
        self.requests.append(body)
        model = body.get("model") or self.model
        # No chat template here: an -it model ends its turn at once, and the stop token is not
        # in the text, so the text is empty (reference §3.4). Bench traffic (ignore_eos) gets
        # filler tokens so throughput sweeps still measure something.
        ignore_eos = bool(body.get("ignore_eos"))
        plan = plan_output(Turn(text="", stop="turn"), max_tokens=max_tokens, ignore_eos=ignore_eos)
        request_id = new_request_id("cmpl")
        created = int(time.time())
        if body.get("stream"):
            opts = body.get("stream_options") or {}
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            async for _generated, finished, text in self._run_sequence(prompt_tokens, plan):
                chunk = text_completion_chunk(
                    request_id=request_id,
                    created=created,
                    model=model,
                    text=text,
                    finish_reason=plan.finish_reason if finished else None,
                    stop_reason=plan.stop_reason,
                )
                await resp.write(ChunkWriter.sse(chunk))
            self._account(prompt_tokens, plan)
            if opts.get("include_usage"):
                usage_chunk: dict[str, Any] = {
                    "id": request_id,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "total_tokens": prompt_tokens + plan.total_tokens,
                        "completion_tokens": plan.total_tokens,
                    },
                }
                await resp.write(ChunkWriter.sse(usage_chunk))
            await resp.write(ChunkWriter.DONE)
            await resp.write_eof()
            return resp
        async for _ in self._run_sequence(prompt_tokens, plan):
            pass
        self._account(prompt_tokens, plan)
        return web.json_response(
            text_completion(
                request_id=request_id,
                created=created,
                model=model,
                text=plan.text,
                finish_reason=plan.finish_reason,
                stop_reason=plan.stop_reason,
                usage=Usage(prompt_tokens, plan.total_tokens),
                fingerprint=self.fingerprint,
            )
        )

    # ---------------------------------------------------------------- small routes

    async def _models(self, request: web.Request) -> web.Response:
        created = int(time.time())
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "created": created,
                        "owned_by": "vllm",
                        "root": self.model,
                        "parent": None,
                        "max_model_len": self.max_model_len,
                        "permission": [],
                    }
                ],
            }
        )

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        # vLLM's API server: `GET /version` -> {"version": VLLM_VERSION}; the fingerprint carries the same number.
        return web.json_response({"version": self.served_version})

    async def _tokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._read_json(request)
        except _BadRequest as exc:
            return _json_error(str(exc), param=exc.param)
        if body.get("messages"):
            try:
                images = check_images(body, self.image_limit)
            except ImagePartError as exc:
                return _json_error(str(exc))
            text, media = render_prompt(body, [image.prompt_tokens for image in images])
            ids = token_ids(text) + [0] * media
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                return _json_error("Either `prompt` or `messages` must be given.", param="prompt")
            ids = token_ids(("<bos>" if body.get("add_special_tokens", True) else "") + prompt)
        return web.json_response(
            {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids, "token_strs": None}
        )

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        mode = self.metrics_mode
        if mode == "unreachable":
            # Drop the connection without an answer, as if nothing listened.
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError()
        if mode == "not_found":
            return web.Response(status=404, text="Not Found")
        if mode == "garbage":
            return web.Response(text="<html>sandbox: metrics are garbage on purpose</html>\n\x00{{not prometheus",
                                content_type="text/plain")
        return web.Response(text=self.prometheus_text(), content_type="text/plain", charset="utf-8",
                            headers={"X-Sandbox": self.fingerprint})

    def prometheus_text(self) -> str:
        eng = self.engine
        m = self.model
        label = f'engine="0",model_name="{m}"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{label}}} {float(eng.num_running if eng else 0)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{label}}} {float(eng.num_waiting if eng else 0)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{label}}} {eng.core.kv_usage if eng else 0.0}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{label}}} {float(eng.stats.preemptions if eng else 0)}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{label}}} {float(self.counters.prompt_tokens)}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{label}}} {float(self.counters.generation_tokens)}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason, count in sorted(self.counters.success.items()):
            lines.append(f'vllm:request_success_total{{{label},finished_reason="{reason}"}} {float(count)}')
        return "\n".join(lines) + "\n"
