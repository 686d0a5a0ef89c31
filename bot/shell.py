"""`tpubot shell`: a terminal stand-in for Slack.

Lines go to the same bolt app through the same signed-request path Slack uses; what the bot
posts comes back through the local Slack Web API stand-in and is printed as readable text.

On a terminal it has a prompt, line editing and history (stdlib readline); the bot's logs go to
a file whose path is printed once, never into the conversation. `!help` lists the commands.
"""

from __future__ import annotations

import dataclasses
import mimetypes
import os
import re
import select
import shutil
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, TextIO, cast

import redis as redis_sync

from bot.local_stack import LocalStack
from bot.settings import Settings
from infra.jobs import QUEUE_NAME
from infra.local_files import LocalFileError, LocalFiles
from infra.state import keys
from infra.state.leases import LeaseState

CHANNEL = "C0SHELL"
CHANNEL_NAME = "tpu-shell"  # how Slack would show it: mentions of CHANNEL read #tpu-shell
# FAILED and DEGRADED are stable too: a model that failed to boot (or its checks) keeps its lease (and
# TPU) until `/tpu down`.
STABLE_STATES = {LeaseState.ACTIVE.value, LeaseState.READY.value, LeaseState.DEGRADED.value, LeaseState.FAILED.value}
# A lease waiting for capacity waits on the cloud, for seconds or for hours: a line waits this
# long for it (a zone with capacity moves on by then), and then the next line goes ahead.
WAITING_ON_CLOUD = {LeaseState.WAITING_FOR_RESOURCES.value: "waiting for capacity in {zone}"}
CLOUD_PATIENCE_S = 5.0
# Jobs queued for as long as a TPU runs or waits (watches, deadline timers, idle checks); the
# lease's state says whether it is in motion.
BACKGROUND_JOBS = ("watch:", "timer:", "idle:")
SETTLE_TIMEOUT = 180.0
# A mention body longer than this is echoed as a one-line summary, not line by line.
PASTE_ECHO_LINES = 3
PASTE_ECHO_CHARS = 300
LOG_VARIABLE = "TPUBOT_SHELL_LOG"  # where the shell writes the bot's logs, instead of a file of its own
ATTACH_MAX_BYTES = 64 * 1024 * 1024  # Slack takes far more; the bot's own caps are lower still

HELP_LINES = (
    "/tpu …           a slash command (/TPU works too); /tpu help lists them",
    "@tpubot …        a mention; the following lines, up to a blank line, belong to it (pasted logs)",
    "!attach FILE     attach a file under this folder (a screenshot, a log) to your next @tpubot message",
    "!click TEXT      press the most recent button labelled TEXT (else whose label contains it)",
    "!reply TEXT      reply in the thread the bot last posted in (a follow-up; after 👎, your correction)",
    "!user NAME       act as another user",
    "!wait            wait until the bot has finished what it started, capacity waits included (3 min at most)",
    "!kick            remove tpubot from the channel (/tpu up then claims nothing)",
    "!invite          invite tpubot back",
    "!help            this list",
    "!quit            leave (Ctrl-D too)",
)


@dataclass
class Button:
    label: str
    action_id: str
    value: str
    message_ts: str
    ephemeral: bool


def shell_log_path() -> Path:
    """Where `tpubot shell` writes the bot's logs: one file per shell, in the temp directory."""
    import tempfile

    return Path(os.environ.get(LOG_VARIABLE) or Path(tempfile.gettempdir()) / f"tpubot-shell-{os.getpid()}.log")


def log_worth_keeping(path: Path) -> bool:
    """Whether a shell's log file holds an error (JSON lines, bot/logging_setup.py): kept then, for
    whoever looks into it; deleted otherwise, so a temp folder does not fill with one per shell."""
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            return any('"level": "error"' in line or '"level": "critical"' in line for line in lines)
    except OSError:
        return False


def paste_summary(text: str) -> list[str]:
    """A long mention as its first line and a count: `[pasted 12,345 lines]`."""
    first, *rest = text.split("\n")
    if len(rest) <= PASTE_ECHO_LINES and len(text) <= PASTE_ECHO_CHARS * (PASTE_ECHO_LINES + 1):
        return [first, *rest]
    if len(first) > PASTE_ECHO_CHARS:
        first = first[:PASTE_ECHO_CHARS] + f" [+{len(first) - PASTE_ECHO_CHARS:,} characters]"
    return [first, f"[pasted {len(rest):,} lines]"] if rest else [first]


def wrap(line: str, width: int, indent: int) -> list[str]:
    """`line` in rows of at most `width` terminal cells, broken only at spaces (a word longer than
    a row stays whole: a value is never cut); rows after the first start `indent` spaces in."""
    from rich.cells import cell_len

    rows: list[str] = []
    row = ""
    for piece in re.findall(r" *\S+| +$", line):
        if row.strip() and cell_len(row + piece) > width:
            rows.append(row)
            row = " " * indent + piece.lstrip(" ")
        else:
            row += piece
    return [*rows, row]


def rows_of(prefix: str, lines: list[str], width: int | None = None) -> list[str]:
    """`lines` under `prefix` as printed rows: the first after it, the rest indented beneath it.
    A message's text may hold line breaks (a receipt, a table): each is a line of its own, alike on
    a terminal and piped; with a `width`, long lines wrap at spaces (wrap())."""
    rows: list[str] = []
    for i, line in enumerate(row for text in lines for row in text.split("\n")):
        head = prefix if i == 0 else " " * len(prefix)
        if width:
            rows += wrap(head + line, width, len(prefix) + len(line) - len(line.lstrip(" ")) + 2)
        else:
            rows.append(head + line)
    return rows


def user_id_for(name: str) -> str:
    return "U" + re.sub(r"[^A-Z0-9]", "", name.upper())[:20] or "UANON"


def render(text: str, blocks: list | None, names: Mapping[str, str] | None = None) -> list[str]:
    """Block Kit → readable lines: header, fields, sections, context, buttons. `names`: user and
    channel ids → names, so `<@UALICE>` reads @alice and `<#C0SHELL>` #tpu-shell, as in Slack."""
    names = names or {}

    def _plain(mrkdwn: str) -> str:
        return plain(mrkdwn, names)

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
            lines.append("  " + "  ".join(f"[{emoji(e['text']['text'])}]" for e in block.get("elements", [])
                                          if e.get("type") == "button"))
        elif kind in ("markdown", "rich_text"):
            lines += _plain(block.get("text", "")).splitlines()
    return lines


# Slack's names where they differ from the emoji table rich ships (which renders the rest), so a
# terminal shows symbols rather than :codes:.
EMOJI = {
    ":white_check_mark:": "✅", ":warning:": "⚠️", ":lock:": "🔒", ":no_entry:": "⛔", ":receipt:": "🧾",
    ":hourglass_flowing_sand:": "⏳", ":double_vertical_bar:": "⏸", ":gear:": "⚙️", ":large_green_circle:": "🟢",
    ":rocket:": "🚀", ":red_circle:": "🔴", ":wastebasket:": "🗑", ":rotating_light:": "🚨", ":robot_face:": "🤖",
    ":octagonal_sign:": "🛑",
}


def emoji(text: str) -> str:
    from rich.emoji import Emoji

    for code, symbol in EMOJI.items():
        text = text.replace(code, symbol)
    return Emoji.replace(text)


def plain(mrkdwn: str, names: Mapping[str, str] | None = None) -> str:
    """Slack mrkdwn as text, mentions by name (`names`, else the id) as Slack shows them."""
    names = names or {}
    # A ``` block is Slack's only way to show a table; on a terminal the lines already are one.
    mrkdwn = re.sub(r"```\n?", "\n", mrkdwn).strip("\n") if "```" in mrkdwn else mrkdwn
    mrkdwn = emoji(mrkdwn)
    text = re.sub(r"<([@#])([A-Z0-9]+)(?:\|([^>]*))?>",
                  lambda m: m[1] + (m[3] or names.get(m[2], m[2])), mrkdwn)
    text = re.sub(r"<!subteam\^([A-Z0-9]+)(\|[^>]*)?>", r"@group:\1", text)
    text = re.sub(r"<(https?://[^|>]+)\|([^>]+)>", r"\2 (\1)", text)
    text = unbold(text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# Slack's bold: `*` opens at the start of a word and closes at the end of one; inside `code` it is
# literal (a digest's `<*>` is a variable, not the start of bold).
_BOLD = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]*?\S)\*(?![\w*])")
_CODE_SPAN = re.compile(r"(`[^`\n]*`)")


def unbold(text: str) -> str:
    parts = _CODE_SPAN.split(text)
    return "".join(part if i % 2 else _BOLD.sub(r"\1", part) for i, part in enumerate(parts))


def conversation(channel: str, names: Mapping[str, str]) -> str:
    """How Slack names where a message went: `#tpu-shell`, or `DM to @alice` for the app's DM with
    a user (the Slack stand-in names it D + the user id's tail)."""
    if channel.startswith("D"):
        user = "U" + channel[1:]
        return f"DM to @{names.get(user, user)}"
    return "#" + names.get(channel, channel)


def pick_button(buttons: list[Button], text: str) -> Button | None:
    """The button `!click TEXT` means: the most recent one labelled TEXT (its emoji aside, any case),
    else the most recent whose label has TEXT as words, else the most recent containing it, so
    `!click Useful` presses [👍 Useful], not the [👎 Not useful] beside it."""
    wanted = " ".join(text.lower().split())
    if not wanted:
        return None

    def words(label: str) -> str:
        return " ".join(re.sub(r":[a-z0-9_+-]+:", " ", label.lower()).split())

    newest_first = list(reversed(buttons))
    for fits in (lambda label: words(label) == wanted,
                 lambda label: re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", words(label)) is not None,
                 lambda label: wanted in label.lower()):
        match = next((button for button in newest_first if fits(button.label)), None)
        if match is not None:
            return match
    return None


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
class BotPost:
    """What the bot posted, as a person reads it: where, the lines new to them, and its buttons."""

    prefix: str  # `[#tpu-shell] tpubot posted: `, `[thread] tpubot updated: `, `[only you] tpubot: `
    lines: list[str]  # empty: an edit that changed nothing worth reading
    buttons: list[Button]
    channel: str = ""
    thread_ts: str = ""
    ts: str = ""  # the message's; "" for a response_url reply
    method: str = ""


@dataclass
class BotPosts:
    """Turns what the Slack stand-in saw the bot do into readable lines, for the shell and for
    `tpubot dev`. An edit shows its header and what changed, so a card repeated with one new line
    (CREATING, then CREATING + "Trying us-west4-a…") is not printed twice; a line that differs only
    in its numbers ("(3s ago)") is a clock ticking, not news."""

    names: dict[str, str]  # user and channel ids → names
    _shown: dict[str, list[str]] = field(default_factory=dict)  # message ts -> lines last printed

    def shown(self, ts: str) -> list[str]:
        """The whole of message `ts` as last read, not only what changed."""
        return list(self._shown.get(ts, []))

    def read(self, slack, method: str, result: dict) -> BotPost | None:
        if method in ("chat.postMessage", "chat.update", "chat.postEphemeral", "chat.stopStream"):
            ts = result.get("ts") or result.get("message_ts")
            message = next((m for m in reversed(slack.messages) if m.ts == ts), None)
            if message is None:
                return None
            where = "thread" if message.thread_ts else conversation(message.channel, self.names)
            verb = {"chat.update": "updated", "chat.stopStream": "replied"}.get(method, "posted")
            lines = render(message.text, message.blocks, self.names)
            before = self._shown.get(message.ts)
            self._shown[message.ts] = lines
            if method == "chat.update" and before is not None:
                ticking = {re.sub(r"\d+", "#", line) for line in before}
                changed = [line for line in lines[1:] if line not in before and re.sub(r"\d+", "#", line) not in ticking]
                lines = [] if not changed and lines[0] == before[0] else \
                    changed if lines[0] == before[0] else [lines[0], *changed]
            return BotPost(f"[{where}] tpubot {verb}: ", lines, _buttons(message.blocks, message.ts, False),
                           message.channel, message.thread_ts or "", message.ts, method)
        if method == "response_url":
            blocks = result.get("blocks")
            return BotPost("[only you] tpubot: ", render(result.get("text", ""), blocks, self.names),
                           _buttons(blocks, "", True))
        return None


@dataclass
class Shell:
    stack: LocalStack
    out: TextIO = sys.stdout
    user: str = "alice"
    buttons: list[Button] = field(default_factory=list)
    terminal: "TerminalInput | None" = None  # set on a terminal: prompt, line editing, no echo of typed lines
    _print_lock: threading.Lock = field(default_factory=threading.Lock)
    names: dict[str, str] = field(default_factory=dict)  # the shell's Slack directory: user/channel id -> name
    width: int | None = None  # a terminal's columns: lines wrap at spaces to fit; None: never wrapped
    _line: str = ""  # the line being run, or the last one
    _started_by: dict[bytes, str] = field(default_factory=dict)  # lease key -> the line it appeared after
    _told: set[tuple[bytes, str]] = field(default_factory=set)  # (lease key, state) said to be still working
    _waiting_since: dict[tuple[bytes, str], float] = field(default_factory=dict)  # (lease key, state) -> first seen
    attached: list[dict] = field(default_factory=list)  # files for the next mention (Slack file objects)
    last_thread: str | None = None  # the thread the bot last posted in, where !reply answers
    _held: BotPost | None = None  # piped: a stopped stream, printed once it is known to be final

    def __post_init__(self) -> None:
        self.requests = self.stack.signed_requests()
        assert self.stack.slack is not None, "the shell's stack runs the Slack stand-in"
        self.stack.slack.on_event(self._on_bot_post)
        assert self.stack.redis is not None, "a started stack has its Redis"
        self._redis = redis_sync.Redis.from_url(self.stack.redis.url)
        self.names.update({CHANNEL: CHANNEL_NAME, user_id_for(self.user): self.user})
        self.posts = BotPosts(self.names)
        self.stack.slack.name_channel(CHANNEL, CHANNEL_NAME)  # what conversations.info says of it

    # --- output ----------------------------------------------------------------------------
    def say(self, prefix: str, lines: list[str]) -> None:
        with self._print_lock:
            waiting = self.terminal is not None and self.terminal.waiting
            if waiting:
                self.out.write("\r\x1b[K")  # over the prompt line; it is drawn again below
            for row in rows_of(prefix, lines, self.width):
                self.out.write(row + "\n")
            if waiting and self.terminal is not None:
                self.terminal.redraw(self.out)
            self.out.flush()

    def echo(self, line: str) -> None:
        """What the user sent, for a script's transcript; a terminal already shows what was typed."""
        if self.terminal is None:
            self.say(f"{self.user}> ", [line])

    def _on_bot_post(self, method: str, result: dict) -> None:
        assert self.stack.slack is not None, "the shell's stack runs the Slack stand-in"
        post = self.posts.read(self.stack.slack, method, result)
        if post is None:
            return
        self.buttons += post.buttons
        if post.thread_ts and post.channel == CHANNEL:
            self.last_thread = post.thread_ts
        if self.terminal is None:
            # A stream the bot stopped short and then rewrote in one edit (a note put before the
            # answer, a redaction) would print its cut-off piece and then the answer: a script's
            # transcript shows the reply once, as it ended. A terminal shows the progress.
            show: BotPost | None = post
            with self._print_lock:
                held, self._held = self._held, None
                if held is not None and post.method == "chat.update" and post.ts == held.ts:
                    show, held = dataclasses.replace(held, lines=self.posts.shown(post.ts)), None
                elif post.method == "chat.stopStream":
                    self._held, show = post, None
            if held is not None and held.lines:
                self.say(held.prefix, held.lines)
            if show is None or not show.lines:
                return
            post = show
        if post.lines:
            self.say(post.prefix, post.lines)

    def flush(self) -> None:
        """Print a stopped stream held back (piped): nothing rewrote it, so it is final."""
        with self._print_lock:
            held, self._held = self._held, None
        if held is not None and held.lines:
            self.say(held.prefix, held.lines)

    # --- input -----------------------------------------------------------------------------
    def run_line(self, line: str, more: Callable[[], str | None] = lambda: None) -> bool:
        line = line.rstrip("\n")
        if not line.strip():
            return True
        self._line = line.strip()
        word = line.split(maxsplit=1)[0].lower()
        if word == "/tpu":
            self.slash(line.strip()[len("/tpu"):].strip())
        elif word == "@tpubot":
            body = [line.strip()[len("@tpubot"):].strip()]
            while (next_line := more()) is not None and next_line.strip():
                body.append(next_line.rstrip("\n"))
            self.mention("\n".join(body))
        elif line.startswith("!attach"):
            self.attach(line[len("!attach"):].strip())
        elif line.startswith("!click"):
            self.click(line[len("!click"):].strip())
        elif line.startswith("!reply"):
            self.reply(line[len("!reply"):].strip())
        elif line.startswith("!user"):
            self.act_as(line[len("!user"):].strip())
        elif line.strip() in ("!kick", "!invite"):
            self.membership(joined=line.strip() == "!invite")
        elif line.startswith("!wait"):
            self.settle(cloud_patience=SETTLE_TIMEOUT)  # asked for: through waits on the cloud too
        elif line.strip() == "!help":
            self.say("", list(HELP_LINES))
        elif line.strip() in ("!quit", "!exit"):
            return False
        else:
            self.say("", ["(lines start with /tpu, @tpubot, !attach, !click, !reply, !user, !wait, !kick, !invite, "
                          "!help or !quit)"])
        return True

    def act_as(self, name: str) -> None:
        if not name:
            known = ", ".join(sorted({n for i, n in self.names.items() if i != CHANNEL}))
            self.say("", [f"(acting as {self.user}, {user_id_for(self.user)}; !user NAME acts as another: "
                          f"any name, known so far: {known})"])
            return
        self.user = name
        self.names[user_id_for(name)] = name
        self.say("", [f"(now acting as {name}, {user_id_for(name)})"])

    def slash(self, text: str) -> None:
        self.echo(f"/tpu {text}".rstrip())
        reply = self.requests.slash(text, user=user_id_for(self.user), channel=CHANNEL)
        if reply.status != 200:
            self.say("[error] ", [f"HTTP {reply.status}: {reply.body[:200]}"])
            return
        payload = reply.json()
        self.buttons += _buttons(payload.get("blocks"), "", True)
        self.say("[only you] tpubot: ", render(payload.get("text", ""), payload.get("blocks"), self.names))

    def mention(self, text: str) -> None:
        if self.terminal is None:
            self.say(f"{self.user}> ", paste_summary(f"@tpubot {text}"))
        elif self.terminal.pasted:
            # The terminal showed the first line; the paste itself was read without echo.
            self.say("", [f"[pasted {self.terminal.pasted:,} lines]"])
        files, self.attached = self.attached, []
        slack = self.stack.slack
        assert slack is not None, "the shell's stack runs the Slack stand-in"
        # Posted in the channel first, as Slack stores a message before it sends its event: a reply
        # in the thread the mention starts reads it back (conversations.replies) as the thread's parent.
        text = f"<@UTPUBOT> {text}"
        ts = slack.add_message(CHANNEL, text, user=user_id_for(self.user), files=files)
        reply = self.requests.mention(text, user=user_id_for(self.user), channel=CHANNEL, ts=ts, files=files or None)
        if reply.status != 200:
            self.say("[error] ", [f"HTTP {reply.status}: {reply.body[:200]}"])

    def attach(self, path: str) -> None:
        """!attach FILE: the file is shared into the Slack stand-in as a person's upload (a mimetype
        guessed from its name, as Slack does) and goes with the next @tpubot message; the bot then
        downloads it with its token like any Slack file. Paths are read under the working directory."""
        if not path:
            names = ", ".join(f["name"] for f in self.attached) or "none"
            self.say("", [f"(!attach FILE attaches a file to your next @tpubot message; attached now: {names})"])
            return
        try:
            target = LocalFiles(Path.cwd(), allow_outside=True).resolve(path)
            if not target.is_relative_to(Path.cwd().resolve()):
                raise LocalFileError(f"{path} is outside the folder the shell was started in ({Path.cwd().resolve()}); "
                                     "the shell attaches only files under it: copy the file there, or start "
                                     "`tpubot shell` in a folder that holds it.")
            size = target.stat().st_size
            if size > ATTACH_MAX_BYTES:
                raise LocalFileError(f"{path} is {size:,} bytes; the shell attaches at most {ATTACH_MAX_BYTES:,}.")
            content = target.read_bytes()
        except LocalFileError as error:
            self.say("", [f"(not attached: {error})"])
            return
        except OSError as error:
            self.say("", [f"(not attached: could not read {path}: {error.strerror or error})"])
            return
        slack = self.stack.slack
        assert slack is not None, "the shell's stack runs the Slack stand-in"
        mimetype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        self.attached.append(slack.add_file(f"F{len(slack.files) + 1:08d}", target.name, content, mimetype))
        self.say("", [f"(attached {target.name}, {size:,} bytes, {mimetype}; it goes with your next @tpubot message)"])

    def click(self, label: str) -> None:
        match = pick_button(self.buttons, label)
        if match is None:
            self.say("", [f"(no button whose label contains {label!r})"])
            return
        self.say(f"{self.user}> " if self.terminal is None else "", [f"clicks [{emoji(match.label)}]"])
        reply = self.requests.click(action_id=match.action_id, value=match.value, user=user_id_for(self.user),
                                    channel=CHANNEL, message_ts=match.message_ts, label=match.label,
                                    is_ephemeral=match.ephemeral)
        if reply.status != 200:
            self.say("[error] ", [f"HTTP {reply.status}: {reply.body[:200]}"])

    def reply(self, text: str) -> None:
        """!reply TEXT: a plain reply in the thread the bot last posted in, as a person's message and
        Slack's `message` event: a follow-up the bot answers, or after a 👎 the answer it should have given."""
        if not text or self.last_thread is None:
            why = "!reply TEXT replies in the thread the bot last posted in" if text or self.last_thread else \
                "no thread to reply in yet: mention @tpubot first, and reply once it has answered"
            self.say("", [f"({why})"])
            return
        slack = self.stack.slack
        assert slack is not None, "the shell's stack runs the Slack stand-in"
        self.say(f"{self.user}> " if self.terminal is None else "", [f"(in the thread) {text}"])
        ts = slack.add_message(CHANNEL, text, user=user_id_for(self.user), thread_ts=self.last_thread)
        reply = self.requests.event({"type": "message", "user": user_id_for(self.user), "text": text, "ts": ts,
                                     "thread_ts": self.last_thread, "channel": CHANNEL, "channel_type": "channel",
                                     "team": self.requests.team})
        if reply.status != 200:
            self.say("[error] ", [f"HTTP {reply.status}: {reply.body[:200]}"])

    def membership(self, *, joined: bool) -> None:
        """!kick / !invite: the bot leaves or joins the channel, and Slack tells it so (an event)."""
        assert self.stack.slack is not None, "the shell's stack runs the Slack stand-in"
        if (CHANNEL in self.stack.slack.removed_from) != joined:
            where = "in" if joined else "out of"
            self.say("", [f"(tpubot is already {where} #{CHANNEL_NAME}: nothing changed)"])
            return
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
        self.say("", [f"({self.user} {verb} #{CHANNEL_NAME})"])

    # --- settling --------------------------------------------------------------------------
    def busy(self, cloud_patience: float = CLOUD_PATIENCE_S) -> bool:
        """True while a lease is in motion (or has waited on the cloud for less than
        `cloud_patience`) or a job other than a background watch, timer or idle check is queued
        or running."""
        # cast: redis-py types a sync reply as `Awaitable[X] | X` (one set of annotations for both clients)
        for member in cast(set, self._redis.smembers(keys.lease_index())):
            self._started_by.setdefault(member, self._line)
            state = cast("bytes | None", self._redis.hget(member, "state"))
            if state is None or state.decode() in STABLE_STATES:
                continue
            if state.decode() not in WAITING_ON_CLOUD:
                return True
            since = self._waiting_since.setdefault((member, state.decode()), time.monotonic())
            if time.monotonic() - since < cloud_patience:
                return True
        # arq keeps a cron job's in-progress key after it ran (so no other worker repeats it): not work.
        for key in cast(list, self._redis.keys("arq:in-progress:*")):
            if not key.decode().removeprefix("arq:in-progress:").startswith(("cron:", *BACKGROUND_JOBS)):
                return True
        for job_id in cast(list, self._redis.zrange(QUEUE_NAME, 0, -1)):
            if not job_id.decode().startswith(BACKGROUND_JOBS):
                return True
        return False

    def still_working(self) -> list[str]:
        """`(LINE is still working: waiting for capacity in ZONE)`, once per lease and state."""
        told = []
        for member in cast(set, self._redis.smembers(keys.lease_index())):
            state, zone = (value.decode() if value else "" for value in cast(list, self._redis.hmget(member, ["state", "zone"])))
            if state in WAITING_ON_CLOUD and (member, state) not in self._told:
                self._told.add((member, state))
                what = WAITING_ON_CLOUD[state].format(zone=zone)
                told.append(f"({self._started_by.get(member) or 'a lease'} is still working: {what})")
        return told

    def settle(self, timeout: float = SETTLE_TIMEOUT, cloud_patience: float = CLOUD_PATIENCE_S) -> bool:
        """Wait until what the last line started has finished, or has waited on the cloud
        (capacity) for `cloud_patience`: such a lease is named once and the next line goes ahead."""
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            if self.busy(cloud_patience):
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > 0.3:
                self.flush()
                if waiting := self.still_working():
                    self.say("", waiting)
                return True
            time.sleep(0.05)
        self.flush()
        self.say("", [f"(gave up waiting after {timeout:.0f}s; the bot is still working)"])
        return False


class TerminalInput:
    """Typed lines on a terminal: a prompt, readline's line editing and history, and pastes read
    whole without echo (a 5 MB log is not drawn line by line)."""

    PASTE_QUIET_S = 0.2  # a paste is over when the terminal sends nothing for this long
    KEYSTROKE_S = 0.03  # a paste's next bytes follow sooner than this; a typist's next key later
    # xterm's bracketed paste (mode 2004), asked for at the `… ` prompt only: readline would take a
    # marked paste into its buffer whole. A terminal that has it marks a paste's start and end, so
    # the paste is told from typing by its marks even when a busy machine or a slow link delivers it
    # in pieces; one that has not ignores the request, and the pace above decides.
    BRACKETS_ON, BRACKETS_OFF = "\x1b[?2004h", "\x1b[?2004l"
    PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
    PASTE_END_LOST_S = 5.0  # a marked paste whose end mark never comes is taken as it stands after this

    def __init__(self, stream: TextIO) -> None:
        import readline  # noqa: F401 — importing it gives input() line editing and history
        import termios

        # Bracketed paste would put a whole paste into one readline buffer and redraw it.
        readline.parse_and_bind("set enable-bracketed-paste off")
        self.fd = stream.fileno()
        self.waiting = False
        self._raw = False  # waiting at `… ` outside readline: its buffer is not this line's
        self.prompt = ""
        self.pasted = 0
        self.pending: deque[str] = deque()
        self._termios = termios
        self._saved = termios.tcgetattr(self.fd)
        quiet = termios.tcgetattr(self.fd)
        # Outside input() nothing is echoed and lines are not cut at the kernel's 4 KiB line limit;
        # readline sets its own mode while it reads and restores this one after.
        quiet[3] &= ~(termios.ECHO | termios.ICANON)
        quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
        self._quiet = quiet
        # readline draws what is typed only when the terminal it starts on echoes (it keeps
        # passwords hidden that way): echo on for the length of input(), off again right after.
        self._typing = list(quiet)
        self._typing[3] = quiet[3] | termios.ECHO
        termios.tcsetattr(self.fd, termios.TCSADRAIN, quiet)

    def close(self) -> None:
        self._show(self.BRACKETS_OFF)  # in case the shell is leaving from the `… ` prompt
        self._termios.tcsetattr(self.fd, self._termios.TCSADRAIN, self._saved)

    def read(self, prompt: str, typed: str = "") -> str | None:
        """A line read with readline; `typed`: keys already read, put in its buffer first."""
        import readline

        if self.pending:
            return self.pending.popleft()
        self.prompt, self.waiting = prompt, True
        self._termios.tcsetattr(self.fd, self._termios.TCSANOW, self._typing)
        def put_typed() -> None:
            readline.insert_text(typed)
            readline.redisplay()

        readline.set_pre_input_hook(put_typed if typed else None)
        try:
            return input(prompt)
        except EOFError:
            return None
        finally:
            readline.set_pre_input_hook(None)
            self._termios.tcsetattr(self.fd, self._termios.TCSANOW, self._quiet)
            self.waiting = False

    def redraw(self, out: TextIO) -> None:
        import readline

        out.write(self.prompt + ("" if self._raw else readline.get_line_buffer()))

    @staticmethod
    def _show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def mention_lines(self) -> Callable[[], str | None]:
        """The lines after `@tpubot …`: a paste (already waiting, or pasted at the `… ` prompt) is
        read at once without echo, typed lines with readline."""
        self.pasted = 0
        if not self.pending and select.select([self.fd], [], [], 0.05)[0]:
            self._queue_paste(self._drain())
        return self._next_mention_line

    def _queue_paste(self, text: str) -> None:
        lines = text.split("\n")
        blank = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
        self.pasted += blank
        self.pending.extend(lines[:blank + 1] + [line for line in lines[blank + 1:] if line.strip()])

    def _next_mention_line(self) -> str | None:
        """At the `… ` prompt, what arrives in one burst with a line break in it is a paste (or a
        typed Enter); anything else is the start of a typed line, handed to readline."""
        if self.pending:
            return self.pending.popleft()
        prompt = "… "
        self.prompt, self.waiting, self._raw = prompt, True, True
        self._show(self.BRACKETS_ON + prompt)
        try:
            select.select([self.fd], [], [])
            data = os.read(self.fd, 1 << 20)
            if data.startswith(self.PASTE_START):
                burst = self._marked_paste(data)
            else:
                burst = data.decode("utf-8", "replace")
                if select.select([self.fd], [], [], self.KEYSTROKE_S)[0]:
                    burst += self._drain()
        finally:
            self._show(self.BRACKETS_OFF)
            self.waiting = self._raw = False
        burst = burst.replace("\r\n", "\n").replace("\r", "\n")
        if burst.startswith("\x04"):  # Ctrl-D: the mention ends here
            self._show("\n")
            return None
        if "\n" not in burst:
            self._show("\r\x1b[K")  # readline draws the prompt and the keys again
            return self.read(prompt, typed="".join(ch for ch in burst if ch.isprintable()))
        first, rest = burst.split("\n", 1)
        if not rest.strip():  # one line and Enter: show it as typed
            self._show(first + "\n")
            return first
        self._show("\r\x1b[K")  # the paste is summarized, not drawn
        self._queue_paste(burst)
        return self.pending.popleft()

    def _marked_paste(self, data: bytes) -> str:
        """A bracketed paste's text, read up to its end mark however slowly it arrives."""
        while self.PASTE_END not in data and select.select([self.fd], [], [], self.PASTE_END_LOST_S)[0]:
            more = os.read(self.fd, 1 << 20)
            if not more:
                break
            data += more
        pasted, _, typed_after = data[len(self.PASTE_START):].partition(self.PASTE_END)
        return (pasted + typed_after).decode("utf-8", "replace")

    def _drain(self) -> str:
        chunks = []
        while select.select([self.fd], [], [], self.PASTE_QUIET_S)[0]:
            data = os.read(self.fd, 1 << 20)
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def run_shell(settings: Settings, stream: TextIO = sys.stdin, out: TextIO = sys.stdout, *, model: bool = True,
              log_path: str | None = None, log_note: str = "") -> int:
    interactive = stream.isatty()
    # On the sandbox, mentions are answered by a sandbox model (a labelled heuristic, not Gemma)
    # unless GEMMA_BASE_URL names a real endpoint or --no-model asks for the model-less path.
    if not model:
        settings = settings.without_model(by="tpubot shell --no-model")
    stack = LocalStack(settings, sandbox_model=model and settings.mode.target.sandbox_model).start()
    terminal = TerminalInput(stream) if interactive else None
    try:
        shell = Shell(stack, out=out, terminal=terminal,
                      width=shutil.get_terminal_size().columns if terminal is not None else None)
        mode = settings.mode.target.label_for(settings.project, sandbox="sandbox GCP and Slack")
        if settings.mode.target.emulated_apis:
            from infra.sandbox.discovery import strict_available

            if not strict_available():  # the emulators then accept any JSON; say so rather than pretend
                mode += " (GCP request checks off: pip install google-api-python-client)"
        if stack.model_emulator is not None:
            mode += ", sandbox model (heuristic, not Gemma)"
        elif not model:
            mode += ", no model"
        shell.say("", [f"tpubot shell — {mode}, channel #{CHANNEL_NAME}, acting as {shell.user}. "
                       "Type /tpu help, @tpubot … (an empty line ends a mention: Enter twice), !help for the rest, "
                       "!quit to leave."]
                  + ([f"(the bot's logs go to {log_path}{log_note})"] if log_path else []))
        if terminal is not None:
            return _run_terminal(shell, terminal)
        lines = iter(stream.readline, "")

        def more() -> str | None:
            return next(lines, None)

        for line in lines:
            # A script waits for each step to finish, like a person reading the replies.
            shell.settle()
            if not shell.run_line(line, more):
                break
        shell.settle()
        return 0
    finally:
        try:
            if terminal is not None:
                terminal.close()
        finally:  # a hung-up terminal cannot take its modes back; the stack stops all the same
            stack.stop()


_LINE_DROPPED = "\n(Ctrl-C: the line was dropped; !quit or Ctrl-D leaves)\n"
# What was sent stays sent (the bot finishes it); only this wait is given up.
_WAIT_GIVEN_UP = "\n(Ctrl-C: stopped waiting; the bot carries on with what it was sent)\n"


def _run_terminal(shell: Shell, terminal: TerminalInput) -> int:
    # A Ctrl-C's notice is written inside the guarded block, before the next prompt: a second Ctrl-C
    # pressed as the first one's notice shows (a loaded machine, a quick hand) would otherwise arrive
    # outside any `except` and end the shell.
    notice = ""
    while True:
        try:
            if notice:
                shell.out.write(notice)
                notice = ""
            line = terminal.read(f"{shell.user}> ")
            # The look for a paste after `@tpubot …` is a wait too: a Ctrl-C in it drops the line.
            more = terminal.mention_lines() if line and line.split()[:1] and line.split()[0].lower() == "@tpubot" else None
        except KeyboardInterrupt:
            notice = _LINE_DROPPED
            continue
        if line is None:
            shell.out.write("\n")
            return 0
        try:
            if not shell.run_line(line, more or (lambda: None)):
                return 0
        except KeyboardInterrupt:
            notice = _WAIT_GIVEN_UP
