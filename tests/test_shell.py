"""`tpubot shell` as a user runs it: a piped script through the real CLI entry point."""

import os
import subprocess
import sys
from pathlib import Path
import pytest

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)


TPUBOT = Path(sys.executable).with_name("tpubot")


def run_shell(script: str, tmp_path, redis_url: str, timeout: float = 240,
              args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_"))}
    env["REDIS_URL"] = redis_url
    return subprocess.run([str(TPUBOT), "shell", *args], input=script, capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=timeout)


def test_piped_lifecycle_prints_active_then_gone_and_exits_0(tmp_path, redis_url):
    result = run_shell("/tpu up\n/tpu status\n/tpu down\n!click Tear down\n/tpu status\n", tmp_path, redis_url)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    active = out.index("· ACTIVE ==")
    confirm = out.index("[Tear down]")
    released = out.index("· RELEASED ==")
    gone = out.rindex("This channel holds no TPU")
    assert active < confirm < released < gone
    assert "Torn down by @alice" in out
    assert "Traceback" not in out + result.stderr
    # Each state once, spelled one way (header and State field); an edit prints only what changed.
    assert out.count("· CREATING ==") == 1 and out.count("State: ⏳ CREATING") == 1
    assert "BOOTING_MODEL" not in out and "WAITING_FOR_RESOURCES" not in out
    # No log line in the conversation: logs go to the file the banner names.
    assert "WARNING" not in out + result.stderr and "the bot's logs go to " in out


def test_shell_users_and_unknown_buttons(tmp_path, redis_url):
    script = "/tpu up\n!user bob\n/tpu down\n!click Nothing\n/tpu launch\n!user alice\n/tpu down\n!click Cancel\n/tpu status\n"
    result = run_shell(script, tmp_path, redis_url)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "now acting as bob" in out
    assert "Only @alice (the holder) or an admin" in out
    assert "no button whose label contains 'Nothing'" in out
    assert "Unknown subcommand `launch`" in out
    assert "Kept the TPU; nothing changed." in out
    # Kept: the TPU is still there, and by now its model is serving (ACTIVE → BOOTING MODEL → READY).
    assert "· READY ==" in out.split("alice> /tpu status")[-1]


def test_up_shows_the_boot_phases_before_ready_and_a_second_up_with_a_bucket_boots_warm(tmp_path, redis_url,
                                                                                        monkeypatch):
    monkeypatch.setenv("XLA_CACHE_BUCKET", "tpubot-sandbox-cache")
    # Each boot phase lasts under a second of sandbox time at the default scale; a card update on a busy
    # machine could fall before and after one (a CI run missed "compiling"): four times slower, each lasts
    # several of the watcher's polls.
    monkeypatch.setenv("SANDBOX_TIME_SCALE", "4")
    result = run_shell("/tpu up\n!wait\n/tpu down\n!click Tear down\n/tpu up\n!wait\n", tmp_path, redis_url)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    first, second = out.split("alice> /tpu down")[0], out.split("clicks [Tear down]")[1]
    booting, ready = first.index("· BOOTING MODEL =="), first.index("· READY ==")
    assert "Boot phase: compiling (XLA) for " in first[booting:ready]
    assert "Compile cache: cold boot" in first[booting:ready]
    assert "Boot: cold boot" in first[ready:]
    assert "Compile cache: warm boot" in second[: second.index("· READY ==")]
    assert "Boot: warm boot (compile cache restored from XLA_CACHE_BUCKET)" in second[second.index("· READY =="):]


def test_a_lease_waiting_for_capacity_does_not_hold_up_the_next_lines(tmp_path, redis_url):
    """us-west1-c has no capacity in the sandbox: the lease waits there for hours. The script's
    later lines are answered at once and the waiting line is named (not "gave up waiting after
    180s" on each); the timeout is far above what that takes, far below 180 s per line."""
    result = run_shell("/tpu up us-west1-c 1h\n/tpu status\n/tpu zones\n", tmp_path, redis_url, timeout=150)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "gave up waiting" not in out
    told = "(/tpu up us-west1-c 1h is still working: waiting for capacity in us-west1-c)"
    assert out.count(told) == 1
    status, zones = out.index("alice> /tpu status"), out.index("alice> /tpu zones")
    assert out.index(told) < status
    assert "· WAITING FOR RESOURCES ==" in out[status:zones] and "Zone scoreboard" in out[zones:]


def test_channels_and_users_by_name_and_a_bare_user_command(tmp_path, redis_url):
    out = run_shell("/tpu budget\n!kick\n/tpu up\n!invite\n!user\n", tmp_path, redis_url).stdout
    assert "<#" not in out and "<@" not in out
    assert "• #tpu-shell: no limit" in out
    assert "I'm not in #tpu-shell" in out and "(alice removed tpubot from #tpu-shell)" in out
    # `!user` alone changes nothing and says who you are and how to change it.
    assert "(acting as alice, UALICE; !user NAME acts as another: any name, known so far: alice)" in out
    assert "now acting as" not in out


def test_the_feedback_flow_runs_in_the_shell_and_membership_changes_say_so_once(tmp_path, redis_url):
    """!click Useful once pressed the [Not useful] beside it, and nothing could reply in a thread."""
    script = ("@tpubot why did the job stop?\n2024-05-01 10:00:01 ERROR rpc failed: DEADLINE_EXCEEDED\n\n"
              "!click Not useful\n!reply the disk on worker 3 was full\n!click Useful\n"
              "!kick\n!kick\n!invite\n!invite\n")
    result = run_shell(script, tmp_path, redis_url, args=("--no-model",))
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "an empty line ends a mention: Enter twice" in out  # the banner says what a one-line mention needs
    assert "[👍 Useful]  [👎 Not useful]" in out  # buttons as Slack draws them, not [:+1: Useful]
    down, correction, up = (out.index("clicks [👎 Not useful]"), out.index("(in the thread) the disk on worker 3"),
                            out.index("clicks [👍 Useful]"))
    assert down < correction < up
    assert "Kept with your 👎 as what the answer should have said" in out[correction:up]
    assert "recorded 👍 (in place of your earlier rating)" in out[up:]
    assert out.count("(alice removed tpubot from #tpu-shell)") == 1
    assert out.count("(tpubot is already out of #tpu-shell: nothing changed)") == 1
    assert out.count("(alice invited tpubot to #tpu-shell)") == 1
    assert out.count("(tpubot is already in #tpu-shell: nothing changed)") == 1


def test_the_shell_deletes_its_own_log_file_at_exit_unless_it_holds_an_error(tmp_path, redis_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "TPUBOT_SHELL_LOG"))}
    env.update({"REDIS_URL": redis_url, "TMPDIR": str(tmp_path)})  # the shell's own file goes to the temp folder
    result = subprocess.run([str(TPUBOT), "shell", "--no-model"], input="/tpu status\n", capture_output=True,
                            text=True, cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    named = next(line for line in result.stdout.splitlines() if "the bot's logs go to" in line)
    assert "deleted at exit unless it holds an error" in named
    assert list(tmp_path.glob("tpubot-shell-*.log")) == []
