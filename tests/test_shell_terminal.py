"""`tpubot shell` on a terminal, driven through a pseudo-terminal (stdlib `pty`, nothing to install):
a prompt before input, arrow-key editing and history (readline), no log line in the conversation
(logs go to the file the banner names), and a paste echoed as a one-line summary."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from waiting import wait_until

TPUBOT = Path(sys.executable).with_name("tpubot")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-JL-Za-z]|\x1b[=>]")  # all but K (erase to end of line)
LEFT, UP = "\x1b[D", "\x1b[A"
HELP_TITLE = "tpubot — one flex-start TPU v5e with Gemma per channel"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")


class Terminal:
    """The shell on the slave side of a pty; everything it draws is collected from the master."""

    def __init__(self, tmp_path: Path, redis_url: str) -> None:
        self.log = tmp_path / "shell.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_"))}
        env.update({"REDIS_URL": redis_url, "TERM": "xterm", "TPUBOT_SHELL_LOG": str(self.log),
                    "TPUBOT_ENV_FILE": os.devnull, "COLUMNS": "120", "LINES": "40"})
        env.pop("INPUTRC", None)
        self.master, slave = os.openpty()
        self.process = subprocess.Popen([str(TPUBOT), "shell", "--no-model"], stdin=slave, stdout=slave,
                                        stderr=slave, cwd=tmp_path, env=env, start_new_session=True)
        os.close(slave)
        self._raw = bytearray()
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

    def wait_for(self, text: str, count: int = 1, timeout: float = 90) -> str:
        return wait_until(lambda: self.screen.count(text) >= count and self.screen, timeout=timeout,
                          what=f"{text!r} ×{count} on the terminal")

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        os.close(self.master)


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
