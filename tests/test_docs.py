"""Generated files and their drift tests: docs/commands.md (from the `/tpu` subcommand registry
and the action registry — the same lines `/tpu help` shows) and .env.example (from Settings).

`tpubot docs --check` is what fails on drift; these tests run it on the committed files and show
that it does fail when a registry or the settings change without regenerating.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from agent.actions import REGISTRY
from agent.actions.registry import ActionResult, action
from bot.cli import app
from bot.env_example import ENV_EXAMPLE_PATH, render_env_example
from bot.settings import Settings
from handlers.commands import SUBCOMMANDS, help_line, help_text

ROOT = Path(__file__).resolve().parents[1]
# bot.docs loads the MCP SDK (bot.mcp_server): two seconds that every xdist worker paid at collection.
DOC_PATH = Path("docs/commands.md")


def render_commands_doc() -> str:
    from bot.docs import render_commands_doc

    return render_commands_doc()


def committed(relative: Path) -> str:
    return (ROOT / relative).read_text(encoding="utf-8")


# --- drift --------------------------------------------------------------------------------


def test_committed_generated_files_match_their_sources():
    from bot.docs import DOC_PATH as rendered_to

    assert rendered_to == DOC_PATH
    result = CliRunner().invoke(app, ["docs", "--check", "--root", str(ROOT)])
    assert result.exit_code == 0, f"run `tpubot docs`: {result.output}"
    assert committed(DOC_PATH) == render_commands_doc()
    assert committed(ENV_EXAMPLE_PATH) == render_env_example()


class _DriftArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def test_a_new_action_makes_the_committed_doc_stale(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / DOC_PATH).write_text(committed(DOC_PATH), encoding="utf-8")
    (tmp_path / ENV_EXAMPLE_PATH).write_text(committed(ENV_EXAMPLE_PATH), encoding="utf-8")
    runner = CliRunner()
    assert runner.invoke(app, ["docs", "--check", "--root", str(tmp_path)]).exit_code == 0

    async def drift_probe(svc, actor, args) -> ActionResult:
        return ActionResult.done("")

    action("drift_probe", "A test-only action.", _DriftArgs)(drift_probe)
    try:
        result = runner.invoke(app, ["docs", "--check", "--root", str(tmp_path)])
        assert result.exit_code == 1 and "commands.md is out of date" in result.output
    finally:
        REGISTRY.pop("drift_probe")
    assert runner.invoke(app, ["docs", "--check", "--root", str(tmp_path)]).exit_code == 0


def test_an_edited_env_example_is_flagged(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / DOC_PATH).write_text(committed(DOC_PATH), encoding="utf-8")
    (tmp_path / ENV_EXAMPLE_PATH).write_text(committed(ENV_EXAMPLE_PATH).replace("# ADMIN_GROUPS=\n", ""),
                                             encoding="utf-8")
    result = CliRunner().invoke(app, ["docs", "--check", "--root", str(tmp_path)])
    assert result.exit_code == 1 and ".env.example is out of date" in result.output
    assert CliRunner().invoke(app, ["docs", "--root", str(tmp_path)]).exit_code == 0
    assert (tmp_path / ENV_EXAMPLE_PATH).read_text(encoding="utf-8") == render_env_example()


# --- one source for /tpu help and the doc -------------------------------------------------


def test_help_and_doc_render_the_same_line_for_every_subcommand():
    doc = render_commands_doc()
    help_lines = help_text().splitlines()[1:]
    assert len(help_lines) == len(SUBCOMMANDS)
    for sub, shown in zip(SUBCOMMANDS, help_lines):
        assert shown == f"• {help_line(sub)}"
        assert f"- {help_line(sub)}" in doc, sub.name


def test_every_subcommand_runs_a_registered_action_and_every_action_is_documented():
    doc = render_commands_doc()
    for sub in SUBCOMMANDS:
        assert sub.action is None or sub.action in REGISTRY, f"/tpu {sub.name} names unknown action {sub.action}"
        if sub.action:
            assert f"→ action `{sub.action}`" in doc
    for name, action_ in REGISTRY.items():
        assert f"`{name}`" in doc and f"### `{name}`" in doc, name  # listed for Slack and as an MCP tool
        assert action_.description in doc


# --- .env.example -------------------------------------------------------------------------


def env_lines(text: str) -> dict[str, str]:
    """VAR -> value for every assignment, commented or not."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^(?:# )?([A-Z][A-Z0-9_]*)=(.*)$", line)
        if match:
            assert match.group(1) not in found, f"{match.group(1)} appears twice"
            found[match.group(1)] = match.group(2)
    return found


def test_env_example_documents_every_setting_with_its_description():
    text = committed(ENV_EXAMPLE_PATH)
    assert set(env_lines(text)) == {name.upper() for name in Settings.model_fields}
    for name, field in Settings.model_fields.items():
        assert field.description, f"{name} has no description for .env.example"
        assert f"# {field.description}" in text


def test_env_example_holds_no_secret_value():
    values = env_lines(committed(ENV_EXAMPLE_PATH))
    for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"):
        assert values[name] == ""


def test_uncommenting_every_line_of_env_example_gives_the_defaults(tmp_path, monkeypatch):
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.delenv(name, raising=False)
    uncommented = tmp_path / "tpu.env"
    uncommented.write_text("\n".join(line[2:] if re.match(r"^# [A-Z][A-Z0-9_]*=", line) else line
                                     for line in committed(ENV_EXAMPLE_PATH).splitlines()), encoding="utf-8")
    assert Settings.load(uncommented).model_dump() == Settings.load(tmp_path / "absent.env").model_dump()


@pytest.mark.skipif(os.name != "posix", reason="shell quoting")
def test_env_example_lines_are_plain_key_value_pairs_docker_compose_can_read():
    # compose's env_file takes KEY=VALUE verbatim: no `export`, no spaces around `=`.
    for line in committed(ENV_EXAMPLE_PATH).splitlines():
        if line and not line.startswith("#"):
            assert re.match(r"^[A-Z][A-Z0-9_]*=\S*$", line), line
