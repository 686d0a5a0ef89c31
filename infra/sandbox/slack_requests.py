"""Slack's side of the conversation: signed slash commands, events and button clicks.

Requests are signed exactly as Slack signs them (`v0=` HMAC-SHA256 over `v0:{ts}:{body}`)
and sent over HTTP to the bot's `/slack/events`, so the whole verification path runs (the tests'
in-process bot passes an `http` client whose transport is the web app itself, with no socket).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx


@dataclass
class SlackReply:
    status: int
    body: str

    def json(self) -> dict:
        try:
            return json.loads(self.body) if self.body else {}
        except ValueError:
            return {"text": self.body}

    @property
    def text(self) -> str:
        return self.json().get("text", "") if self.body.startswith("{") else self.body


def sign(secret: str, timestamp: str, body: str) -> str:
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class SlackRequests:
    def __init__(self, events_url: str, signing_secret: str, *, team: str = "T0SANDBOX",
                 response_url_factory=None, timeout: float = 10.0, http: httpx.Client | None = None) -> None:
        self.events_url = events_url
        self.signing_secret = signing_secret
        self.team = team
        self._response_url = response_url_factory or (lambda name: "http://127.0.0.1:9/hooks/none")
        self._http = http or httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def post(self, body: str, content_type: str, *, timestamp: str | None = None, signature: str | None = None,
             extra_headers: dict | None = None) -> SlackReply:
        ts = timestamp or str(int(time.time()))
        headers = {
            "content-type": content_type,
            "x-slack-request-timestamp": ts,
            "x-slack-signature": signature or sign(self.signing_secret, ts, body),
            **(extra_headers or {}),
        }
        response = self._http.post(self.events_url, content=body.encode(), headers=headers)
        return SlackReply(response.status_code, response.text)

    def slash_body(self, text: str, *, user: str, channel: str) -> str:
        return urlencode({
            "token": "legacy", "team_id": self.team, "team_domain": "sandbox", "channel_id": channel,
            "channel_name": channel.lower(), "user_id": user, "user_name": user.lower(), "command": "/tpu",
            "text": text, "api_app_id": "A0TPUBOT", "is_enterprise_install": "false",
            "response_url": self._response_url("commands"), "trigger_id": f"{time.time():.3f}.{secrets.token_hex(4)}",
        })

    def slash(self, text: str, *, user: str, channel: str, **kwargs) -> SlackReply:
        return self.post(self.slash_body(text, user=user, channel=channel), "application/x-www-form-urlencoded", **kwargs)

    def mention(self, text: str, *, user: str, channel: str, ts: str | None = None, thread_ts: str | None = None,
                event_id: str | None = None, files: list[dict] | None = None, retry_num: int | None = None,
                bot_user_id: str = "UTPUBOT", edited_ts: str | None = None, subtype: str | None = None) -> SlackReply:
        """An `app_mention` event, or with `subtype="file_share"` the `message` event Slack may send instead."""
        ts = ts or f"{time.time():.6f}"
        event: dict[str, Any] = {"type": "message" if subtype else "app_mention", "user": user, "text": text, "ts": ts,
                                 "channel": channel, "event_ts": edited_ts or ts, "team": self.team}
        if subtype:
            event["subtype"] = subtype
            event["channel_type"] = "channel"
        if thread_ts:
            event["thread_ts"] = thread_ts
        if files:
            event["files"] = files
        if edited_ts:
            event["edited"] = {"user": user, "ts": edited_ts}
        headers = {}
        if retry_num:
            headers = {"x-slack-retry-num": str(retry_num), "x-slack-retry-reason": "http_timeout"}
        return self._event_callback(event, event_id, bot_user_id, headers)

    def event(self, event: dict, *, event_id: str | None = None, bot_user_id: str = "UTPUBOT") -> SlackReply:
        """Any Events API event (e.g. `app_home_opened`) in Slack's signed `event_callback` envelope."""
        return self._event_callback({"event_ts": f"{time.time():.6f}", **event}, event_id, bot_user_id)

    def _event_callback(self, event: dict, event_id: str | None, bot_user_id: str,
                        headers: dict | None = None) -> SlackReply:
        envelope = {
            "token": "legacy", "team_id": self.team, "api_app_id": "A0TPUBOT", "type": "event_callback",
            "event_id": event_id or f"Ev{secrets.token_hex(5).upper()}", "event_time": int(time.time()),
            "authorizations": [{"team_id": self.team, "user_id": bot_user_id, "is_bot": True}],
            "event": event,
        }
        return self.post(json.dumps(envelope), "application/json", extra_headers=headers)

    def click(self, *, action_id: str, value: str, user: str, channel: str, message_ts: str = "",
              label: str = "", is_ephemeral: bool = True) -> SlackReply:
        payload: dict[str, Any] = {
            "type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": self.team},
            "api_app_id": "A0TPUBOT", "token": "legacy", "trigger_id": f"{time.time():.3f}.click",
            "team": {"id": self.team, "domain": "sandbox"}, "channel": {"id": channel, "name": channel.lower()},
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": is_ephemeral},
            "response_url": self._response_url("actions"), "state": {"values": {}},
            "actions": [{"action_id": action_id, "block_id": "b", "type": "button", "value": value,
                         "text": {"type": "plain_text", "text": label}, "action_ts": f"{time.time():.6f}"}],
        }
        return self.post("payload=" + quote(json.dumps(payload)), "application/x-www-form-urlencoded")
