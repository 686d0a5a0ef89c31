"""The labelled heuristic that answers when no script is loaded (e.g. `tpubot shell`).

It is not a language model and never pretends to be Gemma: every text it writes says it is the
sandbox model. It exists so the agent loop visibly works end to end on embedded defaults:
- tools offered and the last user message asks about runbooks / status / zones / cost / logs → one tool
  call in Gemma 4's raw syntax, for the first offered tool whose name matches;
- the conversation ends with tool results → a short summary: for a log digest, the top error
  template (most severe, then most frequent), its count and the lines it cites ("L12"); for
  other results, their first lines, cut at a word; and for each runbook section a result holds,
  "This looks like …, see RB:…" with its fix;
- a question that is a sum or product of two whole numbers ("What is 17 + 25?") → its answer, so
  the boot's known-answer check (infra/model_correctness.py) passes on a healthy sandbox model;
- no such word, but the message carries a log digest → the log tool, as a model would read them;
- anything else → a plain labelled reply.
When the request carries images it cannot see them, and says what it received ("2 images:
1056×576, 576×1056") in every answer it writes.
Its output is raw Gemma text, so it goes through the same vLLM-side parsing as scripted turns.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.plurals import counted

Q = '<|"|>'

# (words in the user's message, substrings of a tool name), checked in order.
_INTENTS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("runbook", "runbooks", "playbook"), ("runbook",)),
    (("log", "logs", "error", "errors", "incident", "summarize", "summarise"), ("log",)),
    (("zone", "zones", "region", "capacity"), ("zone",)),
    (("cost", "price", "spend", "bill", "$"), ("cost", "price")),
    (("status", "state", "up?", "running", "health", "lease"), ("status",)),
]



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


# A digest template line: `T1 ERROR x2 L23-L37 first-error: OOM command not allowed …`
_TEMPLATE = re.compile(r"^T\d+ (?P<sev>[A-Z]+) x(?P<count>\d+) (?P<span>L[\d,L\-–]+)[^:]*: (?P<message>.*)$")
_SAMPLE = re.compile(r"^\s+L(?P<line>\d+) \| ")
_SEVERITY_RANK = {"FATAL": 0, "CRITICAL": 0, "EMERGENCY": 0, "ALERT": 0, "ERROR": 1, "WARNING": 2, "WARN": 2}
_DIGEST_LINES = re.compile(r"Log digest: (?P<lines>[\d,]+) lines?")
_ARITHMETIC = re.compile(r"\bwhat is (\d{1,9}) *([+*x×-]) *(\d{1,9})\b", re.IGNORECASE)
_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "x": operator.mul, "×": operator.mul}
_LOG_MATERIAL = "<<<DATA log digest"
_FENCE = re.compile(r"^(<<<DATA.*|DATA>>>)$")
_QUOTE_CHARS = 240


@dataclass
class _Template:
    severity: str
    count: int
    span: str
    message: str
    lines: list[str] = field(default_factory=list)


def digest_templates(text: str) -> list[_Template]:
    """The templates of a log digest, with the sample lines listed under each."""
    out: list[_Template] = []
    for raw in text.splitlines():
        m = _TEMPLATE.match(raw)
        if m:
            out.append(_Template(m["sev"], int(m["count"]), m["span"], m["message"].strip()))
            continue
        sample = _SAMPLE.match(raw)
        if sample and out:
            out[-1].lines.append(f"L{sample['line']}")
    return out


# A runbook section in a tool result: `RB:file#section — Title (its symptoms match L3, L4)`, then
# its `Fix: …` line (agent/digest/runbook_links.py, agent/actions/runbook_actions.py).
_RUNBOOK = re.compile(r"^(?P<cite>RB:[\w.-]+#[\w-]+) — (?P<title>.+?)(?: \(its symptoms match (?P<lines>[L\d, ]+)\))?$")


def runbooks_in(result: str) -> list[str]:
    """"This looks like …, see RB:…" for each runbook section in a tool result, with its fix."""
    said: list[str] = []
    lines = result.splitlines()
    for i, raw in enumerate(lines):
        m = _RUNBOOK.match(raw.strip())
        if not m:
            continue
        fix = next((line.strip()[len("Fix:"):].strip() for line in lines[i + 1:i + 8]
                    if line.strip().startswith("Fix:")), "")
        fix = re.sub(r"^\d+[.)]\s*", "", fix)  # its first step, without the step's number
        evidence = f" (its symptoms match {m['lines']})" if m["lines"] else ""
        said.append(f"This looks like {m['title']}, see {m['cite']}{evidence}."
                    + (f" Fix: {_cut(fix, 200)}" if fix else ""))
    return said[:2]


def summarize_result(name: str, result: str) -> str:
    runbooks = runbooks_in(result)
    if runbooks and not digest_templates(result):
        return f"The runbooks ({name}) hold: " + " ".join(runbooks)
    return " ".join([_summarize_digest_or_text(name, result), *runbooks])


def _summarize_digest_or_text(name: str, result: str) -> str:
    errors = [t for t in digest_templates(result) if t.severity in _SEVERITY_RANK]
    if errors:
        top = min(errors, key=lambda t: (_SEVERITY_RANK[t.severity], -t.count))
        cites = ", ".join(top.lines or [top.span])
        text = (f"The logs ({name}) show {top.severity} \"{_cut(top.message, 160)}\" ×{top.count} "
                f"at {cites}.")
        others = [t for t in errors if t is not top]
        if others:
            other = min(others, key=lambda t: (_SEVERITY_RANK[t.severity], -t.count))
            text += f" Also {other.severity} \"{_cut(other.message, 80)}\" ×{other.count} ({other.span})."
        return text
    if digest_templates(result):
        # Say how much was read: "no errors" of a message cut at Slack's limit is not a clean bill.
        read = _DIGEST_LINES.search(result)
        count = int(read["lines"].replace(",", "")) if read else 0
        lines = f"{counted(count, 'line')} of " if read else ""
        those = "that line" if read and count == 1 else "those lines"
        return f"The {lines}logs ({name}) show no warnings or errors in {those}."
    body = " ".join(line for line in result.splitlines() if line.strip() and not _FENCE.match(line.strip()))
    return f"{name} returned: \"{_cut(body, _QUOTE_CHARS)}\""


def _cut(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word and said to be cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + " …"


def received_images(images: Sequence[Any]) -> str:
    """` It received 2 images (1056×576, 576×1056) and cannot see them.` ("" without images)."""
    if not images:
        return ""
    sizes = ", ".join(f"{image.width}×{image.height}" for image in images)
    return f" It received {counted(len(images), 'image')} ({sizes}) and cannot see {'it' if len(images) == 1 else 'them'}."


def respond(request: dict[str, Any], label: str = "sandbox model", images: Sequence[Any] = ()) -> str:
    """Raw Gemma-4-syntax text for this request; `images`: what the server loaded (width, height)."""
    text = _respond(request, label)
    return text + received_images(images) if text.startswith(f"[{label}") else text


def _respond(request: dict[str, Any], label: str) -> str:
    messages = request.get("messages") or []
    tool_results: list[tuple[str, str]] = []
    for msg in reversed(messages):
        if msg.get("role") != "tool":
            break
        tool_results.insert(0, (msg.get("name") or msg.get("tool_call_id") or "tool", _text(msg.get("content"))))
    if tool_results:
        parts = [summarize_result(name, result) for name, result in tool_results]
        return f"[{label}: heuristic stand-in, not Gemma] " + " ".join(parts)

    user_text = ""
    for msg in reversed(messages):
        if msg.get("role") == "user":
            user_text = _text(msg.get("content"))
            break
    tools = _tool_names(request)
    if tools and request.get("tool_choice") != "none":
        # The person's words, not the material fenced after them (a digest's labels say "runbook" too).
        lowered = user_text.split("<<<DATA", 1)[0].lower()
        words = set(re.findall(r"[a-z]+", lowered))
        for triggers, name_parts in _INTENTS:
            # Words match whole ("status?" is status); a trigger with punctuation ("$", "up?") as written.
            if any(t in words if t.isalpha() else t in lowered for t in triggers):
                for name, params in tools:
                    if any(part in name.lower() for part in name_parts):
                        return f"Checking with {name}. " + _call(name, params, user_text)
        # No intent in the person's words ("what went wrong here?") but logs came with them: read those.
        if _LOG_MATERIAL in user_text:
            for name, params in tools:
                if "log" in name.lower():
                    return f"Checking with {name}. " + _call(name, params, user_text)
    if asked := _ARITHMETIC.search(user_text):
        value = _OPERATORS[asked[2]](int(asked[1]), int(asked[3]))
        return f"[{label}: heuristic stand-in, not Gemma] {value}"
    preview = " ".join(user_text.split())
    preview = preview if len(preview) <= 120 else preview[:117] + "..."
    return (
        f"[{label}: heuristic stand-in, not Gemma] I am the sandbox model, a simple rule-based "
        f"responder. I received: \"{preview}\". Ask about status, zones, cost or logs to see a tool call."
    )
