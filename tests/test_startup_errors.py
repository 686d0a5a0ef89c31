"""Misconfiguration at start-up, as an operator meets it: the real `tpubot` command prints one
line naming the variable, the problem and the fix, exits 2, and shows no traceback unless
`--debug` asks for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.local_stack import free_port

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

TPUBOT = Path(sys.executable).with_name("tpubot")
SLACK = {"SLACK_BOT_TOKEN": "xoxb-startup-errors-0000", "SLACK_SIGNING_SECRET": "startup-errors-secret"}


def dead_redis() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there


# A machine without Application Default Credentials, wherever the tests run: no key file named, no
# gcloud login (CLOUDSDK_CONFIG is where gcloud keeps it), and google-auth told it is not on GCE
# (NO_GCE_CHECK), so it does not find a CI runner's metadata server.
NO_ADC = {"GCP_PROJECT": "my-project", "GOOGLE_APPLICATION_CREDENTIALS": "", "CLOUDSDK_CONFIG": "/nonexistent/gcloud",
          "NO_GCE_CHECK": "true"}
NO_ADC_LINE = ["GCP_PROJECT=my-project is set, but no Google credentials were found",
               "gcloud auth application-default login", "GOOGLE_APPLICATION_CREDENTIALS"]


# (command, environment, what the one line must say)
CASES = [
    (["zones"], {"REDIS_URL": "notaurl"}, ["REDIS_URL=notaurl", "redis://localhost:6379/0"]),
    (["zones"], {"REDIS_URL": dead_redis()}, ["cannot reach Redis at REDIS_URL=redis://127.0.0.1:", "start it"]),
    (["doctor"], {"REDIS_URL": dead_redis()}, ["cannot reach Redis at REDIS_URL=", "start it"]),
    (["reconcile"], {"REDIS_URL": dead_redis()}, ["cannot reach Redis at REDIS_URL=", "start it"]),
    (["cost", "--channel", "C0COST", "--team", "T0COST"], {"REDIS_URL": dead_redis()},
     ["cannot reach Redis at REDIS_URL=", "start it"]),
    (["shell"], {"REDIS_URL": dead_redis()}, ["cannot reach Redis at REDIS_URL=", "start it"]),
    # REDIS_STARTUP_WAIT 0.5 s: the wait still retries (its backoff starts at 0.2 s) and the line names no wait.
    (["worker"], {"REDIS_URL": dead_redis(), "REDIS_STARTUP_WAIT": "0.5s", "TPU_API_ENDPOINT": "http://127.0.0.1:9"},
     ["cannot reach Redis at REDIS_URL="]),
    # Nothing configured: not a call to Google's TPU API for the sandbox project (serve and socket refuse too).
    (["worker"], {}, ["GCP_PROJECT is not set", "set GCP_PROJECT to your project id", "tpubot dev"]),
    # Slack's credentials missing: said as every other start-up problem (it once had no `tpubot:` prefix).
    (["serve"], {}, ["SLACK_SIGNING_SECRET, SLACK_BOT_TOKEN must be set (in tpu.env or the environment)"]),
    (["socket"], {}, ["SLACK_APP_TOKEN, SLACK_BOT_TOKEN must be set (in tpu.env or the environment)"]),
    (["config"], {"TPU_LABELS": "notjson"}, ["TPU_LABELS is not valid JSON", "TPU_LABELS='{"]),
    (["zones"], {"TPU_LABELS": "notjson"}, ["TPU_LABELS is not valid JSON"]),
    (["serve"], {**SLACK, "REDIS_URL": "http://localhost:6379"}, ["REDIS_URL=http://localhost:6379", "redis://"]),
    (["serve"], {**SLACK, "PORT": "abc"}, ["PORT=abc is not a whole number", "PORT=3000"]),
    (["serve"], {**SLACK, "PORT": "99999"}, ["PORT=99999 is not a TCP port", "1-65535"]),
    # The option is checked as the setting is: it once listened on a random port, saying ":99999".
    (["serve", "--port", "99999"], SLACK, ["--port 99999 is not a TCP port", "1-65535", "PORT=3000"]),
    (["dev", "--port", "99999"], {}, ["--port 99999 is not a TCP port", "1-65535"]),
    (["worker", "--metrics-port", "70000"], {"TPU_API_ENDPOINT": "http://127.0.0.1:9"},
     ["--metrics-port 70000 is not a TCP port", "0-65535"]),
    # A project without credentials stops every process at start, not at its first cloud call.
    (["shell"], NO_ADC, NO_ADC_LINE),
    (["serve"], {**SLACK, **NO_ADC}, NO_ADC_LINE),
    (["worker"], NO_ADC, NO_ADC_LINE),
    (["worker"], {**NO_ADC, "GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/key.json"},
     ["GOOGLE_APPLICATION_CREDENTIALS=/nonexistent/key.json gives no credentials", "was not found",
      "service-account key file"]),
    # Names Google refuses are refused before a job sends them.
    (["config"], {"TPU_LABELS": '{"Team": "ml"}'}, ["TPU_LABELS: the key 'Team' does not start with a lowercase",
                                                    "TPU_LABELS='{"]),
    (["config"], {"TPU_LABELS": '{"team": "ML Ops"}'}, ["the value 'ML Ops' holds 'M'", "write 'ml-ops'"]),
    (["config"], {"TPU_LABELS": '{"managed-by": "me"}'}, ["the key 'managed-by' is one of the bot's own"]),
    (["config"], {"GCP_PROJECT": "My Project"}, ["GCP_PROJECT=My Project is not a project id", "gcloud projects list"]),
    (["serve"], {**SLACK, "REDIS_URL": dead_redis(), "REDIS_STARTUP_WAIT": "0.5s"}, ["cannot reach Redis at REDIS_URL=",
                                                                                  "start it"]),
    # A zone typo is refused before it can reach the TPU API (and jam a channel).
    (["config"], {"TPU_ZONE": "us-west4a"}, ["TPU_ZONE=us-west4a is not a zone name", "write us-west4-a"]),
    (["config"], {"TPU_ZONES": "us-west4-a,uscentral1a"}, ["TPU_ZONES=us-west4-a,uscentral1a: 'uscentral1a' is not a "
                                                           "zone name", "like us-west4-a"]),
    (["worker"], {"ALERT_LEAD_TIMES": "banana"}, ["ALERT_LEAD_TIMES=banana", "write it like"]),
    (["serve"], {**SLACK, "ADMINS": "alice bob"}, ["ADMINS=alice bob", "not a Slack user id", "ADMINS=U012ABCDEF,"]),
    (["config"], {"TPUBOT_ENV_FILE": "/nonexistent/tpu.env"}, ["TPUBOT_ENV_FILE=/nonexistent/tpu.env names no file"]),
    (["serve"], {**SLACK, "SLACK_API_URL": "slack.com/api"}, ["SLACK_API_URL=slack.com/api", "http://"]),
    # Images and flags vLLM on a v5e would only refuse after the VM booted (or compiled for 15 minutes).
    (["config"], {"VLLM_IMAGE": "vllm/vllm-tpu:v0.19.0"},
     ["VLLM_IMAGE=vllm/vllm-tpu:v0.19.0 cannot serve Gemma 4 E2B", "shared-KV", "use VLLM_IMAGE=vllm/vllm-tpu:v0.32.0"]),
    (["config"], {"VLLM_IMAGE": "us-west4-docker.pkg.dev/p/r/vllm-tpu:v0.23.0"},
     ["serves vLLM 0.23.0", "tool-call parser predates", "use VLLM_IMAGE=vllm/vllm-tpu:v0.32.0"]),
    (["config"], {"VLLM_MAX_NUM_BATCHED_TOKENS": "256"},
     ["VLLM_MAX_NUM_BATCHED_TOKENS=256 is below the largest multimodal item", "280 tokens",
      "use VLLM_MAX_NUM_BATCHED_TOKENS=4096"]),
    (["config"], {"VLLM_GPU_MEMORY_UTILIZATION": "0.95"},
     ["VLLM_GPU_MEMORY_UTILIZATION=0.95", "RuntimeProgramAllocationFailure", "use VLLM_GPU_MEMORY_UTILIZATION=0.92"]),
    # PRICES in a shape it does not have was read and ignored: the defaults billed, `config` said "environment".
    (["cost"], {"PRICES": '{"foo": 1}'}, ["PRICES is a JSON object with keys foo, neither an entry nor",
                                         "write it as a JSON list of entries, like PRICES='[{\"accelerator\""]),
    (["cost", "--json"], {"PRICES": '{"v5e/us-west4/flex-start": {"usd_per_chip_hour": 9.9}}'},
     ["PRICES is a JSON object with keys v5e/us-west4/flex-start", "a JSON list of entries"]),
    (["config"], {"PRICES": "5"}, ["PRICES is 5, not a list of entries", "a JSON list of entries"]),
    # null was decoded to None by pydantic-settings and dropped: the defaults, without a word.
    (["config"], {"PRICES": "null"}, ["PRICES is null, not a list of entries", "a JSON list of entries"]),
    (["config"], {"PRICES": "v5e=0.6"}, ["PRICES is not valid JSON (Expecting value", "a JSON list of entries"]),
    (["config"], {"PRICES": '{"entries": {"v5e": 1}}'}, ['PRICES has "entries": dict, not a list of entries']),
    (["config"], {"PRICES": '["v5e", 0.6]'}, ['PRICES entry 1 is "v5e", not a JSON object']),
    (["config"], {"XLA_CACHE_BUCKET": "gs://My Cache/xla"},
     ["XLA_CACHE_BUCKET=gs://My Cache/xla is not a Cloud Storage bucket name", "gs://"]),
]


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLACK_", "GCP_", "TPU_", "REDIS_", "PORT", "ADMINS", "ALERT_", "LOG_", "VLLM_",
                                 "XLA_", "GOOGLE_", "CLOUDSDK_", "NO_GCE"))}
    base["TPUBOT_ENV_FILE"] = os.devnull
    return subprocess.run([str(TPUBOT), *args], env={**base, **env}, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=90)


@pytest.mark.parametrize("args,env,fragments", CASES, ids=[f"{'-'.join(c[0])}-{'-'.join(c[1])}" for c in CASES])
def test_a_misconfiguration_is_one_line_naming_the_variable_and_the_fix(args, env, fragments, tmp_path):
    result = run(args, env, tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr + result.stdout
    ours = [line for line in result.stderr.splitlines() if line.startswith("tpubot: ")]
    assert len(ours) == 1, result.stderr
    for fragment in fragments:
        assert fragment in ours[0]
    if "cannot reach Redis" in ours[0]:
        # Nothing else either: the wait for Redis logged a JSON warning first (the worker two).
        assert result.stderr.strip().splitlines() == ours, result.stderr
    for secret in SLACK.values():
        assert secret not in result.stderr + result.stdout


def test_debug_shows_the_traceback(tmp_path):
    result = run(["--debug", "zones"], {"REDIS_URL": dead_redis()}, tmp_path)
    assert result.returncode == 1
    assert "ConnectionError" in result.stderr and "Traceback" in result.stderr


def test_a_missing_named_env_file_is_refused_but_an_existing_one_is_read(tmp_path):
    env_file = tmp_path / "ops.env"
    env_file.write_text("PORT=abc\n")
    result = run(["config"], {"TPUBOT_ENV_FILE": str(env_file)}, tmp_path)
    assert result.returncode == 2 and "PORT=abc is not a whole number" in result.stderr


@pytest.mark.parametrize("content, fragments", [
    (None, ["is a folder, not a file of settings", "/tpu.env"]),
    ("PORT=3001\n".encode("utf-16"), ["is UTF-16 text", "save it as UTF-8", "iconv"]),
])
def test_an_env_file_that_is_a_folder_or_not_utf8_is_one_line(tmp_path, content, fragments):
    target = tmp_path / "ops.env"
    if content is None:
        target.mkdir()
    else:
        target.write_bytes(content)
    result = run(["config"], {"TPUBOT_ENV_FILE": str(target)}, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    ours = [line for line in result.stderr.splitlines() if line.startswith("tpubot: ")]
    assert len(ours) == 1 and all(fragment in ours[0] for fragment in fragments), ours
    assert ours[0].startswith(f"tpubot: TPUBOT_ENV_FILE={target} ")


def test_an_env_file_saved_with_a_utf8_byte_order_mark_is_read(tmp_path):
    env_file = tmp_path / "ops.env"
    env_file.write_bytes(b"\xef\xbb\xbfPORT=3001\n")
    result = run(["config", "--json"], {"TPUBOT_ENV_FILE": str(env_file)}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"PORT"' in result.stdout and "3001" in result.stdout


def test_prices_missing_fields_is_one_line_naming_them(tmp_path):
    result = run(["config"], {"PRICES": '[{"generation": "v5e", "region": "us-west4"}]'}, tmp_path)
    assert result.returncode == 2
    ours = [line for line in result.stderr.splitlines() if line.startswith("tpubot: ")]
    assert len(ours) == 1, ours  # was "Field required" four times, naming no field
    assert "PRICES: an entry lacks accelerator, provisioning_model, usd_per_chip_hour, as_of, source" in ours[0]
    assert "has generation, which is not a field" in ours[0] and '"usd_per_chip_hour": 0.6' in ours[0]


def test_an_empty_env_file_variable_is_unset(tmp_path):
    (tmp_path / "tpu.env").write_text("PORT=3002\n")
    result = run(["config", "--json"], {"TPUBOT_ENV_FILE": ""}, tmp_path)
    assert result.returncode == 0, result.stderr  # not "`.` is a folder"
    assert '"value": 3002' in result.stdout
