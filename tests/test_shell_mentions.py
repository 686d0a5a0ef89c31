"""`tpubot shell`: a mention with 50 lines of logs piped in gets a summary in the thread, with
the sandbox model (a labelled heuristic) and with `--no-model`."""

import os
import subprocess
import sys
from pathlib import Path

TPUBOT = Path(sys.executable).with_name("tpubot")


def mention_script() -> str:
    lines = ["@tpubot summarize these logs"]
    for i in range(1, 51):
        if i == 34:
            lines.append(f"2024-05-01 10:00:{i:02d},123 CRITICAL [runtime] TPU runtime crashed: core dump in /tmp/core.{i}")
        elif i % 10 == 8:
            lines.append(f"2024-05-01 10:00:{i:02d},123 ERROR [worker-{i % 4}] RPC to tpu-v5e-{i % 4} failed: "
                         f"DEADLINE_EXCEEDED after {1000 + i} ms")
        else:
            lines.append(f"2024-05-01 10:00:{i:02d},123 INFO [worker-{i % 4}] step {i} loss={1 / i:.4f}")
    return "\n".join(lines) + "\n\n"


def run_shell(args: list[str], script: str, tmp_path, redis_url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "GEMMA_", "AGENT_"))}
    env["REDIS_URL"] = redis_url
    return subprocess.run([str(TPUBOT), "shell", *args], input=script, capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=240)


def test_piped_mention_with_logs_is_summarized_by_the_sandbox_model(tmp_path, redis_url):
    result = run_shell([], mention_script(), tmp_path, redis_url)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "sandbox model (heuristic, not Gemma)" in out
    reply = out[out.index("[thread] tpubot replied:") if "[thread] tpubot replied:" in out else out.rindex("[thread]"):]
    assert "heuristic stand-in, not Gemma" in reply and "summarize_logs returned" in reply
    assert "L34" in reply and "Answered by the model (GEMMA_BASE_URL) in 2 steps; tools: summarize_logs" in reply
    assert "Traceback" not in out + result.stderr


def test_piped_mention_with_logs_is_summarized_without_a_model(tmp_path, redis_url):
    result = run_shell(["--no-model"], mention_script() + "!click Bring the model up\n/tpu status\n", tmp_path, redis_url)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    summary = out[out.index("Log summary"):]
    assert "50 lines" in summary and "CRITICAL ×1 (L34)" in summary and "ERROR ×5 (L8–L48)" in summary
    assert "Made without the model: the model is switched off here" in summary
    assert "[Bring the model up]" in out and "clicks [Bring the model up]" in out
    assert "holds no TPU" not in out.split("alice> /tpu status")[-1]
    assert "Traceback" not in out + result.stderr
