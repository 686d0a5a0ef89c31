"""What Slack's Web API rejects, so the stand-in (infra/sandbox/slack_api.py) rejects it too.

Blocks and views are checked with slack_sdk's own Block Kit models (`Block.parse(...).to_dict()`
runs every validator the models carry: section text ≤ 3000, header ≤ 150, button value ≤ 2000,
…) plus the documented limits the models do not hold (50 blocks per message, 100 per view,
12,000 characters of markdown blocks per payload). A rejection reads as Slack's does:

    {"ok": false, "error": "invalid_blocks",
     "errors": ["must be less than 3001 characters [json-pointer:/blocks/0/text/text]"],
     "response_metadata": {"messages": ["[ERROR] must be less than 3001 characters [json-pointer:/blocks/0/text/text]"]}}

Tokens: bot methods want a bot token (`xoxb-`), `apps.connections.open` an app-level token
(`xapp-`); the other kind gets `not_allowed_token_type`, a wrong token `invalid_auth`, none
`not_authed`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

MESSAGE_BLOCKS = 50  # blocks per message
VIEW_BLOCKS = 100  # blocks per modal or Home tab
MARKDOWN_BLOCKS_TEXT = 12_000  # cumulative text of all markdown blocks in one payload
TEXT_LIMIT = 40_000  # top-level text: longer is truncated, with the warning message_truncated

APP_TOKEN_METHODS = frozenset({"apps.connections.open"})
# Methods that post into (or read) a conversation, and so need the bot to be in it.
CONVERSATION_METHODS = frozenset({
    "chat.postMessage", "chat.postEphemeral", "chat.update", "chat.delete", "chat.startStream",
    "chat.appendStream", "chat.stopStream", "conversations.replies", "conversations.history",
})


def failure(error: str, *messages: str, **extra: Any) -> dict:
    """Slack's error shape; validation reasons ride in `errors` and `response_metadata.messages`."""
    body: dict[str, Any] = {"ok": False, "error": error, **extra}
    if messages:
        body["errors"] = list(messages)
        body["response_metadata"] = {"messages": [f"[ERROR] {m}" for m in messages]}
    return body


def token_error(method: str, authorization: str | None, bot_token: str, app_token: str) -> dict | None:
    """None when the Bearer token may call `method`; else Slack's answer."""
    if not authorization or not authorization.startswith("Bearer ") or authorization == "Bearer ":
        return failure("not_authed")
    token = authorization[len("Bearer "):]
    wants_app = method in APP_TOKEN_METHODS
    if token in (bot_token, app_token):
        is_app = token == app_token
        return None if is_app == wants_app else failure("not_allowed_token_type")
    if token.startswith("xapp-") != wants_app and token.startswith(("xapp-", "xoxb-")):
        return failure("not_allowed_token_type")
    return failure("invalid_auth")


def parsed(value: Any) -> Any:
    """A JSON argument as Slack reads it: form bodies carry it as a JSON string."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def block_errors(blocks: Any, *, limit: int = MESSAGE_BLOCKS, pointer: str = "/blocks") -> list[str]:
    """Why Slack would refuse these blocks (empty: it would take them)."""
    if not isinstance(blocks, list):
        return [f"must be an array [json-pointer:{pointer}]"]
    if len(blocks) > limit:
        return [f"must contain at most {limit} items [json-pointer:{pointer}]"]
    errors: list[str] = []
    markdown_chars = 0
    for i, block in enumerate(blocks):
        where = f"{pointer}/{i}"
        if not isinstance(block, dict) or not block.get("type"):
            errors.append(f"missing required field: type [json-pointer:{where}]")
            continue
        if block["type"] == "markdown":
            markdown_chars += len(str(block.get("text", "")))
        reason, inside = _model_error(block)
        if reason:
            errors.append(f"{reason} [json-pointer:{where}{inside}]")
    if markdown_chars > MARKDOWN_BLOCKS_TEXT:
        errors.append(f"markdown blocks must total at most {MARKDOWN_BLOCKS_TEXT} characters [json-pointer:{pointer}]")
    return errors


def _model_error(block: dict) -> tuple[str, str]:
    """slack_sdk's verdict on one block (its parser and every validator it holds), plus what Slack
    refuses that the models only log: an unknown type, an unknown field, an empty text object."""
    logger = logging.getLogger("slack_sdk.models.blocks.blocks")
    previous, logger.disabled = logger.disabled, True  # the parser logs unknown types as it skips them
    try:
        model = Block.parse(block)
        if model is None:
            return f"unsupported type: {block.get('type')}", "/type"
        model.to_dict()
    except (SlackObjectFormationError, TypeError, ValueError, KeyError, AttributeError) as error:
        return str(error) or type(error).__name__, ""
    finally:
        logger.disabled = previous
    unknown = sorted(set(block) - set(model.attributes) - {"type"})
    if unknown:
        return f"invalid additional property: {unknown[0]}", ""
    empty = _empty_text(block)
    return ("must be more than 0 characters", empty) if empty is not None else ("", "")


def _empty_text(value: Any, path: str = "") -> str | None:
    """The pointer to the first text object with no text in it, or None."""
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        if value.get("type") in ("plain_text", "mrkdwn") and not str(value.get("text", "")).strip():
            return f"{path}/text"
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _empty_text(item, f"{path}/{key}")
        if found is not None:
            return found
    return None


def view_errors(view: Any) -> list[str]:
    if not isinstance(view, dict):
        return ["must be an object [json-pointer:/view]"]
    if view.get("type") not in ("home", "modal"):
        return ["must be one of home, modal [json-pointer:/view/type]"]
    errors = block_errors(view.get("blocks", []), limit=VIEW_BLOCKS, pointer="/view/blocks")
    if errors:
        return errors
    try:
        View(**view).to_dict()
    except (SlackObjectFormationError, TypeError, ValueError) as error:
        return [f"{error} [json-pointer:/view]"]
    return []


def message_errors(method: str, body: dict) -> dict | None:
    """None when Slack would post (or update) this message; else its answer."""
    blocks = parsed(body.get("blocks"))
    text = body.get("text")
    markdown_text = body.get("markdown_text")
    attachments = parsed(body.get("attachments"))
    if markdown_text and (text or blocks):
        return failure("markdown_text_conflict")
    if blocks not in (None, "", []):
        errors = block_errors(blocks)
        if errors:
            return failure("invalid_blocks", *errors)
    if method in ("chat.postMessage", "chat.postEphemeral") and not (text or blocks or attachments or markdown_text):
        return failure("no_text")
    if method == "chat.update" and not (text or blocks or attachments or markdown_text or body.get("file_ids")):
        return failure("no_text")
    if method == "chat.postEphemeral" and not body.get("user"):
        return failure("user_not_in_channel")
    return None
