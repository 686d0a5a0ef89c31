"""Reporting commands read well anywhere: no value is ever cut (at 80 columns, piped, or on a
terminal), piped output is plain text, and every `--json` parses with the keys docs/json.md lists."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bot.cli import app, package_version
from bot.cli.output import Report, print_report
from infra import capacity

ROOT = Path(__file__).resolve().parents[1]
TPUBOT = Path(sys.executable).with_name("tpubot")
BOX = re.compile(r"[│┃━─┏┓┗┛┡┩╇╋]")


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """Embedded defaults: no tpu.env, no settings from the caller's environment."""
    from bot.settings import Settings

    for name in list(os.environ):
        if name.lower() in Settings.model_fields:
            monkeypatch.delenv(name)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)
    monkeypatch.chdir(tmp_path)
    return {k: v for k, v in os.environ.items()}


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.e2e
def test_capacity_piped_at_80_columns_shows_the_exact_kv_pool(clean_env):
    """The issue's must-show, through the installed script and a real pipe."""
    done = subprocess.run([str(TPUBOT), "capacity"], env={**clean_env, "COLUMNS": "80"}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pools = [f"{capacity.plan(profile).kv_pool_tokens:,}" for profile in capacity.PROFILES]
    assert pools[0] == "290,106"
    for figure in pools:
        assert re.search(rf"\b{re.escape(figure)}\b", done.stdout), done.stdout
    assert "…" not in done.stdout and not BOX.search(done.stdout)
    assert max(len(line) for line in done.stdout.splitlines()) <= 80


@pytest.mark.parametrize("command", [["capacity"], ["cost"], ["config"], ["zones"], ["cost", "--hours", "2"]])
def test_no_value_is_cut_at_80_columns(clean_env, command):
    out = run(*command)
    assert "…" not in out and not BOX.search(out), out
    if command[0] == "config":
        # the longest values are there whole, wrapped only after a comma or semicolon
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("TPU_ZONES "))
        cell = "".join(line[29:66].strip() for line in lines[at:at + 2])
        assert cell == "us-west4-a,us-central1-a,us-west1-c,us-south1-a,europe-west4-a", lines[at:at + 2]
        assert "v5e/us-west4/spot $0.5779/chip-hour" in out
    if command[0] == "cost":
        assert "https://cloud.google.com/tpu/pricing" in out and ".md" not in out


@pytest.mark.parametrize("width", [30, 50, 80, 120, 400])
@pytest.mark.parametrize("terminal", [False, True])
def test_layouts_never_cut_a_value(width, terminal):
    report = Report(title="t", columns=["name", "a long header here", "value"], right_aligned=frozenset({"value"}))
    values = [["us-west4-a", "x" * 37, "1,155,181"], ["v5e-1 (v5litepod-1)", "short words that wrap well " * 3, "8.97"]]
    for row in values:
        report.add_row(*row)

    class Out(io.StringIO):
        def isatty(self) -> bool:
            return terminal

    out = Out()
    print_report(report, out, width=width)
    text = out.getvalue()
    assert "…" not in text
    flat = " ".join(text.split())
    for row in values:
        for value in row:
            assert " ".join(value.split()) in flat or all(word in text for word in value.split()), (value, text)
    if not terminal:
        assert not BOX.search(text)
    if terminal and width >= 120:
        assert BOX.search(text)  # a terminal wide enough gets the box table


def test_records_below_a_width():
    report = Report(title="", columns=["accelerator", "KV tokens", "max req @ 16,384"])
    report.add_row("v5e-1 (v5litepod-1)", "290,106", "17")
    out = io.StringIO()
    print_report(report, out, width=36)
    assert out.getvalue().splitlines()[:3] == ["accelerator: v5e-1 (v5litepod-1)", "  KV tokens         290,106",
                                               "  max req @ 16,384  17"]


def documented_keys() -> dict[str, list[str]]:
    """docs/json.md: `## \\`tpubot CMD --json\\`` then `- \\`key\\` — …` bullets."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in (ROOT / "docs/json.md").read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## `tpubot (.+?) --json`", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
        elif current is not None and (bullet := re.match(r"- `(\w+)`", line)):
            current.append(bullet.group(1))
    return sections


@pytest.mark.parametrize("command", ["capacity", "cost", "zones", "config", "doctor", "digest"])
def test_json_parses_and_has_the_documented_keys(clean_env, tmp_path, command):
    args = [command, "--json"]
    if command == "digest":
        log = tmp_path / "worker.log"
        log.write_text("2024-05-01 10:00:01 ERROR rpc failed: DEADLINE_EXCEEDED\n2024-05-01 10:00:02 INFO step 2\n")
        args.insert(1, str(log))
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert list(document) == documented_keys()[command]


def test_every_reporting_command_is_documented_with_json():
    from agent.lease.reconcile import ReconcileReport

    sections = documented_keys()
    assert set(sections) == {"capacity", "cost", "bench", "zones", "config", "doctor", "reconcile", "digest", "spend",
                             "eval", "feedback", "feedback --export-evals DIR"}
    assert sections["reconcile"] == ["summary", *(f.name for f in dataclasses.fields(ReconcileReport))]
    for name in sections:
        command, *options = name.split()
        help_text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        assert "--json" in help_text and all(option in help_text for option in options if option.startswith("--")), name


def test_bench_json_keys_are_the_documented_ones():
    from infra.bench import PromptEstimate, SweepConfig, SweepResult

    result = SweepResult(config=SweepConfig(base_url="http://x/v1", model="m"), estimate=PromptEstimate(),
                         started_at="2026-12-01T00:00:00+00:00", cells=[])
    assert list(result.as_dict()) == documented_keys()["bench"]


def test_version_and_help_without_type_noise():
    version = CliRunner().invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output == f"tpubot {package_version()}\n"
    for command in ("bench", "capacity", "cost", "digest", "shell", "zones", "serve", "worker"):
        text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"}).output
        assert not re.search(r"<(str|bool|int|float|path)[^>]*>", text), text
        assert not re.search(r"\d\.\d{5,}", text), text  # defaults as a person writes them
        assert not re.search(r"default: \(", text), text  # click wraps a string default in parentheses
        assert "…" not in text
        assert "[default: 0]" not in text  # 0 standing for "unset" is not a default a person would write
    assert "8.97" in CliRunner().invoke(app, ["capacity", "--help"]).output
    summary = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}).output
    commands = summary.split("Commands:")[1]
    assert "..." not in commands and "…" not in commands  # click would cut each summary at 45 characters


def test_cost_refuses_out_of_range_hours_and_wrong_accelerator_names(clean_env):
    from bot.settings import WRONG_ACCELERATOR_SPELLINGS

    for hours, message in (("-1", "must be above 0"), ("0", "must be above 0"), ("999", "limit of 168 h")):
        result = CliRunner().invoke(app, ["cost", "--hours", hours])
        assert result.exit_code == 2 and message in result.output, result.output
        assert "$" not in result.output
    assert CliRunner().invoke(app, ["cost", "--hours", "999", "--provisioning", "on-demand"]).exit_code == 0
    for wrong, right in WRONG_ACCELERATOR_SPELLINGS.items():
        result = CliRunner().invoke(app, ["cost", "--accelerator", wrong])
        assert result.exit_code == 2 and f"use --accelerator={right}" in result.output, result.output


def test_many_rows_split_into_narrower_tables_that_repeat_the_keys():
    columns = ["context", "conc", *(f"metric {i}" for i in range(12))]
    report = Report(title="", columns=columns, right_aligned=frozenset(columns), key_columns=2)
    for context in (128, 1024, 8192, 15000):
        report.add_row(context, 64, *(f"{1000.5 + i:.1f}" for i in range(12)))
    out = io.StringIO()
    print_report(report, out, width=80)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    headers = [line for line in lines if line.startswith("context")]
    assert len(headers) >= 2 and all(line.split()[:2] == ["context", "conc"] for line in headers)
    for i in range(12):
        assert sum(len(re.findall(rf"metric {i}\b", line)) for line in headers) == 1  # every column once, none cut
    assert out.getvalue().count("15000") == len(headers)


@pytest.mark.e2e
def test_bot_cli_app_is_the_typer_app_whatever_was_imported_first():
    import subprocess
    import sys

    script = ("import bot.cli.assemble, bot.cli.digest, typer\nfrom bot.cli import app, package_version\n"
              "assert isinstance(app, typer.Typer), type(app)\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_every_column_has_a_header_and_counts_have_thousands_separators(clean_env):
    """Issue 29 item 9: `tpubot cost`'s marker column had no header; capacity printed 1128 beside 1,155,181."""
    cost = run("cost").splitlines()
    header = next(line for line in cost if "$/chip-h" in line)
    assert header.split() == ["rate", "$/chip-h", "as", "of", "source", "used"]
    assert "rate: accelerator/region/provisioning model; used: * marks the rate used below" in cost
    out = run("capacity")
    requests = max(capacity.plan(profile, context_tokens=1024).max_concurrent_requests for profile in capacity.PROFILES)
    assert requests >= 1000 and f"{requests:,}" in out and f" {requests} " not in out, out


@pytest.mark.parametrize("columns", ["60", "40"])
def test_narrow_price_blocks_are_titled_by_the_rate(clean_env, columns):
    """Issue 44: at COLUMNS=60 each price became a block titled `used:` (its first column, a marker)."""
    result = CliRunner().invoke(app, ["cost"], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert not any(line.startswith("used:") for line in lines)
    assert any("v5e/us-west4/flex-start" in line for line in lines)


# --- one command, one module ---------------------------------------------------------------------------


def test_each_command_is_mapped_to_the_module_that_registers_it():
    """`tpubot <command>` assembles only COMMANDS[command]'s module: the map must say what registers what."""
    import importlib

    import typer

    from bot.cli.command_map import COMMANDS
    from bot.cli.assemble import COMMAND_MODULES

    registered: dict[str, str] = {}
    for module in COMMAND_MODULES:
        alone = typer.Typer()
        importlib.import_module(module).register(alone)
        for name in [c.name or c.callback.__name__ for c in alone.registered_commands] + \
                [g.name for g in alone.registered_groups]:
            registered[name] = module
    assert registered == COMMANDS


@pytest.mark.parametrize("command", ["config", "cost", "shell", "sandbox", "render-startup-script", "spend", "eval"])
def test_a_command_assembled_alone_answers_as_in_the_whole_app(command):
    from bot.cli.command_map import COMMANDS
    from bot.cli.assemble import new_app

    alone = CliRunner().invoke(new_app((COMMANDS[command],)), [command, "--help"], env={"COLUMNS": "100"})
    whole = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert alone.exit_code == whole.exit_code == 0 and alone.output == whole.output


def test_the_command_is_the_first_word_after_the_root_flags():
    from bot.cli.command_map import command_of

    assert command_of(["--debug", "zones", "--json"]) == "zones"
    assert command_of(["--version"]) is None and command_of([]) is None
