"""`tpubot shell` on a terminal, driven through a pseudo-terminal (stdlib `pty`, nothing to install):
a prompt before input, arrow-key editing and history (readline), no log line in the conversation
(logs go to the file the banner names), and a paste echoed as a one-line summary."""

from __future__ import annotations

import os
import re
import fcntl
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from waiting import wait_until

TPUBOT = Path(sys.executable).with_name("tpubot")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-JL-Za-z]|\x1b[=>]")  # all but K (erase to end of line)
LEFT, UP = "\x1b[D", "\x1b[A"
KEYSTROKE_GAP = 0.3  # longer than the pause that ends an unmarked paste (bot/shell.py, TerminalInput)
HELP_TITLE = "tpubot — one flex-start TPU v5e with Gemma per channel"

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal"),
              pytest.mark.e2e]  # runs our own processes (conftest tier_of)


class Terminal:
    """The shell on the slave side of a pty; everything it draws is collected from the master."""

    def __init__(self, tmp_path: Path, redis_url: str | None, columns: int = 120) -> None:
        """`redis_url` None: the shell starts its own embedded valkey, as it does for a newcomer."""
        self.log = tmp_path / "shell.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "REDIS_URL"))}
        env.update({"TERM": "xterm", "TPUBOT_SHELL_LOG": str(self.log),
                    "TPUBOT_ENV_FILE": os.devnull, "COLUMNS": str(columns), "LINES": "40"})
        if redis_url is not None:
            env["REDIS_URL"] = redis_url
        env.pop("INPUTRC", None)
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        self.process = subprocess.Popen([str(TPUBOT), "shell", "--no-model"], stdin=slave, stdout=slave,
                                        stderr=slave, cwd=tmp_path, env=env, start_new_session=True,
                                        preexec_fn=_take_the_terminal)
        os.close(slave)
        self._raw = bytearray()
        self.pasted_marked = False
        self._lock = threading.Lock()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._raw += data

    @property
    def screen(self) -> str:
        """What a person sees: escape codes applied or dropped, `\r` and backspace moving the cursor."""
        with self._lock:
            text = ANSI.sub("", self._raw.decode("utf-8", "replace"))
        return "\n".join(_overtype(line) for line in text.split("\n"))

    def type(self, text: str) -> None:
        data = text.encode()
        while data:  # a big paste is written as fast as the terminal takes it
            written = os.write(self.master, data[:4096])
            data = data[written:]

    def paste(self, text: str, *, pieces: int = 1, gap: float = 0.0) -> None:
        """Paste as xterm does: between the bracketed-paste marks when the program last asked for them
        (mode 2004: `ESC[?2004h` on, `ESC[?2004l` off), as it is otherwise; in `pieces` written `gap`
        seconds apart, as a slow link or a busy machine delivers a long paste."""
        with self._lock:
            self.pasted_marked = self._raw.rfind(b"\x1b[?2004h") > self._raw.rfind(b"\x1b[?2004l")
        data = f"\x1b[200~{text}\x1b[201~" if self.pasted_marked else text
        size = -(-len(data) // pieces)
        for start in range(0, len(data), size):
            if start:
                time.sleep(gap)  # the input's own pace, not a wait for the shell
            self.type(data[start:start + size])

    def wait_for(self, text: str, count: int = 1, timeout: float = 90) -> str:
        return wait_until(lambda: self.screen.count(text) >= count and self.screen, timeout=timeout,
                          what=f"{text!r} ×{count} on the terminal")

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        os.close(self.master)


def _take_the_terminal() -> None:
    """In the child, after setsid: the pty becomes its controlling terminal, as a terminal window's
    is, so Ctrl-C reaches its foreground process group as SIGINT and a hang-up as SIGHUP; and
    SIGINT handled as a terminal's foreground job has it, even when this test run inherited it
    ignored (started in the background: see tests/test_tpu_sandbox.py)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _overtype(line: str) -> str:
    cells: list[str] = []
    at = 0
    for part in re.split(r"(\x1b\[0?K|\r|\x08)", line):
        if part == "\r":
            at = 0
        elif part == "\x08":
            at = max(0, at - 1)
        elif part.startswith("\x1b"):
            del cells[at:]
        else:
            cells[at:at + len(part)] = part
            at += len(part)
    return "".join(cells)


@pytest.fixture
def terminal(tmp_path, redis_url):
    term = Terminal(tmp_path, redis_url)
    yield term
    term.close()


def test_prompt_editing_history_logs_and_paste(terminal: Terminal) -> None:
    banner = terminal.wait_for("alice> ")
    assert f"the bot's logs go to {terminal.log}" in banner

    # Arrow-key editing: "/tpu hep", one step left, "l" → "/tpu help" (not "^[[D" in the command).
    terminal.type("/tpu hep" + LEFT + "l\r")
    screen = terminal.wait_for(HELP_TITLE)
    assert "Unknown subcommand" not in screen and "^[[D" not in screen
    assert "alice> /tpu help\n" in screen
    terminal.wait_for("alice> ", count=2)

    # History: the up arrow brings the last line back.
    terminal.type(UP + "\r")
    terminal.wait_for(HELP_TITLE, count=2)
    assert terminal.wait_for("alice> ", count=3).count("alice> /tpu help\n") == 2

    # Case-insensitive /TPU, and !help lists every shell command.
    terminal.type("/TPU zones\r")
    terminal.wait_for("Zone scoreboard")
    terminal.type("!help\r")
    screen = terminal.wait_for("!invite          invite")
    for command in ("!click", "!user", "!wait", "!kick", "!invite", "!quit"):
        assert command in screen

    # A paste: 2,000 log lines after the mention are summarized in one line, not echoed.
    logs = "".join(f"2024-05-01 10:{i // 60 % 60:02d}:{i % 60:02d} INFO worker step {i} marker-{i}\n"
                   for i in range(2000))
    terminal.type("@tpubot why did the job stop?\r" + logs.replace("\n", "\r") + "\r")
    screen = terminal.wait_for("[pasted 2,000 lines]")
    terminal.wait_for("Made without the model", timeout=120)
    assert len(re.findall(r"marker-\d+", terminal.screen)) < 50  # the answer may quote a few lines

    # Each typed line shows once: the shell does not echo what the terminal already shows.
    assert terminal.screen.count("alice> /TPU zones") == 1 and "alice> alice>" not in terminal.screen

    # No log line in the conversation; the log file has them (bolt warns about its token at start).
    screen = terminal.screen
    assert "WARNING" not in screen and '"level"' not in screen and "slack_bolt" not in screen
    wait_until(lambda: terminal.log.exists() and "slack_bolt" in terminal.log.read_text(), timeout=10,
               what="bolt's start-up warning in the log file")

    terminal.type("!quit\r")
    assert terminal.process.wait(timeout=60) == 0


def valkey_children(pid: int) -> set[int]:
    """The valkey-server processes whose parent is `pid` (Linux /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            if name.startswith("valkey-server") and int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the shell's valkey through /proc")
def test_ctrl_c_keeps_the_embedded_valkey_and_a_kill_or_hangup_takes_it_along(tmp_path) -> None:
    term = Terminal(tmp_path, redis_url=None)
    try:
        term.wait_for("alice> ")
        (server,) = valkey_children(term.process.pid)
        # Ctrl-C twice at the prompt: the terminal sends SIGINT to its foreground group.
        term.type("\x03")
        term.wait_for("(Ctrl-C: the line was dropped")
        term.type("\x03")
        term.wait_for("(Ctrl-C: the line was dropped", count=2)
        term.type("/tpu status\r")
        screen = term.wait_for("This channel holds no TPU")
        assert "state store is unavailable" not in screen and alive(server)
        term.process.send_signal(signal.SIGTERM)
        term.process.wait(timeout=60)
        assert not alive(server)
    finally:
        term.close()

    term = Terminal(tmp_path, redis_url=None)
    try:
        term.wait_for("alice> ")
        (server,) = valkey_children(term.process.pid)
        term.process.send_signal(signal.SIGHUP)  # what closing the terminal window sends
        term.process.wait(timeout=60)
        assert not alive(server)
    finally:
        term.close()


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="aims the signal at one thread through /proc")
def test_a_signal_the_kernel_hands_to_another_of_the_shells_threads_still_ends_it(tmp_path) -> None:
    """The kernel gives a process's signal to any of its threads that takes it (seen in a loaded run:
    a shell at its prompt that ignored a SIGHUP until its terminal closed). `kill` with the id of a
    thread other than the main one hands the signal to that thread."""
    for sent in (signal.SIGHUP, signal.SIGTERM):
        term = Terminal(tmp_path, redis_url=None)
        try:
            term.wait_for("alice> ")
            (server,) = valkey_children(term.process.pid)
            threads = [int(tid) for tid in os.listdir(f"/proc/{term.process.pid}/task")]
            # The oldest other thread: a server's, which lives as long as the shell (a newer one may be a
            # request's, gone by the time the signal is sent).
            os.kill(min(tid for tid in threads if tid != term.process.pid), sent)
            assert term.process.wait(timeout=60) == 0, sent
            assert not alive(server)
        finally:
            term.close()


def test_a_paste_after_a_typed_mention_line_is_folded_and_lines_wrap_at_80_columns(tmp_path, redis_url) -> None:
    from rich.cells import cell_len

    term = Terminal(tmp_path, redis_url, columns=80)
    try:
        term.wait_for("alice> ")
        # The mention line typed and sent on its own; then, at the `… ` prompt, a paste, marked as a
        # terminal with bracketed paste marks it: told from typing by its marks, however slowly its
        # pieces arrive on a busy machine.
        term.type("@tpubot why did the job stop?\r")
        wait_until(lambda: term.screen.endswith("… "), timeout=30, what="the `… ` prompt")  # the banner has "… " too
        logs = "".join(f"2024-05-01 10:00:{i % 60:02d} INFO worker step {i} marker-{i}\n" for i in range(300))
        term.paste(logs.replace("\n", "\r"), pieces=3, gap=KEYSTROKE_GAP)
        assert term.pasted_marked
        term.type("\r")
        term.wait_for("[pasted 300 lines]")
        term.wait_for("Made without the model", timeout=120)
        assert len(re.findall(r"marker-\d+", term.screen)) < 50  # not echoed line by line

        # A typed continuation line is still typed: shown, and part of the mention.
        term.type("@tpubot and now?\r")
        wait_until(lambda: term.screen.endswith("… "), timeout=30, what="the `… ` prompt")
        term.type("typed-continuation\r")
        term.wait_for("… typed-continuation")
        term.type("\r")
        term.wait_for("Made without the model", count=2, timeout=120)

        # Cards at 80 columns: rows fit, broken at spaces (a word is never split across rows). Typed at
        # the idle prompt: keys typed while an answer is being drawn can land on the answer's line.
        wait_until(lambda: term.screen.endswith("alice> "), timeout=30, what="the idle `alice> ` prompt")
        term.type("/tpu help\r")
        screen = term.wait_for(HELP_TITLE)
        term.wait_for("alice> ", count=4)
        rows = [row for row in term.screen.split("\n")]
        assert all(cell_len(row.rstrip()) <= 80 or " " not in row.strip() for row in rows), \
            [row for row in rows if cell_len(row.rstrip()) > 80]
        assert "/tpu up [zone] [duration]" in screen
    finally:
        term.close()


def test_a_multi_line_reply_keeps_its_lines_on_a_terminal(tmp_path, redis_url) -> None:
    """The receipt is one message of several lines: on a terminal they ran together ("Torn down.TPU
    time …") where piped output kept them; each is a row of its own, under the prefix, on both."""
    terminal = Terminal(tmp_path, redis_url, columns=200)  # wide enough that no receipt line wraps
    try:
        terminal.wait_for("alice> ")
        terminal.type("/tpu up 1h\r")
        terminal.wait_for("· READY ==", timeout=120)
        terminal.type("/tpu down\r")
        terminal.wait_for("[Tear down]")
        terminal.type("!click Tear down\r")
        screen = terminal.wait_for("Torn down by @alice at", timeout=60)
        receipt = screen[screen.index("Receipt for lease"):].split("\n")[:4]
        assert receipt[0].rstrip().endswith("Torn down."), receipt
        indent = " " * len("[thread] tpubot posted: ")
        assert receipt[1].startswith(indent + "TPU time "), receipt
        assert receipt[3].startswith(indent + "Torn down by @alice at"), receipt
        assert "Torn down.TPU time" not in screen
    finally:
        terminal.close()
