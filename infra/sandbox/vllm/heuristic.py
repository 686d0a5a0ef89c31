"""The labelled heuristic that answers when no script is loaded (e.g. `tpubot shell`).

It is not a language model and never pretends to be Gemma: every text it writes says it is the
sandbox model. It exists so the agent loop visibly works end to end on embedded defaults:
- tools offered and the last user message asks about status / zones / cost / logs → one tool
  call in Gemma 4's raw syntax, for the first offered tool whose name matches;
- the conversation ends with tool results → a short summary quoting them, citing any log line
  numbers it finds ("L12");
- anything else → a plain labelled reply.
Its output is raw Gemma text, so it goes through the same vLLM-side parsing as scripted turns.
"""

from __future__ import annotations

import re
from typing import Any

Q = '<|"|>'

# (words in the user's message, substrings of a tool name), checked in order.
_INTENTS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("log", "logs", "error", "errors", "incident", "summarize", "summarise"), ("log",)),
    (("zone", "zones", "region", "capacity"), ("zone",)),
    (("cost", "price", "spend", "bill", "$"), ("cost", "price")),
    (("status", "state", "up?", "running", "health", "lease"), ("status",)),
]

_LINE_REF = re.compile(r"\bL(\d{1,6})\b|^\s*(\d{1,6})\s*[:|│]", re.MULTILINE)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _tool_names(request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for tool in request.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            out.append((fn["name"], fn.get("parameters") or {}))
    return out


def _gemma_value(schema: dict[str, Any], user_text: str) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    if "enum" in schema and schema["enum"]:
        first = schema["enum"][0]
        return f"{Q}{first}{Q}" if isinstance(first, str) else str(first).lower()
    if "default" in schema and schema["default"] is not None:
        d = schema["default"]
        return f"{Q}{d}{Q}" if isinstance(d, str) else str(d).lower()
    if t in ("integer", "number"):
        return str(schema.get("minimum", 1))
    if t == "boolean":
        return "false"
    if t == "array":
        return "[]"
    if t == "object":
        return "{}"
    return f"{Q}{user_text[:200]}{Q}"


def _call(name: str, params: dict[str, Any], user_text: str) -> str:
    props = params.get("properties") or {}
    required = params.get("required") or []
    args = ",".join(f"{key}:{_gemma_value(props.get(key) or {}, user_text)}" for key in required)
    return f"<|tool_call>call:{name}{{{args}}}<tool_call|>"


def line_refs(text: str) -> list[str]:
    seen: list[str] = []
    for m in _LINE_REF.finditer(text):
        ref = f"L{m.group(1) or m.group(2)}"
        if ref not in seen:
            seen.append(ref)
    return seen


def respond(request: dict[str, Any], label: str = "sandbox model") -> str:
    """Raw Gemma-4-syntax text for this request."""
    messages = request.get("messages") or []
    tool_results: list[tuple[str, str]] = []
    for msg in reversed(messages):
        if msg.get("role") != "tool":
            break
        tool_results.insert(0, (msg.get("name") or msg.get("tool_call_id") or "tool", _text(msg.get("content"))))
    if tool_results:
        parts = []
        refs: list[str] = []
        for name, result in tool_results:
            quote = " ".join(result.split())
            quote = quote if len(quote) <= 240 else quote[:237] + "..."
            parts.append(f"{name} returned: \"{quote}\"")
            refs += [r for r in line_refs(result) if r not in refs]
        cite = f" Lines cited: {', '.join(refs[:8])}." if refs else ""
        return f"[{label}: heuristic stand-in, not Gemma] " + " ".join(parts) + cite

    user_text = ""
    for msg in reversed(messages):
        if msg.get("role") == "user":
            user_text = _text(msg.get("content"))
            break
    tools = _tool_names(request)
    if tools and request.get("tool_choice") != "none":
        words = set(re.findall(r"[a-z$?]+", user_text.lower()))
        lowered = user_text.lower()
        for triggers, name_parts in _INTENTS:
            if any(t in words or (t == "$" and "$" in lowered) for t in triggers):
                for name, params in tools:
                    if any(part in name.lower() for part in name_parts):
                        return f"Checking with {name}. " + _call(name, params, user_text)
    preview = " ".join(user_text.split())
    preview = preview if len(preview) <= 120 else preview[:117] + "..."
    return (
        f"[{label}: heuristic stand-in, not Gemma] I am the sandbox model, a simple rule-based "
        f"responder. I received: \"{preview}\". Ask about status, zones, cost or logs to see a tool call."
    )
