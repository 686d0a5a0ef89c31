"""Interaction payloads Slack would never send, and form bodies bolt would misread,
recognised before bolt sees them.

bolt derives every listener argument (`action`, `view`…) eagerly, for middleware too, and
raises on structurally impossible bodies; Slack's real payloads always carry these shapes, so
a body that does not is forged or corrupted and gets a 400 instead of a 500.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, parse_qsl


def interaction_body(raw: bytes) -> dict | str | None:
    """The decoded `payload=` form field, None if this is not an interaction request."""
    if not raw.startswith(b"payload="):
        return None
    try:
        payload = parse_qs(raw.decode("utf-8"), strict_parsing=True).get("payload", [""])[0]
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return "unparsable"


def malformed_reason(body: dict | str) -> str | None:
    if not isinstance(body, dict):
        return "payload"
    if body.get("type") != "block_actions":
        return None
    user = body.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not user["id"]:
        return "user"
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions:
        return "actions"
    for action in actions:
        if not isinstance(action, dict) or not isinstance(action.get("action_id"), str):
            return "actions"
    for name in ("channel", "team", "container"):
        if name in body and body[name] is not None and not isinstance(body[name], dict):
            return name
    return None


def form_bolt_misreads(raw: bytes) -> dict | None:
    """The fields of a form body (a slash command) that bolt would misread, else None.

    bolt takes any form body that merely contains the text "payload" for an interaction, finds
    no `payload` field and dispatches an empty body (slack_bolt/request/internals.parse_body,
    bolt 1.30): `/tpu up payload` would get a 404. Such bodies are handed to bolt parsed.
    """
    if b"payload" not in raw or raw.startswith(b"payload=") or raw.lstrip().startswith(b"{"):
        return None
    try:
        fields = dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        return None
    return None if "payload" in fields else fields
