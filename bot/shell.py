"""`tpubot shell`: a terminal stand-in for Slack.

Lines go to the same bolt app through the same signed-request path Slack uses; what the bot
posts comes back through the local Slack Web API stand-in and is printed as readable text.

  /tpu …           a slash command
  @tpubot …        a mention; following lines until a blank line belong to it
  !click TEXT      press the most recent button whose label contains TEXT
  !user NAME       act as another user
  !kick / !invite  remove tpubot from the channel / invite it back
  !wait            wait until the bot has finished what it started
  !quit            leave
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

import redis as redis_sync

from bot.local_stack import LocalStack
from bot.settings import Settings
from infra.jobs import QUEUE_NAME
from infra.state import keys
from infra.state.leases import LeaseState

CHANNEL = "C0SHELL"
# FAILED is stable too: a model that failed to boot keeps its lease (and TPU) until `/tpu down`.
STABLE_STATES = {LeaseState.ACTIVE.value, LeaseState.READY.value, LeaseState.FAILED.value}
SETTLE_TIMEOUT = 180.0


@dataclass
class Button:
    label: str
    action_id: str
    value: str
    message_ts: str
    ephemeral: bool


def user_id_for(name: str) -> str:
    return "U" + re.sub(r"[^A-Z0-9]", "", name.upper())[:20] or "UANON"


def render(text: str, blocks: list | None) -> list[str]:
    """Block Kit → readable lines: header, fields, sections, context, buttons."""
    if not blocks:
        return [_plain(text)]
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            lines.append(f"== {block['text']['text']} ==")
        elif kind == "section":
            if block.get("text"):
                lines += _plain(block["text"]["text"]).splitlines()
            for f in block.get("fields", []):
                name, _, value = _plain(f["text"]).partition("\n")
                lines.append(f"  {name}: {value}")
        elif kind == "context":
            lines.append("  (" + " · ".join(_plain(e.get("text", "")) for e in block.get("elements", [])) + ")")
        elif kind == "actions":
            lines.append("  " + "  ".join(f"[{e['text']['text']}]" for e in block.get("elements", []) if e.get("type") == "button"))
        elif kind in ("markdown", "rich_text"):
            lines += _plain(block.get("text", "")).splitlines()
    return lines


# The handful of emoji codes the bot uses, so a terminal shows symbols rather than :codes:.
EMOJI = {
    ":white_check_mark:": "✅", ":warning:": "⚠️", ":lock:": "🔒", ":no_entry:": "⛔", ":receipt:": "🧾",
    ":hourglass_flowing_sand:": "⏳", ":double_vertical_bar:": "⏸", ":gear:": "⚙️", ":large_green_circle:": "🟢",
    ":rocket:": "🚀", ":red_circle:": "🔴", ":wastebasket:": "🗑", ":rotating_light:": "🚨", ":robot_face:": "🤖",
}


def _plain(mrkdwn: str) -> str:
    for code, symbol in EMOJI.items():
        mrkdwn = mrkdwn.replace(code, symbol)
    text = re.sub(r"<@([A-Z0-9]+)>", r"@\1", mrkdwn)
    text = re.sub(r"<!subteam\^([A-Z0-9]+)(\|[^>]*)?>", r"@group:\1", text)
    text = re.sub(r"<(https?://[^|>]+)\|([^>]+)>", r"\2 (\1)", text)
    text = text.replace("*", "")
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _buttons(blocks: list | None, message_ts: str, ephemeral: bool) -> list[Button]:
    found = []
    for block in blocks or []:
        if block.get("type") == "actions":
            for element in block.get("elements", []):
                if element.get("type") == "button":
                    found.append(Button(element["text"]["text"], element["action_id"], element.get("value", ""),
                                        message_ts, ephemeral))
    return found


@dataclass
class Shell:
    stack: LocalStack
    out: TextIO = sys.stdout
    user: str = "alice"
    buttons: list[Button] = field(default_factory=list)
    _print_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.requests = self.stack.signed_requests()
        self.stack.slack.on_event(self._on_bot_post)
        self._redis = redis_sync.Redis.from_url(self.stack.redis.url)

    # --- output ----------------------------------------------------------------------------
    def say(self, prefix: str, lines: list[str]) -> None:
        with self._print_lock:
            for i, line in enumerate(lines):
                self.out.write(f"{prefix if i == 0 else ' ' * len(prefix)}{line}\n")
            self.out.flush()

    def _on_bot_post(self, method: str, result: dict) -> None:
        slack = self.stack.slack
        if method in ("chat.postMessage", "chat.update", "chat.postEphemeral", "chat.stopStream"):
            ts = result.get("ts") or result.get("message_ts")
            message = next((m for m in reversed(slack.messages) if m.ts == ts), None)
            if message is None:
                return
            where = "thread" if message.thread_ts else "#" + message.channel
            verb = {"chat.update": "updated", "chat.stopStream": "replied"}.get(method, "posted")
            self.buttons += _buttons(message.blocks, message.ts, False)
            self.say(f"[{where}] tpubot {verb}: ", render(message.text, message.blocks))
        elif method == "response_url":
            blocks = result.get("blocks")
            self.buttons += _buttons(blocks, "", True)
            self.say("[only you] tpubot: ", render(result.get("text", ""), blocks))

    # --- input -----------------------------------------------------------------------------
    def run_line(self, line: str, more: Callable[[], str | None] = lambda: None) -> bool:
        line = line.rstrip("\n")
        if not line.strip():
            return True
        if line.startswith("/tpu"):
            self.slash(line[len("/tpu"):].strip())
        elif line.startswith("@tpubot"):
            body = [line[len("@tpubot"):].strip()]
            while (next_line := more()) is not None and next_line.strip():
                body.append(next_line.rstrip("\n"))
            self.mention("\n".join(body))
        elif line.startswith("!click"):
            self.click(line[len("!click"):].strip())
        elif line.startswith("!user"):
            name = line[len("!user"):].strip() or "alice"
            self.user = name
            self.say("", [f"(now acting as {name}, {user_id_for(name)})"])
        elif line.strip() in ("!kick", "!invite"):
            self.membership(joined=line.strip() == "!invite")
        elif line.startswith("!wait"):
            self.settle()
        elif line.strip() in ("!quit", "!exit"):
            return False
        else:
            self.say("", ["(lines start with /tpu, @tpubot, !click, !user, !wait or !quit)"])
        return True

    def slash(self, text: str) -> None:
        self.say(f"{self.user}> ", [f"/tpu {text}".rstrip()])
        reply = self.requests.slash(text, user=user_id_for(self.user), channel=CHANNEL)
        if reply.status != 200:
            self.say("[error] ", [f"HTTP {reply.status}: {reply.body[:200]}"])
            return
        payload = reply.json()
        self.buttons += _buttons(payload.get("blocks"), "", True)
        self.say("[only you] tpubot: ", render(payload.get("text", ""), payload.get("blocks")))

    def mention(self, text: str) -> None:
        self.say(f"{self.user}> ", [f"@tpubot {text}"])
        reply = self.requests.mention(f"<@UTPUBOT> {text}", user=user_id_for(self.user), channel=CHANNEL)
        if reply.status != 200:
            self.say("[error] ", [f"HTTP {reply.status}: {reply.body[:200]}"])

    def click(self, label: str) -> None:
        match = next((b for b in reversed(self.buttons) if label.lower() in b.label.lower()), None)
        if match is None:
            self.say("", [f"(no button whose label contains {label!r})"])
            return
        self.say(f"{self.user}> ", [f"clicks [{match.label}]"])
        reply = self.requests.click(action_id=match.action_id, value=match.value, user=user_id_for(self.user),
                                    channel=CHANNEL, message_ts=match.message_ts, label=match.label,
                                    is_ephemeral=match.ephemeral)
        if reply.status != 200:
            self.say("[error] ", [f"HTTP {reply.status}: {reply.body[:200]}"])

    def membership(self, *, joined: bool) -> None:
        """!kick / !invite: the bot leaves or joins the channel, and Slack tells it so (an event)."""
        if joined:
            self.stack.slack.invite(CHANNEL)
        else:
            self.stack.slack.kick(CHANNEL)
        kind = "member_joined_channel" if joined else "member_left_channel"
        reply = self.requests.event({"type": kind, "user": "UTPUBOT", "channel": CHANNEL, "channel_type": "C",
                                     "team": self.requests.team})
        if reply.status != 200:
            self.say("[error] ", [f"HTTP {reply.status}: {reply.body[:200]}"])
        verb = "invited tpubot to" if joined else "removed tpubot from"
        self.say("", [f"({self.user} {verb} #{CHANNEL})"])

    # --- settling --------------------------------------------------------------------------
    def busy(self) -> bool:
        """True while a lease is in motion or a job (other than a periodic watch, timer or idle check) is queued or running."""
        for member in self._redis.smembers(keys.lease_index()):
            state = self._redis.hget(member, "state")
            if state is not None and state.decode() not in STABLE_STATES:
                return True
        # arq keeps a cron job's in-progress key after it ran (so no other worker repeats it): not work.
        if any(not key.startswith(b"arq:in-progress:cron:") for key in self._redis.keys("arq:in-progress:*")):
            return True
        for job_id in self._redis.zrange(QUEUE_NAME, 0, -1):
            # Watches, deadline timers and idle checks are queued for as long as a TPU runs.
            if not job_id.decode().startswith(("watch:", "timer:", "idle:")):
                return True
        return False

    def settle(self, timeout: float = SETTLE_TIMEOUT) -> bool:
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            if self.busy():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > 0.3:
                return True
            time.sleep(0.05)
        self.say("", [f"(gave up waiting after {timeout:.0f}s; the bot is still working)"])
        return False


def run_shell(settings: Settings, stream: TextIO = sys.stdin, out: TextIO = sys.stdout, *, model: bool = True) -> int:
    interactive = stream.isatty()
    # On the sandbox, mentions are answered by a sandbox model (a labelled heuristic, not Gemma)
    # unless GEMMA_BASE_URL names a real endpoint or --no-model asks for the model-less path.
    if not model:
        settings = settings.model_copy(update={"gemma_base_url": "", "agent_use_model": False})
    stack = LocalStack(settings, sandbox_model=model and settings.sandbox).start()
    try:
        shell = Shell(stack, out=out)
        mode = "sandbox GCP and Slack" if settings.sandbox else f"GCP project {settings.project}"
        if stack.model_emulator is not None:
            mode += ", sandbox model (heuristic, not Gemma)"
        elif not model:
            mode += ", no model"
        shell.say("", [f"tpubot shell — {mode}, channel #{CHANNEL}, acting as {shell.user}. "
                       "Type /tpu help, @tpubot …, !click TEXT, !user NAME, !quit."])
        lines = iter(stream.readline, "")

        def more() -> str | None:
            return next(lines, None)

        for line in lines:
            if not interactive:
                # A script waits for each step to finish, like a person reading the replies.
                shell.settle()
            if not shell.run_line(line, more):
                break
        if not interactive:
            shell.settle()
        return 0
    finally:
        stack.stop()
