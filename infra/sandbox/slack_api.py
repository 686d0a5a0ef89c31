"""A local stand-in for Slack's Web API (and for `response_url` and `url_private`).

It speaks Slack's wire format as slack-sdk sends it (every method POSTed, JSON or form body,
Bearer token in the header) and keeps what the bot posted as a tiny message store, so
`tpubot shell` can print it and tests can count calls. Errors can be injected per method.

It is strict the way Slack is (infra/sandbox/slack_rules.py): blocks and views that slack_sdk's
models or Slack's limits refuse get `invalid_blocks`, a channel the bot was removed from
(`kick`) gets `not_in_channel` (public) or `channel_not_found` (private, or a DM it is not in),
an unknown method `unknown_method`, a wrong token `invalid_auth` / `not_allowed_token_type`.
The bot is in every channel until kicked, as if it had been invited to each one.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from infra.sandbox.http_server import ServerThread, handler_class, read_body, reply
from infra.sandbox import slack_rules
from infra.sandbox.socket_mode import SocketModeSandbox

BOT_USER_ID = "UTPUBOT"
BOT_ID = "BTPUBOT"
TEAM_ID = "T0SANDBOX"
MARKDOWN_TEXT_LIMIT = 12_000  # markdown_text per streaming call
SCOPES = ("commands,app_mentions:read,chat:write,files:read,files:write,channels:history,groups:history,"
          "channels:read,groups:read,usergroups:read")
# Every method the stand-in answers; any other name gets `unknown_method`, as from Slack.
METHODS = frozenset({
    "auth.test", "apps.connections.open", "chat.postMessage", "chat.postEphemeral", "chat.update", "chat.delete",
    "chat.startStream", "chat.appendStream", "chat.stopStream", "files.info", "files.getUploadURLExternal",
    "files.completeUploadExternal", "users.info", "usergroups.users.list", "conversations.replies",
    "conversations.members", "conversations.info",
    "views.publish", "reactions.add", "assistant.threads.setStatus",
})
REPLIES_PAGE = 15  # conversations.replies page size for new non-Marketplace apps (slack.md §3)


@dataclass
class RecordedCall:
    method: str
    body: dict
    headers: dict
    at: float


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list = field(default_factory=list)
    thread_ts: str | None = None
    user: str = BOT_USER_ID
    ephemeral_to: str | None = None
    updates: int = 0
    streaming: bool = False  # between chat.startStream and chat.stopStream
    files: list = field(default_factory=list)  # file objects shared with the message (as add_file returns)


@dataclass
class InjectedError:
    status: int = 200
    body: dict = field(default_factory=lambda: {"ok": False, "error": "internal_error"})
    headers: dict = field(default_factory=dict)


class SlackApiSandbox:
    def __init__(self, token: str = "xoxb-sandbox-token", host: str = "127.0.0.1", port: int = 0,
                 app_token: str = "xapp-1-sandbox-token") -> None:
        self.token = token
        self.app_token = app_token
        self.removed_from: set[str] = set()  # channels the bot was kicked out of
        self.dm_channels: dict[str, str] = {}  # the bot's DM with a user: channel id → user id
        self._held: threading.Event | None = None  # set: calls answer; clear: they wait (hold())
        self.calls: list[RecordedCall] = []
        self.messages: list[Message] = []
        self.responses: list[dict] = []  # posts to response_url
        self.files: dict[str, tuple[dict, bytes]] = {}
        self.usergroups: dict[str, list[str]] = {}
        self.members: dict[str, list[str]] = {}  # conversations.members per channel (unset: who posted there)
        self.channel_names: dict[str, str] = {}  # conversations.info's name per channel (unset: the id, lower-case)
        # External uploads: file id → {filename, length, data (the raw POSTed bytes), shared (the completion)}.
        self.uploads: dict[str, dict] = {}
        self._errors: dict[str, list[InjectedError]] = defaultdict(list)
        self._ts = itertools.count(1)
        # Re-entrant: wait_for() holds it while predicates call calls_to()/channel_messages().
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._listeners: list[Callable[[str, dict], None]] = []
        self._http = ServerThread((host, port), handler_class(self._serve_http, ("GET", "POST"), timeout=None),
                                  "slack-sandbox")
        self.socket_mode: SocketModeSandbox | None = None  # started by the first apps.connections.open

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> str:
        self._http.start()
        return self.base_url

    def stop(self) -> None:
        self._http.stop()
        if self.socket_mode is not None:
            self.socket_mode.stop()

    @property
    def root(self) -> str:
        return self._http.root

    @property
    def base_url(self) -> str:
        return f"{self.root}/api/"

    def response_url(self, name: str = "cmd") -> str:
        return f"{self.root}/hooks/{name}/{next(self._ts)}"

    def _serve_http(self, http: BaseHTTPRequestHandler) -> None:
        url = urlparse(http.path)
        raw = read_body(http)
        body = _form(raw, http.headers.get("content-type", ""))
        if url.path.startswith("/api/"):
            # Slack also reads arguments from the query string: slack-sdk sends chat.delete that way, and
            # the async client sends the methods slack-sdk tags http_verb="GET" as GET with a query.
            body = {**{k: v[0] for k, v in parse_qs(url.query).items()}, **body}
            headers = {k.lower(): v for k, v in http.headers.items()}
            status, result, extra = self.handle(url.path[len("/api/"):], body, headers)
            reply(http, status, json.dumps(result).encode(), "application/json; charset=utf-8", extra)
        elif http.command == "POST" and url.path.startswith("/hooks/"):
            if body.get("blocks") and slack_rules.block_errors(body["blocks"]):
                return reply(http, 400, b"invalid_blocks", "text/plain")
            self.handle_response_url(url.path, body)
            reply(http, 200, b"ok", "text/plain")
        elif http.command == "POST" and url.path.startswith("/upload/"):
            status, answer = self.receive_upload(url.path[len("/upload/"):], raw)
            reply(http, status, answer, "text/plain")
        elif http.command == "GET" and url.path.startswith("/files-pri/"):
            status, content_type, content = self.file_bytes(url.path, http.headers.get("authorization"))
            reply(http, status, content, content_type)
        else:
            reply(http, 404, b"not found", "text/plain")

    # --- test helpers ----------------------------------------------------------------------
    def inject_error(self, method: str, error: InjectedError, times: int = 1) -> None:
        with self._lock:
            self._errors[method].extend([error] * times)

    def add_file(self, file_id: str, name: str, content: bytes, mimetype: str = "text/plain") -> dict:
        info = {
            "id": file_id, "name": name, "mimetype": mimetype, "size": len(content),
            "url_private": f"{self.root}/files-pri/{TEAM_ID}-{file_id}/{name}",
            "url_private_download": f"{self.root}/files-pri/{TEAM_ID}-{file_id}/download/{name}",
        }
        self.files[file_id] = (info, content)
        return info

    def name_channel(self, channel: str, name: str) -> None:
        with self._lock:
            self.channel_names[channel] = name

    def _info(self, body: dict) -> dict:
        """conversations.info as Slack answers it (api.slack.com/methods/conversations.info: `channel` with id,
        name and the is_* flags); a public channel the bot left is still described, a private one is not."""
        channel = str(body.get("channel", ""))
        if not channel or channel.startswith(("U", "W")):
            return {"ok": False, "error": "channel_not_found"}
        with self._lock:
            name = self.channel_names.get(channel, channel.lower())
            member = channel not in self.removed_from
        private = channel.startswith("G")
        if private and not member:
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": {"id": channel, "name": name, "is_channel": not private, "is_group": private,
                                        "is_im": channel.startswith("D"), "is_private": private, "is_archived": False,
                                        "is_member": member, "created": 1_700_000_000}}

    def kick(self, channel: str) -> None:
        """The bot is removed from `channel`: posting there now fails as it does in Slack."""
        with self._lock:
            self.removed_from.add(channel)

    def invite(self, channel: str) -> None:
        with self._lock:
            self.removed_from.discard(channel)

    def add_message(self, channel: str, text: str, *, user: str, thread_ts: str | None = None,
                    files: list[dict] | None = None) -> str:
        """A message a person posted (thread context for mentions), with the files shared in it; returns its ts."""
        message = Message(channel=channel, ts=self._new_ts(), text=text, thread_ts=thread_ts, user=user,
                          files=list(files or []))
        with self._changed:
            self.messages.append(message)
            self._changed.notify_all()
        return message.ts

    def hold(self) -> threading.Event:
        """From now on every Web API call waits until the returned event is set (a slow Slack)."""
        self._held = threading.Event()
        return self._held

    def on_event(self, listener: Callable[[str, dict], None]) -> None:
        self._listeners.append(listener)

    def calls_to(self, method: str) -> list[RecordedCall]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.2))
        return True

    def channel_messages(self, channel: str) -> list[Message]:
        with self._lock:
            return [m for m in self.messages if m.channel == channel and m.ephemeral_to is None]

    # --- method implementations -------------------------------------------------------------
    def _new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def handle(self, method: str, body: dict, headers: dict) -> tuple[int, dict, dict]:
        held = self._held
        if held is not None:
            held.wait(30)
        with self._changed:
            self.calls.append(RecordedCall(method, body, headers, time.time()))
            self._changed.notify_all()
            if self._errors.get(method):
                error = self._errors[method].pop(0)
                return error.status, error.body, error.headers
        if method not in METHODS:
            return 200, {"ok": False, "error": "unknown_method", "req_method": method}, {}
        refused = (slack_rules.token_error(method, headers.get("authorization"), self.token, self.app_token)
                   or self._refusal(method, body))
        if refused is not None:
            return 200, refused, {}
        result = self._dispatch(method, body)
        for listener in self._listeners:
            listener(method, result)
        with self._changed:
            self._changed.notify_all()
        return 200, result, {"x-oauth-scopes": SCOPES} if method == "auth.test" else {}

    def _conversation(self, body: dict) -> str:
        return str(body.get("channel") or body.get("channel_id") or "")

    def _refusal(self, method: str, body: dict) -> dict | None:
        """Slack's answer when it would refuse this call; None when it would carry it out."""
        if method in slack_rules.CONVERSATION_METHODS or (method == "files.completeUploadExternal"
                                                          and body.get("channel_id")):
            channel = self._conversation(body)
            if not channel:
                return slack_rules.failure("channel_not_found")
            refused = self._membership(channel)
            if refused:
                return slack_rules.failure(refused)
        if method in ("chat.postMessage", "chat.postEphemeral", "chat.update"):
            return slack_rules.message_errors(method, body)
        if method == "views.publish":
            errors = slack_rules.view_errors(slack_rules.parsed(body.get("view")))
            # views.* name this invalid_arguments, with the reason in response_metadata.messages.
            return slack_rules.failure("invalid_arguments", *errors) if errors else None
        return None

    def _membership(self, channel: str) -> str:
        """'' when the bot may post in `channel`; else Slack's error for it."""
        if channel.startswith(("U", "W")):
            return ""  # a user id: Slack posts in the app's DM with them
        with self._lock:
            if channel in self.removed_from:
                return "not_in_channel" if channel.startswith("C") else "channel_not_found"
            if channel.startswith("D") and channel not in self.dm_channels:
                return "channel_not_found"  # a DM between people: the bot cannot see it
        return ""

    def _target(self, channel: str) -> str:
        """The conversation a post lands in: a user id opens (or reuses) the app's DM with them."""
        if channel.startswith(("U", "W")):
            dm = "D" + channel[1:]
            with self._lock:
                self.dm_channels[dm] = channel
            return dm
        return channel

    def _dispatch(self, method: str, body: dict) -> dict:
        if method == "apps.connections.open":
            with self._lock:
                if self.socket_mode is None:
                    self.socket_mode = SocketModeSandbox().start()
            return {"ok": True, "url": self.socket_mode.url}
        if method == "auth.test":
            return {"ok": True, "url": "https://sandbox.slack.local/", "team": "sandbox", "user": "tpubot",
                    "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID, "is_enterprise_install": False}
        if method == "chat.postMessage":
            text, warnings = _truncated(body.get("text") or "")
            message = Message(channel=self._target(body["channel"]), ts=self._new_ts(), text=text,
                              blocks=_json_field(body.get("blocks")) or [], thread_ts=body.get("thread_ts"))
            with self._lock:
                self.messages.append(message)
            return {"ok": True, "channel": message.channel, "ts": message.ts, **warnings,
                    "message": {"text": message.text, "ts": message.ts, "thread_ts": message.thread_ts,
                                "user": BOT_USER_ID, "bot_id": BOT_ID}}
        if method == "chat.postEphemeral":
            message = Message(channel=body["channel"], ts=self._new_ts(), text=body.get("text", ""),
                              blocks=_json_field(body.get("blocks")) or [], thread_ts=body.get("thread_ts"),
                              ephemeral_to=body.get("user"))
            with self._lock:
                self.messages.append(message)
            return {"ok": True, "message_ts": message.ts}
        if method == "chat.update":
            with self._lock:
                for message in self.messages:
                    if message.channel == body.get("channel") and message.ts == body.get("ts"):
                        if message.user != BOT_USER_ID or message.ephemeral_to:
                            return {"ok": False, "error": "cant_update_message"}
                        if message.streaming:
                            return {"ok": False, "error": "streaming_state_conflict"}
                        message.text = _truncated(body.get("text", message.text))[0]
                        message.blocks = _json_field(body.get("blocks")) or []
                        message.updates += 1
                        return {"ok": True, "channel": message.channel, "ts": message.ts, "text": message.text}
            return {"ok": False, "error": "message_not_found"}
        if method in ("chat.startStream",):
            # Streams are replies (thread_ts); in channels the recipient must be named (slack.md §4.1).
            if not body.get("thread_ts"):
                return {"ok": False, "error": "invalid_arguments"}
            if str(body.get("channel", "")).startswith(("C", "G")):
                if not body.get("recipient_user_id"):
                    return {"ok": False, "error": "missing_recipient_user_id"}
                if not body.get("recipient_team_id"):
                    return {"ok": False, "error": "missing_recipient_team_id"}
            if len(body.get("markdown_text") or "") > MARKDOWN_TEXT_LIMIT:
                return {"ok": False, "error": "msg_too_long"}
            message = Message(channel=body["channel"], ts=self._new_ts(), text=_chunks_text(body),
                              thread_ts=body.get("thread_ts"), streaming=True)
            with self._lock:
                self.messages.append(message)
            return {"ok": True, "channel": message.channel, "ts": message.ts}
        if method in ("chat.appendStream", "chat.stopStream"):
            if len(body.get("markdown_text") or "") > MARKDOWN_TEXT_LIMIT:
                return {"ok": False, "error": "msg_too_long"}
            with self._lock:
                for message in self.messages:
                    if message.channel == body.get("channel") and message.ts == body.get("ts"):
                        if not message.streaming:
                            return {"ok": False, "error": "message_not_in_streaming_state"}
                        message.text += _chunks_text(body)
                        if body.get("blocks"):
                            message.blocks = _json_field(body.get("blocks")) or []
                        if method == "chat.stopStream":
                            message.streaming = False
                        return {"ok": True, "channel": message.channel, "ts": message.ts}
            return {"ok": False, "error": "message_not_found"}
        if method == "chat.delete":
            with self._lock:
                for i, message in enumerate(self.messages):
                    if message.channel == body.get("channel") and message.ts == body.get("ts"):
                        del self.messages[i]
                        return {"ok": True, "channel": message.channel, "ts": message.ts}
            return {"ok": False, "error": "message_not_found"}
        if method == "files.info":
            file = self.files.get(body.get("file", ""))
            return {"ok": True, "file": file[0]} if file else {"ok": False, "error": "file_not_found"}
        if method == "users.info":
            user = body.get("user", "")
            return {"ok": True, "user": {"id": user, "team_id": TEAM_ID, "name": user.lower(), "real_name": user,
                                         "is_bot": False, "is_admin": False, "is_restricted": False,
                                         "is_ultra_restricted": False, "deleted": False}}
        if method == "usergroups.users.list":
            return {"ok": True, "users": self.usergroups.get(body.get("usergroup", ""), [])}
        if method == "conversations.members":
            return self._members(body)
        if method == "conversations.info":
            return self._info(body)
        if method == "conversations.replies":
            return self._replies(body)
        if method == "files.getUploadURLExternal":
            if not body.get("filename") or not str(body.get("length", "")).isdigit():
                return {"ok": False, "error": "invalid_arguments"}
            file_id = f"F{next(self._ts):08d}"
            with self._lock:
                self.uploads[file_id] = {"filename": body["filename"], "length": int(body["length"]), "data": None,
                                         "shared": None}
            return {"ok": True, "upload_url": f"{self.root}/upload/{file_id}", "file_id": file_id}
        if method == "files.completeUploadExternal":
            return self._complete_upload(body)
        # views.publish, reactions.add, assistant.threads.setStatus, chat.delete …
        return {"ok": True}

    def _members(self, body: dict) -> dict:
        """A channel's member ids, a page of `limit` (≤ 1000) at a time: the list set in `members`, else
        everyone who posted there, and the bot."""
        channel = self._conversation(body)
        with self._lock:
            members = self.members.get(channel)
            if members is None:
                members = sorted({m.user for m in self.messages if m.channel == channel} | {BOT_USER_ID})
        limit = min(int(body.get("limit") or 100), 1000)
        start = _cursor_offset(body.get("cursor"))
        more = start + limit < len(members)
        return {"ok": True, "members": list(members[start:start + limit]),
                "response_metadata": {"next_cursor": _cursor(start + limit) if more else ""}}

    def _replies(self, body: dict) -> dict:
        """A thread oldest first, parent included, one page of `limit` at a time (cursor paging);
        `latest`/`oldest` bound it by ts (exclusive unless `inclusive`)."""
        thread, channel = str(body.get("ts", "")), self._conversation(body)
        with self._lock:
            thread_messages = [m for m in self.messages if m.channel == channel and m.ephemeral_to is None
                               and (m.ts == thread or m.thread_ts == thread)]
        if not any(m.ts == thread for m in thread_messages):
            return {"ok": False, "error": "thread_not_found"}
        inclusive = str(body.get("inclusive", "")).lower() in ("1", "true")
        latest, oldest = body.get("latest"), body.get("oldest")
        thread_messages.sort(key=lambda m: float(m.ts))
        in_range = [m for m in thread_messages
                    if (latest is None or float(m.ts) < float(latest) or (inclusive and m.ts == str(latest)))
                    and (oldest is None or float(m.ts) > float(oldest) or (inclusive and m.ts == str(oldest)))]
        limit = min(int(body.get("limit") or REPLIES_PAGE), REPLIES_PAGE)
        start = _cursor_offset(body.get("cursor"))
        page = in_range[start:start + limit]
        more = start + limit < len(in_range)
        return {"ok": True, "has_more": more, "messages": [_thread_message(m) for m in page],
                "response_metadata": {"next_cursor": _cursor(start + limit) if more else ""}}

    def _complete_upload(self, body: dict) -> dict:
        files = _json_field(body.get("files")) or []
        if not files or (body.get("thread_ts") and not body.get("channel_id")):
            return {"ok": False, "error": "invalid_arguments"}
        shared = []
        with self._lock:
            for f in files:
                upload = self.uploads.get(str(f.get("id")))
                if upload is None or upload["data"] is None:  # never issued, or its bytes never arrived
                    return {"ok": False, "error": "file_not_found"}
                upload["shared"] = {"channel_id": body.get("channel_id"), "thread_ts": body.get("thread_ts"),
                                    "title": f.get("title")}
                shared.append({"id": f["id"], "title": f.get("title") or upload["filename"],
                               "name": upload["filename"], "size": len(upload["data"])})
        return {"ok": True, "files": shared}

    def receive_upload(self, file_id: str, data: bytes) -> tuple[int, bytes]:
        """The raw POST to an upload URL; Slack answers `OK - <bytes>` (no token: the URL is the credential)."""
        with self._changed:
            upload = self.uploads.get(file_id)
            if upload is None:
                return 404, b"not found"
            upload["data"] = data
            self._changed.notify_all()
        return 200, f"OK - {len(data)}".encode()

    def handle_response_url(self, path: str, body: dict) -> None:
        with self._changed:
            self.responses.append({"path": path, **body})
            self._changed.notify_all()
        for listener in self._listeners:
            listener("response_url", body)

    def file_bytes(self, path: str, auth: str | None) -> tuple[int, str, bytes]:
        # /files-pri/T-F1/name or /files-pri/T-F1/download/name
        parts = path.split("/")
        file_key = parts[2] if len(parts) > 2 else ""
        file_id = file_key.split("-", 1)[1] if "-" in file_key else ""
        if auth != f"Bearer {self.token}" or file_id not in self.files:
            # What Slack really does without a valid token: a 200 HTML sign-in page.
            return 200, "text/html; charset=utf-8", b"<!DOCTYPE html><html><body>Sign in to Slack</body></html>"
        info, content = self.files[file_id]
        return 200, info["mimetype"], content


def _truncated(text: str) -> tuple[str, dict]:
    """Slack cuts top-level text at 40,000 characters and says so in a warning."""
    if len(text) <= slack_rules.TEXT_LIMIT:
        return text, {}
    return text[: slack_rules.TEXT_LIMIT], {"warning": "message_truncated",
                                            "response_metadata": {"warnings": ["message_truncated"]}}


def _cursor(offset: int) -> str:
    return base64.b64encode(f"next:{offset}".encode()).decode()


def _cursor_offset(cursor: Any) -> int:
    if not cursor:
        return 0
    try:
        return int(base64.b64decode(str(cursor)).decode().removeprefix("next:"))
    except ValueError:
        return 0


def _thread_message(message: Message) -> dict:
    shown: dict[str, Any] = {"type": "message", "ts": message.ts, "text": message.text, "thread_ts": message.thread_ts or message.ts}
    if message.user == BOT_USER_ID:
        shown.update(user=BOT_USER_ID, bot_id=BOT_ID)
    else:
        shown["user"] = message.user
    if message.files:
        shown["files"] = message.files
    return shown


def _form(raw: bytes, content_type: str) -> dict:
    """A request's arguments: its JSON body (`{}` when it is not JSON), or its form fields."""
    if "json" in content_type:
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}
    return {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}


def _json_field(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _chunks_text(body: dict) -> str:
    text = body.get("markdown_text") or ""
    for chunk in _json_field(body.get("chunks")) or []:
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            text += chunk.get("text", "")
    return text
