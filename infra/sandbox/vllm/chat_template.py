"""The prompt vLLM builds for a chat request: the pinned Gemma 4 chat template, rendered in Python.

vLLM applies the chat template that ships with the model's weights (no `--chat-template` is
passed). The pinned revision 3e22461f65e89153144f8adb70e3b8c2cc9845a7 of google/gemma-4-E2B-it
ships `chat_template.jinja` as git blob fbe3b59b625cd1b8850ea592d4203df6ec04684b (18,569 bytes,
SHA-256 0a2c8073…c5b5; shared reference vllm-tpu.md §3), headed "Google Gemma 4 Canonical Chat
Template, Published: 2026-07-09". This module follows that blob as read from the public copy
`trl/chat_templates/gemma4_v5.jinja` in the PyPI wheel trl-1.16.0-py3-none-any.whl (huggingface/trl;
`git hash-object` of that file prints the blob id above; trl's README attributes the file to
google/gemma-4-E2B-it at commit 8995379). The GitHub snapshot of huggingface/trl at hand
(f2cd5771, 2026-07-24) predates the file, so no trl commit is named.
Before rendering, vLLM json-loads each assistant call's `arguments` into a mapping, `{}` when it
is not a JSON object (`_postprocess_messages`), and turns OpenAI media parts into
`image`/`audio`/`video` parts.

What the template does that matters to the agent, and what `problems` flags:
- `role: tool` messages right after an assistant message with `tool_calls` are folded into that
  model turn as `<|tool_response>response:name{value:…}<tool_response|>`; the assistant's text
  is put AFTER the responses. A model turn that ends in tool results with no text is left open
  only when no other message follows (the prompt then ends `<tool_response|>`, plus
  `<|channel>thought\\n` with thinking on, and no new model turn is opened); before a user or
  system message it is closed. An assistant message followed by another one (tool results
  between them or not) leaves the turn open for it.
- the generation prompt is `<|turn>model\\n` alone: no empty thought channel when thinking is off.
- mapping keys (arguments, declarations) are sorted case-insensitively, as jinja's `dictsort`.
- reasoning (`reasoning` or `reasoning_content`) is rendered for every assistant message after
  the last user message, and for earlier ones with tool calls only with `preserve_thinking`.
- a last assistant message with tool results AND text closes its turn, and no generation prompt
  follows: the model is asked to write after `<turn|>` (flagged);
- an assistant tool call with no tool result after it opens `<|tool_response>` and leaves it for
  the model to write (flagged);
- a parameter declared without a plain `type` (`anyOf`, a type list) renders `type:<|"|><|"|>`
  or the list's Python text (flagged); `default`, ranges and `additionalProperties` are
  dropped, `enum` is shown only for strings, `nullable: true` is understood;
- call `arguments` that are not a JSON object render as no arguments at all (flagged); JSON null
  renders as `null`;
- a `role: tool` message that follows no call is dropped (flagged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Q = '<|"|>'
# OpenAI content-part types as vLLM hands them to the template (image_url -> image, …)
_MEDIA_KINDS = {"image": "image", "image_url": "image", "audio": "audio", "input_audio": "audio",
                "audio_url": "audio", "video": "video", "video_url": "video"}
# What the template writes for each; vLLM replaces these with the media's own tokens (tokens.py).
MEDIA_PLACEHOLDERS = {"image": "<|image|>", "audio": "<|audio|>", "video": "<|video|>"}
_STANDARD_KEYS = ("description", "type", "properties", "required", "nullable")


@dataclass
class Rendered:
    text: str
    media_parts: int = 0
    problems: list[str] = field(default_factory=list)


def _upper(value: Any) -> str:
    """Jinja's `upper` filter: undefined -> "", anything else -> its text upper-cased."""
    return "" if value is None else str(value).upper()


def _dictsort(mapping: dict[str, Any]) -> list[str]:
    """Jinja's `dictsort`: keys in case-insensitive order (ties keep the mapping's order)."""
    return sorted(mapping, key=lambda k: k.lower() if isinstance(k, str) else k)


def _media_token(kind: Any) -> str:
    media = _MEDIA_KINDS.get(kind) if isinstance(kind, str) else None
    return MEDIA_PLACEHOLDERS[media] if media else ""


class _Renderer:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.media = 0

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    # ------------------------------------------------------------------ values

    def argument(self, value: Any, escape_keys: bool = True) -> str:
        """The template's `format_argument`."""
        if value is None:
            return "null"
        if isinstance(value, str):
            return Q + value + Q
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, dict):
            items = []
            for key in _dictsort(value):
                shown = Q + key + Q if escape_keys else key
                items.append(f"{shown}:{self.argument(value[key], escape_keys)}")
            return "{" + ",".join(items) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + ",".join(self.argument(v, escape_keys) for v in value) + "]"
        return str(value)

    # ------------------------------------------------------------------ declarations

    def parameters(self, properties: dict[str, Any], where: str, filter_keys: bool = False) -> str:
        out = []
        for key in _dictsort(properties):
            value = properties[key]
            if filter_keys and key in _STANDARD_KEYS:
                continue
            if not isinstance(value, dict):
                value = {}
            out.append(f"{key}:{{{self.parameter(value, f'{where}.{key}')}}}")
        return ",".join(out)

    def parameter(self, value: dict[str, Any], where: str) -> str:
        parts = []
        if value.get("description"):
            parts.append(f"description:{Q}{value['description']}{Q}")
        kind = _upper(value.get("type"))
        if kind == "STRING" and value.get("enum"):
            parts.append(f"enum:{self.argument(value['enum'])}")
        elif kind == "ARRAY" and isinstance(value.get("items"), dict) and value["items"]:
            parts.append(f"items:{{{self.items(value['items'], where)}}}")
        if value.get("nullable"):
            parts.append("nullable:true")
        if kind == "OBJECT":
            props = value.get("properties")
            if isinstance(props, dict):
                parts.append(f"properties:{{{self.parameters(props, where)}}}")
            else:
                parts.append(f"properties:{{{self.parameters(value, where, True)}}}")
            if value.get("required"):
                parts.append("required:[" + ",".join(f"{Q}{r}{Q}" for r in value["required"]) + "]")
        if not isinstance(value.get("type"), str) or not kind:
            self.problem(f"parameter {where} renders without a plain type (type:{Q}{kind}{Q})")
        parts.append(f"type:{Q}{kind}{Q}")
        return ",".join(parts)

    def items(self, items: dict[str, Any], where: str) -> str:
        out = []
        for key in _dictsort(items):
            value = items[key]
            if value is None:
                continue
            if key == "properties":
                inner = self.parameters(value, where + "[]") if isinstance(value, dict) else ""
                out.append(f"properties:{{{inner}}}")
            elif key == "required":
                out.append("required:[" + ",".join(f"{Q}{r}{Q}" for r in value) + "]")
            elif key == "type":
                shown = value.upper() if isinstance(value, str) else [str(v).upper() for v in value]
                out.append(f"type:{self.argument(shown)}")
            else:
                out.append(f"{key}:{self.argument(value)}")
        return ",".join(out)

    def declaration(self, tool: dict[str, Any]) -> str:
        function = tool.get("function")
        fn = function if isinstance(function, dict) else tool
        name = fn.get("name", "")
        text = f"declaration:{name}{{description:{Q}{fn.get('description') or ''}{Q}"
        params = fn.get("parameters")
        if params:
            text += ",parameters:{"
            if params.get("properties"):
                text += f"properties:{{{self.parameters(params['properties'], name)}}},"
            if params.get("required"):
                text += "required:[" + ",".join(f"{Q}{r}{Q}" for r in params["required"]) + "],"
            if params.get("type"):
                text += f"type:{Q}{_upper(params['type'])}{Q}}}"
        return (text + "}").strip()

    # ------------------------------------------------------------------ messages

    def content(self, content: Any, model: bool) -> str:
        if isinstance(content, str):
            return strip_thinking(content) if model else content.strip()
        out = ""
        for item in content if isinstance(content, list) else []:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "text":
                text = str(item.get("text", ""))
                out += strip_thinking(text) if model else text.strip()
            elif _media_token(kind):
                out += _media_token(kind)
                self.media += 1
        return out

    def tool_response(self, name: str, body: Any) -> str:
        """The template's `format_tool_response_block`, and the media placeholders of a parts list."""
        media = ""
        if isinstance(body, list):
            parts = [p for p in body if isinstance(p, dict)]
            body = "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
            media = "".join(_media_token(p.get("type")) for p in parts)
            self.media += sum(1 for p in parts if _media_token(p.get("type")))
        if isinstance(body, dict):
            inner = ",".join(f"{k}:{self.argument(body[k], False)}" for k in _dictsort(body))
            block = f"response:{name}{{{inner}}}"
        else:
            block = f"response:{name}{{value:{self.argument(body, False)}}}"
        return f"<|tool_response>{block}<tool_response|>{media}"

    def call(self, call: Any, where: str) -> str:
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        name = str(fn.get("name", ""))
        args = _arguments_mapping(fn.get("arguments"))
        if args is None:
            self.problem(f"{where}: the arguments of call `{name}` are not a JSON object and render as none")
            args = {}
        rendered = ",".join(f"{k}:{self.argument(args[k], False)}" for k in _dictsort(args))
        return f"<|tool_call>call:{name}{{{rendered}}}<tool_call|>"


def strip_thinking(text: str) -> str:
    result = ""
    for part in text.split("<channel|>"):
        result += part.split("<|channel>")[0] if "<|channel>" in part else part
    return result.strip()


def _arguments_mapping(raw: Any) -> dict[str, Any] | None:
    """vLLM's `_postprocess_messages`: the `arguments` string becomes a mapping; None (rendered
    as `{}`) when it is not a JSON object. Absent or empty arguments are `{}`."""
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _role(message: dict[str, Any]) -> Any:
    return message.get("role")


def render(request: dict[str, Any]) -> Rendered:
    """The prompt text for a chat request (add_generation_prompt on), and what renders badly."""
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    tools = request.get("tools") or []
    kwargs = request.get("chat_template_kwargs") or {}
    thinking = bool(kwargs.get("enable_thinking"))
    preserve_thinking = bool(kwargs.get("preserve_thinking"))
    r = _Renderer()
    out = ["<bos>"]
    prev_type: str | None = None
    loop = messages
    if thinking or tools or (messages and _role(messages[0]) in ("system", "developer")):
        out.append("<|turn>system\n")
        if thinking:
            out.append("<|think|>\n")
            prev_type = "think"
        if messages and _role(messages[0]) in ("system", "developer"):
            first = messages[0].get("content")
            if isinstance(first, str):
                out.append(first.strip())
            elif isinstance(first, list):
                out.extend(str(item.get("text", "")).strip() + " " for item in first if isinstance(item, dict))
            loop = messages[1:]
        for tool in tools:
            out.append("<|tool>" + r.declaration(tool) + "<tool|>")
            prev_type = "tool"
        out.append("<turn|>\n")
    offset = len(messages) - len(loop)  # message numbers in problems count the request's messages
    last_user = max((i for i, m in enumerate(loop) if _role(m) == "user"), default=-1)
    answered: set[int] = set()
    prev_non_tool_role = None
    closed_after_results = False
    for i, message in enumerate(loop):
        if _role(message) == "tool":
            continue
        prev_type = None
        role = "model" if _role(message) == "assistant" else str(_role(message))
        if not (role == "model" and prev_non_tool_role == "assistant"):
            out.append(f"<|turn>{role}\n")
        calls = message.get("tool_calls") or []
        thinking_text = message.get("reasoning") or message.get("reasoning_content")
        if thinking_text and (i > last_user or (preserve_thinking and calls)):
            out.append(f"<|channel>thought\n{thinking_text}\n<channel|>")
        for call in calls:
            out.append(r.call(call, f"message {i + offset}"))
            prev_type = "tool_call"
        responded = False
        if calls:
            for k in range(i + 1, len(loop)):
                follow = loop[k]
                if _role(follow) != "tool":
                    break
                name = follow.get("name") or "unknown"
                for call in calls:
                    if isinstance(call, dict) and call.get("id") == follow.get("tool_call_id"):
                        name = (call.get("function") or {}).get("name", name)
                out.append(r.tool_response(name, follow.get("content")))
                answered.add(k)
                responded = True
                prev_type = "tool_response"
        captured = r.content(message.get("content"), role == "model")
        out.append(captured)
        has_content = bool(captured.strip())
        next_role = next((_role(m) for m in loop[i + 1:] if _role(m) != "tool"), None)
        continues_into_next = role == "model" and next_role == "assistant" and (not calls or responded)
        closed_after_results = False
        if prev_type == "tool_call" and not responded:
            r.problem(f"message {i + offset} calls a tool but no tool result follows it: the template opens "
                      "<|tool_response> and leaves the model to write the result")
            out.append("<|tool_response>")
        elif continues_into_next:
            pass
        elif not (responded and not has_content and next_role is None):
            out.append("<turn|>\n")
            closed_after_results = responded
        prev_non_tool_role = _role(message)
    for k, message in enumerate(loop):
        if _role(message) == "tool" and k not in answered:
            r.problem(f"message {k + offset} (role tool) follows no tool call and is dropped")
    if prev_type not in ("tool_response", "tool_call"):
        out.append("<|turn>model\n")
    elif prev_type == "tool_response" and thinking:
        out.append("<|channel>thought\n")
    if prev_type == "tool_response" and closed_after_results:
        r.problem("the prompt ends after a closed model turn with no generation prompt "
                  "(the last assistant message has tool results and text after them)")
    return Rendered(text="".join(out), media_parts=r.media, problems=r.problems)
