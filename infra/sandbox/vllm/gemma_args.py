"""Gemma 4 call arguments as vLLM 0.33.0 reads them: argument text -> JSON, typed by the schema.

Follows, rule for rule, `vllm/parser/gemma4.py` (`_parse_gemma4_fields`, `_parse_gemma4_array`,
`_drop_call_closer`, `_gemma4_arg_converter`), `vllm/parser/engine/parser_engine.py`
(`_coerce_value`, `_fix_arg_types`, `_safe_arg_prefix`, `_streamable_string_keys`) and
`vllm/tool_parsers/utils.py` (`extract_types_from_schema`, `coerce_to_schema_type`) of the
0.33.0 wheel. Facts the conformance cases pin down:

- keys are the text up to the next `:` — junk bare values split the way vLLM splits them
  (`query:a}b,limit:2` -> {"query": "a", "}b,limit": "2"});
- leaves are strings; the declared schema types them, resolving `anyOf`/`oneOf`/`allOf`, type
  lists and `enum` values, and otherwise `json.loads` of the bare value (`1e3` -> 1000.0,
  `4.0` stays a float for an integer field, `inf` stays the string "inf");
- a tool that is not declared (or declares no properties) keeps every leaf a string.
"""

from __future__ import annotations

import json
import math
from typing import Any

STR_DELIM = '<|"|>'
_DELIM_LEN = len(STR_DELIM)
_PARTIAL_DELIM_SUFFIXES = tuple(STR_DELIM[:k] for k in range(len(STR_DELIM), 0, -1))


def strip_partial_delim(value: str) -> str:
    """Drop a trailing partial `<|"|>` so it never leaks into a streamed value."""
    for suffix in _PARTIAL_DELIM_SUFFIXES:
        if value.endswith(suffix):
            return value[: -len(suffix)]
    return value


# --------------------------------------------------------------------------- argument text


def _skip_bracketed(s: str, i: int, opener: str, closer: str) -> tuple[int, int]:
    """From just after `opener`: (index after the matching closer or end, remaining depth)."""
    depth = 1
    n = len(s)
    while i < n and depth > 0:
        if s.startswith(STR_DELIM, i):
            nd = s.find(STR_DELIM, i + _DELIM_LEN)
            i = n if nd == -1 else nd + _DELIM_LEN
            continue
        if s[i] == opener:
            depth += 1
        elif s[i] == closer:
            depth -= 1
        i += 1
    return i, depth


def parse_fields(s: str, *, partial: bool = False) -> tuple[dict[str, Any], str | None]:
    """`k:v,…` -> (dict with string leaves, key of a trailing unterminated string or None)."""
    if not s or not s.strip():
        return {}, None
    out: dict[str, Any] = {}
    open_key: str | None = None
    i, n = 0, len(s)
    while i < n:
        while i < n and s[i] in " ,\n\t":
            i += 1
        if i >= n:
            break
        start = i
        while i < n and s[i] != ":":
            i += 1
        if i >= n:
            break
        key = s[start:i].strip()
        if key.startswith(STR_DELIM) and key.endswith(STR_DELIM):
            key = key[_DELIM_LEN:-_DELIM_LEN]
        i += 1
        while i < n and s[i] in " \n\t":
            i += 1
        if i >= n:
            if not partial:
                out[key] = ""
            break
        if s.startswith(STR_DELIM, i):
            i += _DELIM_LEN
            end = s.find(STR_DELIM, i)
            if end == -1:
                out[key] = strip_partial_delim(s[i:]) if partial else s[i:]
                open_key = key
                break
            out[key] = s[i:end]
            i = end + _DELIM_LEN
        elif s[i] in "{[":
            opener = s[i]
            closer = "}" if opener == "{" else "]"
            inner = i + 1
            i, depth = _skip_bracketed(s, inner, opener, closer)
            body = s[inner:i] if depth > 0 else s[inner : i - 1]
            sub = parse_fields if opener == "{" else parse_array
            value = sub(body, partial=True) if depth > 0 else sub(body)
            out[key] = value[0] if opener == "{" else value
        else:
            start = i
            while i < n and s[i] not in ",}]":
                i += 1
            if partial and i >= n:
                break  # may still grow (`tru` -> `true`): withheld
            if i == start:
                break  # vLLM logs "made no progress" and gives up
            raw = s[start:i].strip()
            if partial and raw.endswith("."):
                break  # `108.` may become `108.2`
            out[key] = raw
    return out, open_key


def parse_array(s: str, *, partial: bool = False) -> list[Any]:
    items: list[Any] = []
    i, n = 0, len(s)
    while i < n:
        while i < n and s[i] in " ,\n\t":
            i += 1
        if i >= n:
            break
        if s.startswith(STR_DELIM, i):
            i += _DELIM_LEN
            end = s.find(STR_DELIM, i)
            if end == -1:
                items.append(s[i:])
                break
            items.append(s[i:end])
            i = end + _DELIM_LEN
        elif s[i] in "{[":
            opener = s[i]
            closer = "}" if opener == "{" else "]"
            inner = i + 1
            i, depth = _skip_bracketed(s, inner, opener, closer)
            body = s[inner:i] if depth > 0 else s[inner : i - 1]
            if opener == "{":
                items.append(parse_fields(body, partial=depth > 0)[0])
            else:
                items.append(parse_array(body, partial=depth > 0))
        else:
            start = i
            while i < n and s[i] not in ",]":
                i += 1
            if partial and i >= n:
                break
            if i == start:
                break
            raw = s[start:i].strip()
            if partial and raw.endswith("."):
                break
            items.append(raw)
    return items


def drop_call_closer(text: str, paren_excess: bool) -> str:
    """The call body's own closer: a trailing `}`, or `)` when there are more `)` than `(`."""
    if text.endswith("}") or (text.endswith(")") and paren_excess):
        return text[:-1]
    return text


def convert(raw_args: str, partial: bool) -> str:
    """Raw text after the call's opening bracket -> JSON object text (string leaves)."""
    text = raw_args.strip()
    text = drop_call_closer(text, text.count("(") < text.count(")"))
    return json.dumps(parse_fields(text, partial=partial)[0], ensure_ascii=False)


# --------------------------------------------------------------------------- schema typing


def schema_types(schema: Any) -> list[str]:
    """Every type a JSON Schema allows (`type`, type lists, `enum` values, anyOf/oneOf/allOf)."""
    if not isinstance(schema, dict):
        return ["string"]
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for value in enum:
            types.add(_json_type(value))
    for choice_field in ("anyOf", "oneOf", "allOf"):
        choices = schema.get(choice_field)
        if isinstance(choices, list):
            for choice in choices:
                types.update(schema_types(choice))
    return list(types) if types else ["string"]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


_TYPE_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
    "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
    "float": "number", "float32": "number", "float64": "number", "double": "number",
    "bool": "boolean", "dict": "object", "arr": "array", "list": "array", "sequence": "array",
}  # fmt: skip
_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")
_UNCHANGED = object()


def _finite(obj: Any) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return True


def _try_type(value: str, t: str) -> Any:
    if t == "null":
        return None if value.lower() == "null" else _UNCHANGED
    if t == "integer":
        try:
            return int(value)
        except ValueError:
            return _UNCHANGED
    if t == "number":
        try:
            return int(value)
        except ValueError:
            pass
        try:
            f = float(value)
        except ValueError:
            return _UNCHANGED
        if not math.isfinite(f):
            return _UNCHANGED
        return f if f != int(f) else int(f)
    if t == "boolean":
        low = value.lower().strip()
        return True if low in ("true", "1") else False if low in ("false", "0") else _UNCHANGED
    try:  # object, array
        parsed = json.loads(value)
    except ValueError:
        return _UNCHANGED
    return parsed if _finite(parsed) else _UNCHANGED


def coerce_string(value: str, types: list[str]) -> Any:
    """vLLM's `coerce_to_schema_type`: first type (null > integer > … > string) that fits,
    else `json.loads` of the text, else the text."""
    wanted = {_TYPE_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in types}
    for t in _PRIORITY:
        if t not in wanted:
            continue
        if t == "string":
            return value
        got = _try_type(value, t)
        if got is not _UNCHANGED:
            return got
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if _finite(parsed) else value


def coerce_value(value: Any, schema: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return coerce_string(value, schema_types(schema))
    if isinstance(value, dict):
        props = schema.get("properties")
        return coerce_args(value, props) if isinstance(props, dict) else value
    if isinstance(value, list):
        items = schema.get("items")
        return [coerce_value(v, items) for v in value] if isinstance(items, dict) else value
    return value


def coerce_args(args: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """Type each argument whose property schema is declared; others stay as they are."""
    return {k: coerce_value(v, properties[k]) if isinstance(properties.get(k), dict) else v for k, v in args.items()}


def tool_properties(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    """`parameters.properties` of the declared tool `name`; {} when undeclared (vLLM's
    `find_tool_properties`)."""
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            return (fn.get("parameters") or {}).get("properties") or {}
    return {}


def fix_arg_types(args_json: str, name: str, tools: list[dict[str, Any]] | None) -> str:
    """vLLM's `_fix_arg_types`: re-serialized only when the schema changed a value."""
    if not tools or not name:
        return args_json
    try:
        args = json.loads(args_json)
    except ValueError:
        return args_json
    props = tool_properties(tools, name)
    if not isinstance(args, dict) or not props:
        return args_json
    return json.dumps(coerce_args(args, props), ensure_ascii=False)


def arguments_json(raw_args: str, name: str, tools: list[dict[str, Any]] | None, *, partial: bool = False) -> str:
    """The `arguments` string vLLM returns for a call's raw argument text."""
    return fix_arg_types(convert(raw_args, partial), name, tools)


# --------------------------------------------------------------------------- streaming


def streamable_string_keys(properties: dict[str, Any]) -> set[str] | None:
    """Keys whose open string value may stream; None (no schema) means every key."""
    if not properties:
        return None
    return {k for k, schema in properties.items() if set(schema_types(schema)) == {"string"}}


def safe_arg_prefix(json_str: str, string_keys: set[str] | None) -> str:
    """The prefix of `json_str` up to its last top-level value: a trailing non-string value is
    withheld (its serialization may still change); an open string of a streamable key is not."""
    last_colon, last_key, pending_key = -1, None, None
    in_string = escape = False
    string_start, depth = -1, 0
    for i, c in enumerate(json_str):
        if escape:
            escape = False
            continue
        if in_string:
            if c == "\\":
                escape = True
            elif c == '"':
                in_string = False
                if depth == 1 and string_start >= 0:
                    pending_key = json_str[string_start + 1 : i]
            continue
        if c == '"':
            in_string, string_start = True, i
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        elif c == ":" and depth == 1:
            last_colon, last_key, pending_key = i, pending_key, None
    if last_colon < 0:
        return ""
    end = last_colon + 1
    while end < len(json_str) and json_str[end] in " \t\n\r":
        end += 1
    if end >= len(json_str) or json_str[end] != '"':
        return json_str[:end]
    if string_keys is not None and last_key not in string_keys:
        return json_str[:end]
    escape = False
    for i in range(end + 1, len(json_str)):
        c = json_str[i]
        if escape:
            escape = False
        elif c == "\\":
            escape = True
        elif c == '"':
            return json_str[:i]
    return json_str
