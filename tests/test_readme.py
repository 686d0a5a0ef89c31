"""The README's commands run as written.

The two commands at the top would need a network install on a fresh checkout; what can be
checked offline is checked here: the second is exactly what `.ci/run` runs, and the first's
pipeline runs verbatim in a fresh `git clone` of this repository (its `.venv` linked to the
venv these tests run in, so `.venv/bin/tpubot` is the installed tpubot) and walks the whole
lifecycle. Every other `tpubot …` command the README mentions must exist in the real CLI,
with the options it is shown with.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from bot.cli import app
from bot.settings import Settings

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INSTALL_PREFIX = "python3 -m venv .venv && .venv/bin/pip install -q -e . && "


def readme() -> str:
    return README.read_text(encoding="utf-8")


def first_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", readme(), re.S)
    assert block, "the README has no bash block"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) >= 2
    return lines[:2]


def test_second_command_is_exactly_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    marker = next(i for i, line in enumerate(ci) if "README's second command, verbatim" in line)
    assert ci[marker + 1] == first_commands()[1]


def test_first_command_installs_then_runs_the_shell_demo():
    first = first_commands()[0]
    assert first.startswith(INSTALL_PREFIX)
    assert first.endswith("| .venv/bin/tpubot shell")


@pytest.fixture
def fresh_clone(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = tmp_path / "tpubot"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120,
                   capture_output=True)
    # What `python3 -m venv .venv && .venv/bin/pip install -q -e .` leaves: a .venv with tpubot.
    (clone / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return clone


def clean_environment() -> dict[str, str]:
    """A newcomer's shell: none of the bot's settings set (no REDIS_URL, no tokens, no env file)."""
    names = {name.upper() for name in Settings.model_fields} | {"TPUBOT_ENV_FILE"}
    return {key: value for key, value in os.environ.items() if key.upper() not in names}


def test_first_commands_pipeline_runs_in_a_fresh_clone(fresh_clone):
    pipeline = first_commands()[0].removeprefix(INSTALL_PREFIX)
    assert not (fresh_clone / "tpu.env").exists()
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {pipeline}"], cwd=fresh_clone, env=clean_environment(),
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for step in ("alice> /tpu up", "Requested a v5litepod-1 flex-start TPU", "ACTIVE", "READY", "alice> /tpu status",
                 "Tear down this channel's TPU", "clicks [Tear down]", "RELEASED", "Receipt"):
        assert step in out, step
    assert out.rstrip().endswith("This channel holds no TPU. Start one with `/tpu up`.")


# --- every tpubot command shown exists --------------------------------------------------


def shown_commands() -> list[list[str]]:
    """`tpubot X …` inside code spans and code blocks (prose like "tpubot is" is not a command)."""
    text = readme()
    code = re.findall(r"```.*?```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
    found = []
    for snippet in code:
        # An argument runs to the next space, so a URL's placeholder stays in it (`http://IP:8000/v1`).
        for match in re.finditer(r"(?:^|[\s/'\"])tpubot((?: +[a-z-][^\s`'\"]*)+)", snippet):
            found.append(match.group(1).split())
    return found


def test_every_tpubot_command_in_the_readme_exists():
    commands = get_command(app).commands
    shown = shown_commands()
    assert len(shown) > 10
    root_options = {opt for param in get_command(app).params for opt in param.opts}
    for argv in shown:
        if argv == ["--version"]:
            assert argv[0] in root_options, f"`tpubot` has no option {argv[0]}"
            continue
        while argv and argv[0] in root_options:  # `tpubot --debug zones`
            argv = argv[1:]
        name, options = argv[0], [a for a in argv[1:] if a.startswith("--")]
        assert name in commands, f"`tpubot {' '.join(argv)}`: no such command ({', '.join(sorted(commands))})"
        known = {opt for param in commands[name].params for opt in param.opts}
        for option in options:
            assert option in known, f"`tpubot {name}` has no option {option}"


TOUR = ["/tpu help", "/tpu zones", "/tpu up 2h", "/tpu status", "/tpu cost", "!user bob", "/tpu down", "!user alice",
        "/tpu down", "!click Tear down", "@tpubot why did the job stop?",
        "2024-05-01 10:00:01 ERROR rpc failed: DEADLINE_EXCEEDED", "2024-05-01 10:00:02 INFO step 2", "", "!quit"]


def test_the_five_minute_tour_does_what_the_readme_says(fresh_clone):
    section = readme().split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    for line in TOUR:
        assert not line or line in section, f"the tour no longer shows {line!r}"
    result = subprocess.run([str(fresh_clone / ".venv" / "bin" / "tpubot"), "shell"], input="\n".join(TOUR) + "\n",
                            cwd=fresh_clone, env=clean_environment(), capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    claims = ["/tpu up [zone] [duration]", "Zone scoreboard", "CREATING", "WAITING FOR RESOURCES", "PROVISIONING",
              "BOOTING MODEL", "READY", "TTFT", "Rate:", "Only @alice", "RELEASED", "Receipt", "L1"]
    positions = [out.find(claim) for claim in claims]
    assert all(p >= 0 for p in positions), [c for c, p in zip(claims, positions) if p < 0]


# --- every command shown runs, and the claims the code can check hold -------------------

# Commands that answer on embedded defaults without a server, a Slack app or GCP: run as shown.
RUNS_OFFLINE = {"capacity", "cost", "config", "zones", "doctor", "digest", "render-startup-script", "docs", "eval"}
PLACEHOLDER = re.compile(r"IP|YOUR-HOST|…")


def test_every_readme_command_runs_as_shown(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    for name in {name.upper() for name in Settings.model_fields} | {"TPUBOT_ENV_FILE"}:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "worker.log").write_text("2024-05-01 10:00:01 ERROR rpc failed: DEADLINE_EXCEEDED\n")
    ran = set()
    # Each distinct command once: the README shows `tpubot eval` five times, and a second run of the
    # same argv on the same defaults checks nothing the first did not.
    for argv in dict.fromkeys(map(tuple, shown_commands())):
        argv = list(argv)
        literal = not any(PLACEHOLDER.search(arg) for arg in argv)
        offline = argv[0] in RUNS_OFFLINE or argv[0].startswith("--") or (argv[0] == "mcp" and "--list" in argv)
        args = argv if literal and offline else [argv[0], "--help"]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
        assert result.exit_code == 0, f"`tpubot {' '.join(args)}` exited {result.exit_code}: {result.output[-800:]}"
        assert "Traceback" not in result.output
        if args == argv:
            ran.add(argv[0])
    assert {"capacity", "cost", "config", "zones", "doctor", "digest", "--version"} <= ran
    version = CliRunner().invoke(app, ["--version"])
    assert "tpubot --version" in readme() and version.exit_code == 0 and version.output.startswith("tpubot ")


def test_benchmark_commands_in_the_readme_run_with_the_venv_python():
    shown = re.findall(r"`([^`\n]*benchmarks/\w+\.py[^`\n]*)`", readme())
    assert shown
    for command in shown:
        interpreter, script = command.split()[:2]
        assert interpreter == ".venv/bin/python", f"`{command}` needs the venv's python (it imports tpubot)"
        done = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]


def test_readme_links_stay_inside_the_repository():
    for target in re.findall(r"\]\(([^)\s]+)\)", readme()):
        if target.startswith(("http://", "https://", "#")):
            continue
        path = (ROOT / target).resolve()
        assert path.is_relative_to(ROOT), f"README links {target}, outside the repository"
        assert path.exists(), f"README links {target}, which does not exist"


def test_readme_scopes_and_events_are_the_manifests():
    import yaml

    text = " ".join(readme().split())
    claim = re.search(r"exactly the bot scopes the code uses — (.*?) — and the events (.*?) \(", text)
    assert claim, "the README no longer lists the scopes and events"
    scopes = set(re.findall(r"`([\w.:-]+)`", claim.group(1)))
    events = set(re.findall(r"`([\w.]+)`", claim.group(2)))
    for manifest in ("manifest.yaml", "manifest.socket.yaml"):
        data = yaml.safe_load((ROOT / "slack" / manifest).read_text(encoding="utf-8"))
        assert scopes == set(data["oauth_config"]["scopes"]["bot"]), manifest
        assert events == set(data["settings"]["event_subscriptions"]["bot_events"]), manifest


def test_readme_metric_names_are_the_ones_served():
    from infra.metrics import Metrics

    # prometheus_client names a counter's family without its `_total`
    served = {metric.name.removesuffix("_total") for metric in Metrics().registry.collect()}
    section = readme().split("**Metrics**", 1)[1].split("\n\n", 1)[0]
    claimed = {name.removesuffix("_total") for name in re.findall(r"`(tpubot_\w+)`", section)}
    assert claimed == {name for name in served if name.startswith("tpubot_")}


def test_readme_pins_what_the_code_defaults_to_and_names_the_roles_the_vm_uses():
    from infra import boot_phases
    from infra.startup_script import StartupScriptConfig, render_startup_script
    from infra.vllm_flags import DEFAULT_IMAGE, DEFAULT_MODEL_REVISION

    text = readme()
    assert f"default `{DEFAULT_IMAGE}`" in text
    assert f"`MODEL_REVISION` (default `{DEFAULT_MODEL_REVISION}`)" in text
    section = text.split("**How long a boot takes", 1)[1].split("\n\n", 1)[0]
    claimed = re.findall(r"`([a-z-]+)`", section.split("publishes its phase", 1)[1])
    assert claimed[:len(boot_phases.PHASES)] == list(boot_phases.PHASES)
    assert claimed[len(boot_phases.PHASES):] == list(boot_phases.CACHE_STATES)
    # The role the README grants on the bucket is the one the startup script asks for when denied.
    script = render_startup_script(StartupScriptConfig(project="p", xla_cache_bucket="b"))
    assert "roles/storage.objectUser" in script and "--role roles/storage.objectUser" in text


def test_the_json_list_is_every_command_with_json():
    """Issue 44: the README's list of commands that take --json left some out."""
    text = " ".join(readme().split())
    claim = re.search(r"long column wraps or each row becomes a block of `name value` lines\. (.*?) take `--json`", text)
    assert claim, "the README no longer lists the commands that take --json"
    listed = set(re.findall(r"`([a-z-]+)`", claim.group(1)))
    commands = get_command(app).commands
    with_json = {name for name, command in commands.items() if any("--json" in p.opts for p in command.params)}
    assert listed == with_json


def test_the_signed_request_example_is_answered(make_stack):
    """The README's curl example signs a `/tpu help` as Slack does; the bot answers it."""
    if not all(shutil.which(tool) for tool in ("bash", "openssl", "curl")):
        pytest.skip("needs bash, openssl and curl")
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme(), re.S) if "X-Slack-Signature" in b)
    stack = make_stack(run_worker=False, slack_signing_secret="readme-example-secret")
    port = stack.web_url.rsplit(":", 1)[1]
    done = subprocess.run(["bash", "-c", block], capture_output=True, text=True, timeout=60,
                          env={**clean_environment(), "SLACK_SIGNING_SECRET": "readme-example-secret", "PORT": port})
    assert done.returncode == 0, done.stderr
    assert "/tpu up [zone] [duration]" in done.stdout, done.stdout[:500]
    forged = subprocess.run(["bash", "-c", block], capture_output=True, text=True, timeout=60,
                            env={**clean_environment(), "SLACK_SIGNING_SECRET": "not-the-secret", "PORT": port})
    assert "/tpu up" not in forged.stdout  # signed with another secret: refused
