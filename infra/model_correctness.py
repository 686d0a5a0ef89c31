"""Does the served model answer *right*? The two checks the boot makes before a lease is READY.

A fast answer is not a correct one (issue 28): one vLLM serving path gave garbage text for Gemma 4
E2B for months (`MODEL_IMPL_TYPE=vllm` before tpu-inference #3406, reference/vllm-tpu.md §1), and
a server started without `--enable-auto-tool-choice --tool-call-parser gemma4` hands tool calls
back as plain text in `content`, so the agent would never run a tool. Each check is one
non-streamed `/v1/chat/completions` request at temperature 0:

- a question with one right answer (a sum), whose reply must contain that number;
- a request offering one tool and asking for it, whose reply must carry a *parsed* call:
  `tool_calls` non-empty, the tool's name, arguments that are a JSON object.

A check that fails says what failed and the fix; the caller decides what that means for the lease.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import httpx

from infra.bench import chat_completions_url, error_message
from infra.endpoint_probe import auth_headers

KNOWN_QUESTION = "What is 17 + 25? Answer with the number only."
KNOWN_ANSWER = "42"
PROBE_TOOL = "report_status"
TOOL_PROMPT = f"Call the {PROBE_TOOL} tool with state online."
PROBE_TOOLS = [{
    "type": "function",
    "function": {
        "name": PROBE_TOOL,
        "description": "Report the state of this service.",
        "parameters": {"type": "object", "properties": {"state": {"type": "string", "enum": ["online"]}},
                       "required": ["state"]},
    },
}]
MAX_TOKENS = 64
PARSER_FIX = ("start vLLM with --enable-auto-tool-choice --tool-call-parser gemma4 (the startup script "
              "`tpubot render-startup-script` prints does), on an image whose gemma4 parser is the rewritten one "
              "(vLLM ≥ 0.24)")
GARBAGE_FIX = ("the model path may be giving garbage: leave MODEL_IMPL_TYPE unset (the JAX path serves Gemma 4 "
               "E2B), use the image `tpubot config` accepts, and read `sudo docker logs tpubot-vllm` on the VM")
# What Gemma 4 writes for a call (reference/gemma4-wire.md): seen in `content`, the parser did not run.
_RAW_CALL = re.compile(r"<\|tool_call>|\bcall:[A-Za-z_][\w.-]*\{")


@dataclass(frozen=True)
class CheckFailure:
    what: str  # said to people: what came back wrong
    fix: str


async def check_known_answer(base_url: str, model: str, *, api_key: str | None = None,
                             timeout: float = 60.0) -> CheckFailure | None:
    reply = await _complete(base_url, {"model": model, "messages": [{"role": "user", "content": KNOWN_QUESTION}]},
                            api_key=api_key, timeout=timeout)
    if isinstance(reply, CheckFailure):
        return reply
    message = _message(reply)
    # A reasoning parser may leave a short answer in `reasoning` with empty `content` (gemma4-wire.md);
    # the agent repairs that the same way, so it is still the right answer.
    text = message.get("content") or message.get("reasoning") or message.get("reasoning_content") or ""
    if re.search(rf"(?<![\d.]){KNOWN_ANSWER}(?!\.?\d)", text):  # "42." counts; "142", "0.42", "42.5" do not
        return None
    return CheckFailure(f"the answer to a known question was wrong (asked {KNOWN_QUESTION!r}, expected "
                        f"{KNOWN_ANSWER}, got {_quote(text)})", GARBAGE_FIX)


async def check_tool_call(base_url: str, model: str, *, api_key: str | None = None,
                          timeout: float = 60.0) -> CheckFailure | None:
    body = {"model": model, "messages": [{"role": "user", "content": TOOL_PROMPT}], "tools": PROBE_TOOLS,
            "tool_choice": "auto"}
    reply = await _complete(base_url, body, api_key=api_key, timeout=timeout)
    if isinstance(reply, CheckFailure):
        # vLLM refuses `tool_choice: "auto"` with HTTP 400 when started without the flags.
        refused = reply.what.startswith("HTTP 400")
        return CheckFailure(f"a request with a tool was refused ({reply.what})", PARSER_FIX) if refused else reply
    message = _message(reply)
    calls = message.get("tool_calls") or []
    content = message.get("content") or ""
    if not calls:
        if _RAW_CALL.search(content):
            return CheckFailure(f"tool calls come back as text, not as parsed tool_calls (content: {_quote(content)})",
                                PARSER_FIX)
        return CheckFailure(f"asked to call {PROBE_TOOL}, the model answered in text instead "
                            f"({_quote(content)})", PARSER_FIX)
    function = (calls[0] or {}).get("function") or {}
    if function.get("name") != PROBE_TOOL:
        return CheckFailure(f"asked to call {PROBE_TOOL}, the model called {function.get('name')!r}", GARBAGE_FIX)
    try:
        arguments = json.loads(function.get("arguments") or "")
    except (TypeError, ValueError):
        arguments = None
    if not isinstance(arguments, dict):
        return CheckFailure(f"the tool call's arguments are not a JSON object ({_quote(str(function.get('arguments')))})",
                            PARSER_FIX)
    return None


async def _complete(base_url: str, body: dict[str, Any], *, api_key: str | None,
                    timeout: float) -> dict[str, Any] | CheckFailure:
    payload = {**body, "temperature": 0, "max_completion_tokens": MAX_TOKENS, "stream": False}
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False, headers=auth_headers(api_key)) as client:
            response = await client.post(chat_completions_url(base_url), json=payload)
    except httpx.HTTPError as error:
        return CheckFailure(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__,
                            "read `sudo docker logs tpubot-vllm` on the VM")
    if response.status_code != 200:
        return CheckFailure(f"HTTP {response.status_code} from /v1/chat/completions: {error_message(response.text)}",
                            "read `sudo docker logs tpubot-vllm` on the VM")
    try:
        reply = response.json()
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        return CheckFailure("/v1/chat/completions answered with something that is not a chat completion",
                            "read `sudo docker logs tpubot-vllm` on the VM")
    return reply


def _message(reply: dict[str, Any]) -> dict[str, Any]:
    choices = reply.get("choices") or [{}]
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    return message if isinstance(message, dict) else {}


def _quote(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…") if text else "no text"
