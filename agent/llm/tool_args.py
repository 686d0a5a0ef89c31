"""Validate and coerce tool-call arguments against an action's pydantic model.

What arrives from vLLM 0.33's gemma4 parser (reference `gemma4-wire.md` §2.2, §4):
- values the tool schema does not type come back as strings: `"42"`, `"true"`, `"null"` (#47906);
- plain quotes the model wrote are kept inside string values: `"\\"x\\""`, `["\\"a\\""]` (#51284);
- `function.arguments` is a JSON string that may still be invalid (#38946, #39072).
Our own raw-text parser (`gemma4_syntax`) instead returns bare numbers typed (`12345`) even for
string parameters. This module turns either into the action's model, or raises
`ToolArgumentError` whose text is written for the model so it can correct the call (#39072
workaround: "return a tool error so the model retries").

Policy decisions:
- The same call means the same thing whether or not the server typed it: a bare value the
  declared schema types in vLLM (`coerce_to_schema_type`, then `json.loads`) is read here the
  same way when it arrives as a string (from an untyped schema or our own raw-text parser).
- Booleans accept JSON true/false, the strings "true"/"false" (any case, quotes stripped) and,
  as vLLM does for a boolean field, "1"/"0" (and 1/0). pydantic's lax mode would also take
  "yes", "on": from a 2B model those are more often confusion than intent, and a wrong boolean
  can flip an action's meaning.
- Integers/numbers accept numeric strings ("42", " 3.5 ", "1e3"), never booleans (lax int takes
  True); an integer field takes a whole float ("4.0", "1e3"), as it takes vLLM's json-loaded 4.0.
- Strings accept bare numbers (rendered as written) and have one layer of matching plain quotes
  stripped, for list items and nested models too. Nothing else is stripped.
- `null` (JSON null or the string "null") for a field that is not Optional but has a default
  means "not given": the default applies. For a required non-Optional field it is an error.
- Unknown keys are an ERROR unless the model explicitly sets `extra="ignore"` / `"allow"`.
  Silently dropping a misspelled optional key (`dryrun` for `dry_run`) would run the action with
  a default the model did not ask for; the error names the accepted fields so it can retry.
"""

from __future__ import annotations

import difflib
import enum
import json
import re
import types
import typing
from typing import Any, Literal, Union

import pydantic
from pydantic import BaseModel
from pydantic.fields import FieldInfo

_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_NULL_WORDS = {"null"}  # what vLLM returns for an untyped bare `null` (§2.5 row 5)
_MAX_SHOWN = 80


class ToolArgumentError(ValueError):
    """Arguments the action cannot accept. `str(err)` is meant to be sent back to the model as the
    tool result; `problems` holds one line per issue (for logs and tests)."""

    def __init__(self, tool: str, problems: list[str], accepted: str) -> None:
        self.tool = tool
        self.problems = problems
        lines = [f"Invalid arguments for tool `{tool}`:"]
        lines += [f"- {p}" for p in problems]
        if accepted:
            lines.append(f"Accepted fields: {accepted}.")
        lines.append(f"Call `{tool}` again with corrected arguments as a JSON object.")
        super().__init__("\n".join(lines))


def coerce_arguments(model: type[BaseModel], raw: str | dict[str, Any] | None, *, tool_name: str | None = None) -> BaseModel:
    """Parse `raw` (the `function.arguments` string or an already-parsed dict) into `model`."""
    tool = tool_name or model.__name__
    accepted = describe_fields(model)
    data = _load_arguments(raw, tool, accepted)
    problems: list[str] = []
    cleaned = _coerce_fields(model, data, "", problems)
    try:
        instance = model.model_validate(cleaned)
    except pydantic.ValidationError as exc:
        # One line per field: skip pydantic's view of a field our own rules already reported.
        reported = {p.split('"')[1] for p in problems if p.startswith('"')}
        problems += [p for p in _describe_validation_errors(model, exc) if p.split('"')[1] not in reported]
        raise ToolArgumentError(tool, problems, accepted) from exc
    if problems:
        raise ToolArgumentError(tool, problems, accepted)
    return instance


def describe_fields(model: type[BaseModel]) -> str:
    """`query (string, required), limit (integer)` — what the model may send."""
    parts = []
    for name, info in model.model_fields.items():
        req = ", required" if info.is_required() else ""
        parts.append(f"{info.alias or name} ({describe_type(info.annotation)}{req})")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# Loading


def _load_arguments(raw: str | dict[str, Any] | None, tool: str, accepted: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    text = raw.strip()
    if not text:
        # A streamed call whose name chunk carried no arguments at all (§2.4, §3.3).
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"the arguments are not valid JSON ({exc.msg} at character {exc.pos}): {_shorten(text)}"
        raise ToolArgumentError(tool, [problem], accepted) from exc
    if not isinstance(data, dict):
        problem = f"the arguments must be a JSON object with named fields, got {type(data).__name__}: {_shorten(text)}"
        raise ToolArgumentError(tool, [problem], accepted)
    return data


# --------------------------------------------------------------------------------------------
# Pre-coercion (before pydantic, so our deliberate rules win over lax mode)


def _coerce_fields(model: type[BaseModel], data: dict[str, Any], prefix: str, problems: list[str]) -> dict[str, Any]:
    by_key: dict[str, tuple[str, FieldInfo]] = {}
    for name, info in model.model_fields.items():
        by_key[name] = (name, info)
        if info.alias:
            by_key[info.alias] = (name, info)
    extra = model.model_config.get("extra")
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in by_key:
            if extra == "allow":
                out[key] = value
            elif extra != "ignore":
                problems.append(_unknown_key_problem(path, key, list(by_key)))
            continue
        name, info = by_key[key]
        if _is_null(value) and not _allows_none(info.annotation):
            if info.is_required():
                problems.append(f'"{path}" is required and cannot be null; expected {describe_type(info.annotation)}.')
            # Not Optional but defaulted: null means "not given" (vLLM row 5 sends "null" strings).
            continue
        out[key] = _coerce_value(info.annotation, value, path, problems)
    return out


def _coerce_value(annotation: Any, value: Any, path: str, problems: list[str]) -> Any:
    if _is_null(value) and _allows_none(annotation):
        return None
    target = _strip_optional(annotation)
    origin = typing.get_origin(target)
    if target is bool:
        return _coerce_bool(value, path, problems)
    if target is int or target is float:
        return _coerce_number(target, value, path, problems)
    if _is_string_like(target):
        return _coerce_string(value)
    if origin in (list, set, frozenset, tuple) or target in (list, set, tuple):
        return _coerce_sequence(target, value, path, problems)
    if isinstance(target, type) and issubclass(target, BaseModel):
        return _coerce_nested(target, value, path, problems)
    return value


def _coerce_bool(value: Any, path: str, problems: list[str]) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = _strip_plain_quotes(value.strip()).strip().lower()
        if word in ("true", "false", "1", "0"):
            return word in ("true", "1")
    problems.append(f'"{path}" must be a boolean, true or false; got {_show(value)}.')
    return value


def _coerce_number(target: type, value: Any, path: str, problems: list[str]) -> Any:
    kind = "an integer" if target is int else "a number"
    if isinstance(value, bool):
        problems.append(f'"{path}" must be {kind}, not a boolean; got {_show(value)}.')
        return value
    if isinstance(value, str):
        text = _strip_plain_quotes(value.strip()).strip()
        if _INT_RE.fullmatch(text):
            return int(text) if target is int else float(text)
        if _FLOAT_RE.fullmatch(text):
            number = float(text)
            if target is float:
                return number
            if number.is_integer():
                return int(number)
    # Anything else (3.5 for an int, "abc") is left to pydantic, whose error names the field.
    return value


def _coerce_string(value: Any) -> Any:
    if isinstance(value, str):
        return _strip_plain_quotes(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # Gemma writes `location:12345` bare; vLLM keeps a declared string as "12345" (§2.2).
        return json.dumps(value)
    return value


def _coerce_sequence(target: Any, value: Any, path: str, problems: list[str]) -> Any:
    if isinstance(value, str) and value.strip().startswith("["):
        # An untyped array arrives as its JSON text when the schema lacks `items` (§4 item 1).
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    if not isinstance(value, list):
        return value
    args = typing.get_args(target)
    if not args:
        return value
    if typing.get_origin(target) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return [_coerce_value(a, v, f"{path}[{i}]", problems) for i, (a, v) in enumerate(zip(args, value))] + value[len(args) :]
    return [_coerce_value(args[0], v, f"{path}[{i}]", problems) for i, v in enumerate(value)]


def _coerce_nested(target: type[BaseModel], value: Any, path: str, problems: list[str]) -> Any:
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    if isinstance(value, dict):
        return _coerce_fields(target, value, f"{path}.", problems)
    return value


def _strip_plain_quotes(text: str) -> str:
    """One layer of matching `"…"` or `'…'` the model used instead of `<|"|>` (#51284)."""
    stripped = text.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in ('"', "'"):
        inner = stripped[1:-1]
        # `"a" and "b"` is two quoted words, not one quoted string: leave it alone. A `'` inside
        # single quotes is far more often an apostrophe (`'it's down'`), so that one is stripped.
        if stripped[0] == "'" or '"' not in inner:
            return inner
    return text


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NULL_WORDS)


# --------------------------------------------------------------------------------------------
# Annotation helpers


def _union_members(annotation: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(annotation)
    return None


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _allows_none(annotation: Any) -> bool:
    annotation = _strip_annotated(annotation)
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    members = _union_members(annotation)
    return members is not None and any(_allows_none(m) for m in members)


def _strip_optional(annotation: Any) -> Any:
    """`Optional[X]` / `X | None` -> X. Real unions (`int | str`) are left to pydantic."""
    annotation = _strip_annotated(annotation)
    members = _union_members(annotation)
    if members is None:
        return annotation
    rest = [m for m in members if m is not type(None)]
    return _strip_annotated(rest[0]) if len(rest) == 1 else annotation


def _is_string_like(target: Any) -> bool:
    if target is str:
        return True
    if typing.get_origin(target) is Literal:
        return all(isinstance(a, str) for a in typing.get_args(target))
    return isinstance(target, type) and issubclass(target, enum.Enum) and issubclass(target, str)


def describe_type(annotation: Any) -> str:
    """Type names as the model sees them in the tool schema."""
    annotation = _strip_annotated(annotation)
    members = _union_members(annotation)
    if members is not None:
        names = [describe_type(m) for m in members if m is not type(None)]
        text = " or ".join(names)
        return f"{text} or null" if len(names) < len(members) else text
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(json.dumps(m.value) for m in annotation)
    if origin in (list, set, frozenset, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"array of {describe_type(args[0])}" if args else "array"
    if origin is dict or annotation is dict:
        return "object"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", type(None): "null"}
    return simple.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """Follow a pydantic error location through fields and list items; None if lost."""
    current: Any = model
    for part in loc:
        current = _strip_optional(current)
        if isinstance(part, str) and isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(part) or next(
                (f for f in current.model_fields.values() if f.alias == part), None
            )
            if info is None:
                return None
            current = info.annotation
        elif isinstance(part, int) and typing.get_origin(current) in (list, set, frozenset, tuple):
            args = typing.get_args(current)
            current = args[0] if args else Any
        else:
            return None
    return current


# --------------------------------------------------------------------------------------------
# Messages for the model


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe_validation_errors(model: type[BaseModel], exc: pydantic.ValidationError) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False):
        # pydantic appends the union member / validator tag to loc; keep only real path parts.
        loc = tuple(p for p in err["loc"] if isinstance(p, int) or not str(p).startswith(("function-", "literal[")))
        path = _format_loc(loc)
        annotation = _annotation_at(model, loc)
        expected = describe_type(annotation) if annotation is not None else None
        if err["type"] == "missing":
            problems.append(f'"{path}" is required ({expected or "see accepted fields"}) but was not given.')
            continue
        detail = f"expected {expected}, got {_show(err.get('input'))}" if expected else err["msg"]
        problems.append(f'"{path}": {detail} ({err["msg"]}).')
    return problems


def _unknown_key_problem(path: str, key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f' Did you mean "{close[0]}"?' if close else ""
    return f'"{path}" is not a field of this tool.{hint}'


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return _shorten(text)


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"
