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
