"""The gate before bolt: signed bodies that bolt's own code, or ours, cannot handle, recognised
before bolt sees them (the form bodies bolt would misread: bot/bolt_form_adapter.py).

bolt derives every listener argument (`action`, `view`…) eagerly, for middleware too, and for
its own unhandled-request log line (slack_bolt/logger/messages.py `_build_filtered_body` calls
`view.get` on whatever `view` is); it raises on structurally impossible bodies, and so would our
listeners. Slack's real payloads always carry these shapes, so a body that does not is forged or
corrupted and gets a 400 naming the field, instead of a 500 and a traceback:

- nesting deeper than any Slack payload (`MAX_NESTING`), measured on the text before any JSON
  parser sees it (Python's json recurses, and raises RecursionError, near 1,000 levels);
- the fields bolt reads, with the types Slack sends: `view`, `actions`, `event`, `message`,
  `container` are objects (a list of objects for `actions`), never null when present; `user`,
  `team`, `channel`, `enterprise` are an object or an id (null only where Slack sends null:
  org-wide installs have `team: null`), in the body and in every object bolt looks into for them
  (the event, its message, the first authorization); the ids and keys bolt matches listeners on
  (`type`, `callback_id`, `action_id`, `block_id`) are strings.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs, parse_qsl

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

# Slack's deepest payloads (an event's message with rich_text lists inside a quote, inside an
# attachment's blocks; a modal's state values) stay under 20 levels; the cap leaves room and stops
# bodies built to make a parser recurse (1,000 or 5,000 levels).
MAX_NESTING = 64
NESTING = f"nesting (deeper than {MAX_NESTING} levels)"  # the reason given for such a body
# A JSON string (an unterminated one runs to the end: linear however many quotes a body holds), or a bracket.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\Z)|[\[\]{}]')


def nesting_depth_exceeds(text: str, limit: int = MAX_NESTING) -> bool:
    """True when the JSON text opens more than `limit` objects or arrays inside one another.
    Counted over the text, without parsing it, so no depth can make this recurse."""
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif bracket in ("]", "}"):
            depth -= 1
    return False


def _json_object(text: str) -> object:
    """The parsed JSON text, or why not (a str): NESTING past MAX_NESTING, "json" when it does not parse.
    (A JSON text that is itself a string is not a Slack body either: the callers want an object.)"""
    if nesting_depth_exceeds(text):
        return NESTING
    try:
        return json.loads(text)
    except ValueError:
        return "json"


def interaction_body(raw: bytes) -> object:
    """The decoded `payload=` form field, None if this is not an interaction request; a string
    (why) when it cannot be read."""
    if not raw.startswith(b"payload="):
        return None
    try:
        payload = parse_qs(raw.decode("utf-8"), strict_parsing=True).get("payload", [""])[0]
    except (ValueError, UnicodeDecodeError):
        return "payload"
    body = _json_object(payload)
    return "payload" if body == "json" else body


class _Shape(BaseModel):
    """A Slack object: the fields named here must have Slack's types; any others pass through."""
    model_config = ConfigDict(extra="allow")


def _never_null(value: Any) -> Any:
    """For fields that may be absent but not null when present (bolt dereferences them): the
    validator runs on what a body gives, never on a default."""
    if value is None:
        raise ValueError("null where Slack sends an object")
    return value


Id = str | dict[str, Any]  # `user`, `team`, `channel`, `enterprise` as bolt reads them: an id, or an object


class _Ids(_Shape):
    """The identity fields bolt looks for in any object it searches for them (extract_team_id…)."""
    user: Id | None = None
    team: Id | None = None
    channel: Id | None = None
    enterprise: Id | None = None

    @field_validator("user", "team", "channel", "enterprise")
    @classmethod
    def _object_ids_are_strings(cls, value: Id | None) -> Id | None:
        if isinstance(value, dict) and not isinstance(value.get("id", ""), (str, type(None))):
            raise ValueError("id is not a string")
        return value


class _Named(_Shape):
    id: str | None = None
    team_id: str | None = None


class _Action(_Shape):
    action_id: str
    block_id: str | None = None


class _Container(_Shape):
    type: str | None = None
    channel_id: str | None = None
    message_ts: str | None = None
    thread_ts: str | None = None
    view_id: str | None = None


class Interaction(_Shape):
    type: str
    user: _Named | None = None
    team: _Named | None = None
    channel: _Named | None = None
    enterprise: _Named | None = None
    container: _Container | None = None
    view: dict[str, Any] | None = None
    message: _Ids | None = None
    actions: list[_Action] | None = None
    response_urls: list[dict[str, Any]] | None = None
    callback_id: str | None = None
    action_id: str | None = None  # block_suggestion: bolt matches its listeners on these
    block_id: str | None = None
    trigger_id: str | None = None
    response_url: str | None = None

    _present_not_null = field_validator("container", "view", "message", "actions", "response_urls",
                                        mode="before")(_never_null)


class _File(_Shape):
    id: str | None = None
    name: str | None = None
    mimetype: str | None = None


class Event(_Ids):
    type: str
    text: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    subtype: str | None = None
    files: list[_File] | None = None
    message: _Ids | None = None
    previous_message: _Ids | None = None
    item: _Ids | None = None
    assistant_thread: _Ids | None = None

    _present_not_null = field_validator("message", "previous_message", "item", "assistant_thread",
                                        mode="before")(_never_null)


class Envelope(_Ids):
    type: str
    team_id: str | None = None
    event_id: str | None = None
    challenge: str | None = None
    event: Event | None = None

    _present_not_null = field_validator("event", mode="before")(_never_null)
    authorizations: list[_Ids] | None = None


class Command(_Shape):
    command: str
    user_id: str
    channel_id: str
    team_id: str = ""
    text: str = ""

    @field_validator("command", "user_id", "channel_id")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value:
            raise ValueError("empty")
        return value


def _first_field(error: ValidationError) -> str:
    location = error.errors()[0]["loc"]
    return str(location[0]) if location else "body"


def malformed_reason(body: object) -> str | None:
    """The field of an interaction payload (from `interaction_body`) that is not as Slack sends it, else None."""
    if isinstance(body, str):
        return body
    if not isinstance(body, dict):
        return "payload"
    try:
        interaction = Interaction.model_validate(body)
    except ValidationError as error:
        return _first_field(error)
    if interaction.type == "block_actions":
        if interaction.user is None or not interaction.user.id:
            return "user"
        if not interaction.actions:
            return "actions"
    return None


def malformed_event(raw: bytes) -> str | None:
    """The field of an Events API body that is not as Slack sends it, else None."""
    body = _json_object(raw.decode("utf-8"))
    if isinstance(body, str):
        return body if body in (NESTING, "json") else "body"
    try:
        envelope = Envelope.model_validate(body)
    except ValidationError as error:
        return _first_field(error)
    if envelope.type == "event_callback" and envelope.event is None:
        return "event"
    return None


def malformed_command(raw: bytes) -> str | None:
    """The field of a slash command's form that is missing or empty, else None."""
    fields = dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True))
    try:
        Command.model_validate(fields)
    except ValidationError as error:
        return _first_field(error)
    return None


def response_urls(raw: bytes) -> list[object]:
    """Every response_url a request names (a command's field; an interaction's payload and its
    `response_urls` list), for the web process to check against Slack's hosts before use."""
    interaction = interaction_body(raw)
    if isinstance(interaction, dict):
        urls = [interaction["response_url"]] if "response_url" in interaction else []
        listed = interaction.get("response_urls")
        for entry in listed if isinstance(listed, list) else []:
            urls.append(entry.get("response_url") if isinstance(entry, dict) else entry)
        return urls
    if interaction is None and not raw.lstrip().startswith(b"{"):
        try:
            fields = parse_qs(raw.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            return []
        return list(fields.get("response_url", []))
    return []
