"""Interaction payloads Slack would never send, recognised before bolt sees them.

bolt derives every listener argument (`action`, `view`…) eagerly, for middleware too, and
raises on structurally impossible bodies; Slack's real payloads always carry these shapes, so
a body that does not is forged or corrupted and gets a 400 instead of a 500.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs


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
