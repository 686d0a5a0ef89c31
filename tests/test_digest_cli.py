"""`tpubot digest`: text and JSON output, stdin and gzip files, budget respected."""

from __future__ import annotations

import gzip
import json

import typer
from typer.testing import CliRunner

from agent.digest import estimate_tokens
from bot.cli.digest import register

LOG = "\n".join(
    [f"2024-03-01 12:00:{i % 60:02d},000 INFO [main] svc.Worker: step {i} done in {i * 7 % 300} ms" for i in range(500)]
    + ["2024-03-01 12:09:00,000 ERROR [main] svc.Worker: lost connection to tpu-worker-3: connection reset"]
)


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command("noop")  # a second command keeps typer in multi-command mode, as in bot.cli
    def _noop() -> None: ...

    return app


def test_digest_text_from_stdin():
    result = CliRunner().invoke(_app(), ["digest", "-", "--budget", "500"], input=LOG)
    assert result.exit_code == 0, result.output
    assert "T1 ERROR x1 L501 first-error: lost connection to <*> connection reset" in result.output
    assert "L501 |" in result.output
    assert estimate_tokens(result.output.rstrip("\n")) <= 500


def test_digest_json_from_gzip_file(tmp_path):
    path = tmp_path / "worker.log.gz"
    path.write_bytes(gzip.compress(LOG.encode()))
    result = CliRunner().invoke(_app(), ["digest", str(path), "--budget", "300", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["tokens"] <= 300
    assert data["total_lines"] == 501
    first = data["templates"][0]
    assert first["severity"] == "ERROR" and first["first_line"] == 501 and first["count"] == 1
    assert {"template", "count", "severity", "first_line", "exemplars"} <= set(first)


def test_missing_file_exits_2(tmp_path):
    result = CliRunner().invoke(_app(), ["digest", str(tmp_path / "nope.log")])
    assert result.exit_code == 2


def test_binary_file_is_refused_with_a_message(tmp_path):
    path = tmp_path / "core.bin"
    path.write_bytes(bytes(range(256)) * 8)
    result = CliRunner().invoke(_app(), ["digest", str(path)])
    assert result.exit_code == 2
    assert "is not a text log" in result.output and "\x00" not in result.output and "\x1b" not in result.output
    packed = tmp_path / "core.bin.gz"
    packed.write_bytes(gzip.compress(bytes(range(256)) * 8))
    assert "is not a text log" in CliRunner().invoke(_app(), ["digest", str(packed)]).output


def test_directory_is_named_as_a_directory(tmp_path):
    result = CliRunner().invoke(_app(), ["digest", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.output and "no such file" not in result.output


def test_budget_below_the_minimum_is_refused(tmp_path):
    path = tmp_path / "worker.log"
    path.write_text(LOG)
    result = CliRunner().invoke(_app(), ["digest", str(path), "--budget", "5"])
    assert result.exit_code == 2 and "use at least 64" in result.output


def test_escape_bytes_in_a_log_line_are_shown_not_sent_to_the_terminal():
    result = CliRunner().invoke(_app(), ["digest", "-"], input="ERROR \x1b[31mred\x1b[0m failed\n")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\\x1b[31mred" in result.output


# --- the lean door: `tpubot digest` as a process, without typer --------------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from bot.cli.digest import lean_parser, parse_lean  # noqa: E402

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

REPO = Path(__file__).resolve().parents[1]
# Prints, after the command ran, which of the heavy packages it loaded.
_TPUBOT = ("import atexit, sys\n"
           "atexit.register(lambda: sys.stderr.write('LOADED ' + ' '.join(sorted(m for m in ('typer', 'pydantic', "
           "'click', 'slack_sdk', 'google') if m in sys.modules)) + '\\n'))\n"
           "sys.argv[0] = 'tpubot'\nfrom bot.cli import main\nmain()\n")


def _tpubot(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _TPUBOT, *args], input=stdin, capture_output=True, cwd=REPO,
                          timeout=60, check=False)


def _loaded(done: subprocess.CompletedProcess) -> str:
    return done.stderr.decode().rsplit("LOADED", 1)[1].strip()


def test_both_doors_take_the_same_options():
    from typer.main import get_command

    command = get_command(_app()).commands["digest"]
    typer_options = {
        (tuple(param.opts), param.default if param.default is not None else None)
        for param in command.params if param.param_type_name == "option" and param.name != "help"
    }
    lean_options = {
        (tuple(action.option_strings), action.default)
        for action in lean_parser()._actions if action.option_strings
    }
    assert lean_options == typer_options
    (argument,) = [param for param in command.params if param.param_type_name == "argument"]
    assert parse_lean([]).source == argument.default == "-"


@pytest.mark.parametrize("argv", [
    ["{log}"], ["{log}", "--budget", "300"], ["--budget=300", "--json", "{log}"], ["{gz}", "--json"], ["-"],
    ["{log}", "--budget", "5"], ["{tmp}"], ["{tmp}/missing.log"],
])
def test_the_lean_door_answers_as_typer_does_and_loads_neither_typer_nor_pydantic(tmp_path, argv):
    log = tmp_path / "worker.log"
    log.write_text(LOG)
    (tmp_path / "worker.log.gz").write_bytes(gzip.compress(LOG.encode()))
    argv = [arg.format(log=log, gz=tmp_path / "worker.log.gz", tmp=tmp_path) for arg in argv]
    lean = _tpubot("digest", *argv, stdin=LOG.encode())
    assert _loaded(lean) == ""
    through_typer = CliRunner().invoke(_app(), ["digest", *argv], input=LOG)
    assert lean.returncode == through_typer.exit_code
    assert lean.stdout.decode() == through_typer.stdout
    assert lean.stderr.decode().rsplit("LOADED", 1)[0] == through_typer.stderr


@pytest.mark.parametrize("argv", [["--help"], ["--bogus"], ["--budget", "many"], ["a.log", "b.log"]])
def test_help_and_bad_command_lines_get_typers_answer(argv):
    done = _tpubot("digest", *argv)
    assert "typer" in _loaded(done)
    if argv == ["--help"]:
        assert done.returncode == 0 and "Usage: tpubot digest [OPTIONS] [FILE]" in done.stdout.decode()
    else:
        assert done.returncode == 2 and "Try 'tpubot digest --help' for help." in done.stderr.decode()
        assert "usage: tpubot digest" not in done.stderr.decode()  # argparse said nothing of its own


def test_a_reader_that_stops_early_ends_the_digest_quietly(tmp_path):
    # 6,000 events (distinct first words) and a budget that shows them all: far more output
    # than a pipe buffers, so the digest is still writing when `head` closes the pipe.
    words = ["".join(chr(97 + (n // 26 ** k) % 26) for k in range(4)) for n in range(6_000)]
    log = tmp_path / "events.log"
    log.write_text("".join(f"{word} handler failed on request\n" for word in words))
    (tmp_path / "tpubot.py").write_text(_TPUBOT)
    script = f"{sys.executable} {tmp_path / 'tpubot.py'} digest {log} --budget 400000 | head -n 1"
    done = subprocess.run(["bash", "-c", script], capture_output=True, cwd=REPO, timeout=60)
    assert done.stdout.decode().startswith("Log digest: 6,000 lines, 6,000 templates")
    full = _tpubot("digest", str(log), "--budget", "400000")
    assert len(full.stdout) > 256 * 1024  # a pipe buffers 64 KiB
    assert "Traceback" not in done.stderr.decode() and "BrokenPipe" not in done.stderr.decode()
