"""Dockerfile, docker-compose.yml and Procfile agree, run as non-root, and hold no secret.

No Docker engine runs here, so the files are parsed: the Dockerfile's instructions by hand
(continuation lines joined), the compose file with PyYAML. The Procfile is the reference:
every process type in it must be a compose service whose entrypoint + command is the same
`tpubot …` line, and every such command must exist in the real CLI.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.main import get_command

from bot.cli import app
from bot.settings import SECRET_FIELDS

ROOT = Path(__file__).resolve().parents[1]
SECRET_NAMES = {name.upper() for name in SECRET_FIELDS} | {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"}
SECRET_WORDS = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY", re.IGNORECASE)
SECRET_VALUES = re.compile(r"xox[abposr]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+|hf_[A-Za-z0-9]{10,}|"
                           r"-----BEGIN [A-Z ]*PRIVATE KEY-----|redis://[^@\s/]*:[^@\s/]+@")


# --- parsing ------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for raw in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, rest = full.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def exec_form(arguments: str) -> list[str]:
    return json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)


def last(instructions: list[tuple[str, str]], keyword: str) -> str:
    values = [args for kw, args in instructions if kw == keyword]
    assert values, f"the Dockerfile has no {keyword}"
    return values[-1]


def procfile() -> dict[str, list[str]]:
    processes = {}
    for line in (ROOT / "Procfile").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            processes[name.strip()] = shlex.split(command)
    return processes


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


def image_command(service: dict) -> list[str]:
    """What the container runs: the service's entrypoint/command over the Dockerfile's."""
    instructions = dockerfile()
    entrypoint = service.get("entrypoint", exec_form(last(instructions, "ENTRYPOINT")))
    command = service.get("command", exec_form(last(instructions, "CMD")))
    as_list = lambda value: shlex.split(value) if isinstance(value, str) else list(value)  # noqa: E731
    return as_list(entrypoint) + as_list(command)


def environment_items(service: dict) -> list[tuple[str, str | None]]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return [(item.partition("=")[0], item.partition("=")[2] if "=" in item else None) for item in env]
    return [(key, None if value is None else str(value)) for key, value in env.items()]


# --- Dockerfile ---------------------------------------------------------------------------


def test_image_is_slim_python_311_pinned_and_installs_the_package():
    instructions = dockerfile()
    base = last(instructions, "FROM")
    # Issue 44: an exact release and distribution (or a digest), never a tag that moves (`3.11-slim`).
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?|python@sha256:[0-9a-f]{64}", base), base
    assert any(kw == "RUN" and re.search(r"\bpip install \.(\s|$)", args) for kw, args in instructions)


def test_image_runs_as_a_non_root_user():
    instructions = dockerfile()
    user = last(instructions, "USER").split(":")[0]
    assert user not in ("root", "0", ""), user
    # Nothing after the final USER switches back or runs as root.
    tail = instructions[max(i for i, (kw, _) in enumerate(instructions) if kw == "USER"):]
    assert not [args for kw, args in tail if kw == "RUN"], "RUN after USER runs as the app user; keep installs above"
    created = " ".join(args for kw, args in instructions if kw == "RUN")
    assert re.search(rf"useradd\b.*\b{re.escape(user)}\b", created), f"user {user} is never created"


def test_image_entrypoint_is_tpubot_and_defaults_to_the_web_process():
    instructions = dockerfile()
    assert exec_form(last(instructions, "ENTRYPOINT")) == ["tpubot"]
    assert ["tpubot", *exec_form(last(instructions, "CMD"))] == procfile()["web"]


def test_image_bakes_in_no_secret():
    instructions = dockerfile()
    for keyword, args in instructions:
        if keyword in ("ENV", "ARG", "LABEL"):
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*=", args) or [args.split()[0]]
            for name in names:
                assert name.upper() not in SECRET_NAMES and not SECRET_WORDS.search(name), f"{keyword} {name}"
        if keyword in ("COPY", "ADD"):
            sources = exec_form(args)[:-1]
            assert not any(re.search(r"(^|/)(tpu\.env|\.env)$", src) for src in sources), args
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert not SECRET_VALUES.search(text)
    # A `COPY . …` would take whatever lies in the checkout; the ignore file must keep secrets out.
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {"tpu.env", ".env", ".git", ".venv"} <= set(ignored)


# --- compose ------------------------------------------------------------------------------


def test_compose_runs_web_worker_and_redis():
    services = compose()["services"]
    assert {"web", "worker", "redis"} <= set(services)
    assert services["redis"]["image"].startswith("redis:")
    for name in ("web", "worker"):
        assert services[name]["build"] in (".", {"context": "."}), "web and worker run the Dockerfile's image"
        assert "redis" in services[name]["depends_on"]
        env = dict(environment_items(services[name]))
        assert env["REDIS_URL"].startswith("redis://redis:")


@pytest.mark.parametrize("process", sorted(procfile()))
def test_every_procfile_process_is_a_compose_service_running_the_same_command(process):
    services = compose()["services"]
    assert process in services, f"Procfile process {process} has no compose service"
    assert image_command(services[process]) == procfile()[process]


def test_procfile_commands_exist_in_the_cli():
    commands = set(get_command(app).commands)
    for process, argv in procfile().items():
        assert argv[0] == "tpubot" and argv[1] in commands, f"{process}: {argv}"


def test_compose_sets_no_secret_and_reads_configuration_from_tpu_env():
    services = compose()["services"]
    for name, service in services.items():
        for key, value in environment_items(service):
            if key.upper() in SECRET_NAMES or SECRET_WORDS.search(key):
                assert value in (None, ""), f"{name} sets {key} to a value; put it in tpu.env"
            assert value is None or not SECRET_VALUES.search(value), f"{name}: {key} looks like a secret"
    for name in ("web", "worker"):
        files = services[name]["env_file"]
        paths = [f if isinstance(f, str) else f["path"] for f in files]
        assert "tpu.env" in paths
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert not SECRET_VALUES.search(text)
    assert not re.search(r"(?im)^\s*-?\s*(SLACK_BOT_TOKEN|SLACK_SIGNING_SECRET|SLACK_APP_TOKEN|HF_TOKEN)\s*[:=]\s*\S",
                         text)


def test_secrets_files_are_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert {"/tpu.env", "/.env"} <= set(ignored)
