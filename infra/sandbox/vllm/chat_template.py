"""The prompt vLLM builds for a chat request: Gemma 4's current chat template, rendered in Python.

vLLM applies the chat template that ships with the model's weights (no `--chat-template` is
passed). This follows vLLM's `examples/tool_chat_template_gemma4.jinja`, which is close to, but
not, the `chat_template.jinja` of the pinned revision 3e22461f65e89153144f8adb70e3b8c2cc9845a7
(git blob fbe3b59b625cd1b8850ea592d4203df6ec04684b, 18,569 bytes; shared reference vllm-tpu.md
§3: the turn-close condition differs). No public copy of that blob was found to follow yet.
Before rendering, vLLM json-loads each assistant call's `arguments` into a mapping
(`_postprocess_messages`).

What the template does that matters to the agent, and what `problems` flags:
- `role: tool` messages right after an assistant message with `tool_calls` are folded into that
  model turn as `<|tool_response>response:name{value:…}<tool_response|>`; the assistant's text
  is put AFTER the responses and, when there is any, closes the turn — and then no generation
  prompt is added, so the model is asked to write after `<turn|>` (flagged);
- a parameter declared without a plain `type` (`anyOf`, a type list) renders `type:<|"|><|"|>`
  or the list's Python text (flagged); `default`, ranges and `additionalProperties` are
  dropped, `enum` is shown only for strings, `nullable: true` is understood;
- an argument value that is JSON null renders as Python `None` (flagged);
- a `role: tool` message that follows no call is dropped (flagged);
- a user (or system) message after the tool results opens its turn inside the model turn that
  holds them, which nothing closed (flagged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Q = '<|"|>'
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


class _Renderer:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.media = 0

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    # ------------------------------------------------------------------ values

    def argument(self, value: Any, escape_keys: bool = True, where: str = "") -> str:
        if isinstance(value, str):
            return Q + value + Q
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, dict):
            items = []
            for key in sorted(value):
                shown = Q + key + Q if escape_keys else key
                items.append(f"{shown}:{self.argument(value[key], escape_keys, f'{where}.{key}')}")
            return "{" + ",".join(items) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + ",".join(self.argument(v, escape_keys, where) for v in value) + "]"
        if value is None and where:
            self.problem(f"argument {where} is null and renders as Python `None`")
        return str(value)

    # ------------------------------------------------------------------ declarations

    def parameters(self, properties: dict[str, Any], required: Any, where: str, filter_keys: bool = False) -> str:
        out = []
        for key in sorted(properties):
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
                parts.append(f"properties:{{{self.parameters(props, value.get('required'), where)}}}")
            else:
                parts.append(f"properties:{{{self.parameters(value, value.get('required'), where, True)}}}")
            if value.get("required"):
                parts.append("required:[" + ",".join(f"{Q}{r}{Q}" for r in value["required"]) + "]")
        if not isinstance(value.get("type"), str) or not kind:
            self.problem(f"parameter {where} renders without a plain type (type:{Q}{kind}{Q})")
        parts.append(f"type:{Q}{kind}{Q}")
        return ",".join(parts)

    def items(self, items: dict[str, Any], where: str) -> str:
        out = []
        for key in sorted(items):
            value = items[key]
            if value is None:
                continue
            if key == "properties":
                inner = self.parameters(value, items.get("required") or [], where + "[]") if isinstance(value, dict) else ""
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
                text += f"properties:{{{self.parameters(params['properties'], params.get('required'), name)}}},"
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
            elif kind in MEDIA_PLACEHOLDERS or kind in ("image_url", "input_audio", "video_url"):
                out += MEDIA_PLACEHOLDERS.get(kind, "<|image|>")
                self.media += 1
        return out

    def tool_response(self, name: str, body: Any) -> str:
        if isinstance(body, dict):
            inner = ",".join(f"{k}:{self.argument(body[k], False)}" for k in sorted(body))
            return f"<|tool_response>response:{name}{{{inner}}}<tool_response|>"
        if isinstance(body, list):
            body = "".join(str(p.get("text", "")) for p in body if isinstance(p, dict) and p.get("type") == "text")
        return f"<|tool_response>response:{name}{{value:{self.argument(body, False)}}}<tool_response|>"


def strip_thinking(text: str) -> str:
    result = ""
    for part in text.split("<channel|>"):
        result += part.split("<|channel>")[0] if "<|channel>" in part else part
    return result.strip()


def _arguments_mapping(raw: Any) -> dict[str, Any]:
    """vLLM's `_postprocess_messages`: the `arguments` string becomes a mapping ({} if not one)."""
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def render(request: dict[str, Any]) -> Rendered:
    """The prompt text for a chat request (add_generation_prompt on), and what renders badly."""
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    tools = request.get("tools") or []
    thinking = bool((request.get("chat_template_kwargs") or {}).get("enable_thinking"))
    r = _Renderer()
    out = ["<bos>"]
    prev_type: str | None = None
    loop = messages
    if thinking or tools or (messages and messages[0].get("role") in ("system", "developer")):
        out.append("<|turn>system\n")
        if thinking:
            out.append("<|think|>\n")
            prev_type = "think"
        if messages and messages[0].get("role") in ("system", "developer"):
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
    last_user = max((i for i, m in enumerate(loop) if m.get("role") == "user"), default=-1)
    answered: set[int] = set()
    model_turn_open = False  # tool results with no text after them leave the model turn open
    for i, message in enumerate(loop):
        if message.get("role") == "tool":
            continue
        prev_type = None
        role = "model" if message.get("role") == "assistant" else str(message.get("role"))
        prev_role = next((m.get("role") for m in reversed(loop[:i]) if m.get("role") != "tool"), None)
        if not (role == "model" and prev_role == "assistant"):
            if model_turn_open:
                r.problem(f"message {i + len(messages) - len(loop)} (role {message.get('role')}) opens a turn inside "
                          "the model turn that holds the tool results, which the template leaves open")
            out.append(f"<|turn>{role}\n")
        calls = message.get("tool_calls") or []
        thinking_text = message.get("reasoning") or message.get("reasoning_content")
        if thinking_text and i > last_user and calls:
            out.append(f"<|channel>thought\n{thinking_text}\n<channel|>")
        for call in calls:
            fn = call.get("function") or {}
            args = _arguments_mapping(fn.get("arguments"))
            name = fn.get("name", "")
            rendered = ",".join(f"{k}:{r.argument(args[k], False, f'{name}.{k}')}" for k in sorted(args))
            out.append(f"<|tool_call>call:{name}{{{rendered}}}<tool_call|>")
            prev_type = "tool_call"
        responded = False
        if calls:
            for k in range(i + 1, len(loop)):
                follow = loop[k]
                if follow.get("role") != "tool":
                    break
                name = follow.get("name") or "unknown"
                for call in calls:
                    if call.get("id") == follow.get("tool_call_id"):
                        name = (call.get("function") or {}).get("name", name)
                out.append(r.tool_response(name, follow.get("content")))
                answered.add(k)
                responded = True
                prev_type = "tool_response"
        captured = r.content(message.get("content"), role == "model")
        out.append(captured)
        has_content = bool(captured.strip())
        model_turn_open = responded and not has_content
        if prev_type == "tool_call" and not responded:
            out.append("<|tool_response>")
        elif not (responded and not has_content):
            out.append("<turn|>\n")
    for k, message in enumerate(loop):
        if message.get("role") == "tool" and k not in answered:
            r.problem(f"message {k + len(messages) - len(loop)} (role tool) follows no tool call and is dropped")
    if prev_type not in ("tool_response", "tool_call"):
        out.append("<|turn>model\n")
        if not thinking:
            out.append("<|channel>thought\n<channel|>")
    text = "".join(out)
    if text.endswith("<turn|>\n"):
        r.problem("the prompt ends after a closed model turn with no generation prompt "
                  "(an assistant message carried both content and tool_calls)")
    return Rendered(text=text, media_parts=r.media, problems=r.problems)
