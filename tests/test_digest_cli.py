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
