"""The linter and the type checker pass on the tree, as part of the README's test command.

Both are configured in pyproject.toml ([tool.ruff], [tool.mypy]) and installed by the dev extra;
they run from the same environment as pytest (the interpreter's bin directory), from the project
root, so a developer who types `ruff check` or `mypy` there sees the same findings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> Path:
    tool = Path(sys.executable).with_name(name)
    if not tool.exists():
        pytest.fail(f"{name} is not installed beside {sys.executable}; install the dev extra: pip install -e '.[dev]'")
    return tool


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    result = _run(_tool("ruff"), "check", "--output-format", "concise", ".")
    assert result.returncode == 0, f"ruff check found:\n{result.stdout}{result.stderr}"


def test_mypy_finds_nothing() -> None:
    # The packages to check (bot, handlers, agent, infra) and the cache (tmp/.mypy_cache) are in pyproject.toml.
    result = _run(_tool("mypy"))
    assert result.returncode == 0, f"mypy found:\n{result.stdout}{result.stderr}"
