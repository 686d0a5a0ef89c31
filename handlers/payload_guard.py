"""Interaction payloads Slack would never send, recognised before bolt sees them (the form
bodies bolt would misread: bot/bolt_form_adapter.py).

bolt derives every listener argument (`action`, `view`…) eagerly, for middleware too, and
raises on structurally impossible bodies; Slack's real payloads always carry these shapes, so
a body that does not is forged or corrupted and gets a 400 instead of a 500.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, parse_qsl

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator


def interaction_body(raw: bytes) -> dict | str | None:
    """The decoded `payload=` form field, None if this is not an interaction request."""
    if not raw.startswith(b"payload="):
        return None
    try:
        payload = parse_qs(raw.decode("utf-8"), strict_parsing=True).get("payload", [""])[0]
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return "unparsable"


class _Shape(BaseModel):
    """A Slack object: the fields named here must have Slack's types; any others pass through."""
    model_config = ConfigDict(extra="allow")


class _Named(_Shape):
    id: str | None = None


class _Action(_Shape):
    action_id: str


class Interaction(_Shape):
    type: str
    user: _Named | None = None
    team: _Named | None = None
    channel: _Named | None = None
    enterprise: _Named | None = None
    container: dict[str, Any] | None = None
    view: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    actions: list[_Action] | None = None
    callback_id: str | None = None
    trigger_id: str | None = None
    response_url: str | None = None


class _File(_Shape):
    id: str | None = None
    name: str | None = None
    mimetype: str | None = None


class Event(_Shape):
    type: str
    user: str | dict[str, Any] | None = None
    channel: str | dict[str, Any] | None = None
    text: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    subtype: str | None = None
    files: list[_File] | None = None


class Envelope(_Shape):
    type: str
    team_id: str | None = None
    event_id: str | None = None
    challenge: str | None = None
    event: Event | None = None
    authorizations: list[dict[str, Any]] | None = None


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


def malformed_reason(body: dict | str) -> str | None:
    """The field of an interaction payload that is not as Slack sends it, else None."""
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
    try:
        envelope = Envelope.model_validate_json(raw)
    except ValidationError as error:
        return _first_field(error) if error.errors()[0]["type"] != "json_invalid" else "json"
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
