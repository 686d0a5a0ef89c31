from datetime import timedelta

import os

import pytest
from pydantic import ValidationError

from bot.settings import Settings, describe_sources
from infra.deployment_mode import DeploymentMode


def load(tmp_path, monkeypatch, env_text="", **env):
    path = tmp_path / "tpu.env"
    path.write_text(env_text)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings.load(path)


def error_text(excinfo) -> str:
    return " ".join(e["msg"] for e in excinfo.value.errors())


def test_defaults_are_a_valid_v5e_flex_start_request(tmp_path, monkeypatch):
    s = load(tmp_path, monkeypatch)
    assert s.tpu_accelerator_type == "v5litepod-1"
    assert s.tpu_runtime_version == "v2-alpha-tpuv5-lite"
    assert s.tpu_machine_type == "ct5lp-hightpu-1t"
    assert s.max_run_duration == timedelta(hours=4)
    assert s.mode is DeploymentMode.SANDBOX  # no GCP_PROJECT


def test_environment_wins_over_tpu_env(tmp_path, monkeypatch):
    s = load(tmp_path, monkeypatch, "TPU_ZONE=europe-west4-a\nMAX_RUN_DURATION=2h\n", TPU_ZONE="us-west4-a")
    assert s.tpu_zone == "us-west4-a"
    assert s.max_run_duration == timedelta(hours=2)
    sources = {name: source for name, _, source in describe_sources(s, tmp_path / "tpu.env")}
    assert sources["TPU_ZONE"] == "environment"
    assert sources["MAX_RUN_DURATION"].endswith("tpu.env")
    assert sources["NETWORK"] == "default"


@pytest.mark.parametrize(
    "env, fragment",
    [
        ({"TPU_ACCELERATOR_TYPE": "v5e-1"}, "use TPU_ACCELERATOR_TYPE=v5litepod-1"),
        ({"TPU_RUNTIME_VERSION": "tpu-ubuntu2204-base"}, "use TPU_RUNTIME_VERSION=v2-alpha-tpuv5-lite"),
        ({"TPU_MACHINE_TYPE": "ct6e-standard-1t"}, "use TPU_MACHINE_TYPE=ct5lp-hightpu-1t"),
        ({"TENSOR_PARALLEL_SIZE": "4"}, "use TENSOR_PARALLEL_SIZE=1"),
        ({"MAX_RUN_DURATION": "8d"}, "7 days"),
        ({"VALID_UNTIL_DURATION": "0h"}, "VALID_UNTIL_DURATION must be at least 1s"),
        ({"MAX_RUN_DURATION": "9d"}, "MAX_RUN_DURATION=9d exceeds flex-start's limit of 7 days"),  # once "216h"
        ({"MAX_RUN_DURATION": "999999999999h"}, "far too long for a duration"),  # once an OverflowError
        ({"MAX_RUN_DURATION": "5m"}, "shorter than the shortest lease, MIN_RUN_DURATION=10m"),
        ({"MIN_RUN_DURATION": "0.5s"}, "MIN_RUN_DURATION must be at least 1s"),
        ({"MAX_RUN_DURATION": "forever"}, "write it like 4h"),
        ({"VLLM_IMAGE": "vllm/vllm-tpu:nightly"}, "is not pinned"),
        ({"VLLM_IMAGE": "vllm/vllm-tpu"}, "like VLLM_IMAGE=vllm/vllm-tpu:v0.32.0"),
        ({"VLLM_IMAGE": "vllm/vllm-tpu:v0.21.0"}, "Gemma 4 E2B has 20"),
        ({"VLLM_IMAGE": "localhost:5000/vllm-tpu:v0.22.1@sha256:" + "b" * 64}, "predates the rewrite in vLLM 0.24.0"),
        ({"VLLM_MAX_NUM_BATCHED_TOKENS": "279"}, "(one image, 280 tokens)"),
        # vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs at start (after the VM booted).
        ({"VLLM_MAX_NUM_SEQS": "8192"}, "VLLM_MAX_NUM_SEQS=8192 is more than VLLM_MAX_NUM_BATCHED_TOKENS=4096 (one "
                                        "step schedules at most one token per sequence), so vLLM would refuse to "
                                        "start; use VLLM_MAX_NUM_SEQS=32 or raise VLLM_MAX_NUM_BATCHED_TOKENS"),
        # tpu-inference 0.32.0 embeds images only: audio or video on a TPU is refused with the reason.
        ({"VLLM_LIMIT_MM_PER_PROMPT": '{"image":4,"audio":1}'},
         'allows audio, which vLLM on a TPU cannot embed: tpu-inference 0.32.0 skips Gemma 4\'s audio tower weights'),
        ({"VLLM_LIMIT_MM_PER_PROMPT": '{"image":4,"video":2}'},
         'allows video, which vLLM on a TPU cannot embed'),
        ({"TPU_SERVICE_ACCOUNT": "tpubot-node"}, "TPU_SERVICE_ACCOUNT=tpubot-node is not a service account's email; "
                                                 "write it like tpubot-node@my-project.iam.gserviceaccount.com"),
        ({"MODEL_BOOT_TIMEOUT": "20m"}, "MODEL_BOOT_TIMEOUT=20m is not longer than what the TPU VM may wait before it "
                                        "starts vLLM (43m"),
        ({"VLLM_GPU_MEMORY_UTILIZATION": "0.93"}, "use VLLM_GPU_MEMORY_UTILIZATION=0.92"),
        ({"VLLM_GPU_MEMORY_UTILIZATION": "1.5"}, "is not a fraction of the chip's memory"),
        ({"MODEL_SOURCE_RANGES": "203.0.113.7,office"}, "'office' is not an address range; write it like 203.0.113.7/32"),
        ({"ENDPOINT_ADDRESS": "private"}, "'external' or 'internal'"),
        ({"PORT": "0"}, "PORT=0 is not a TCP port"),
        ({"WORKER_METRICS_PORT": "70000"}, "WORKER_METRICS_PORT=70000 is not a TCP port"),
        ({"GEMMA_BASE_URL": "localhost:8000/v1"}, "GEMMA_BASE_URL=localhost:8000/v1 is not a http:// or https://"),
        ({"REDIS_URL": "tcp://user:hunter22@cache:6379"}, "REDIS_URL=tcp://user:***@cache:6379"),
        ({"WRITE_CHANNELS": "general"}, "'general' is not a Slack channel id (C…/G…/D…)"),
        ({"ADMIN_GROUPS": "U0ALICE"}, "'U0ALICE' is not a Slack group id (S…)"),
        ({"ALERT_LEAD_TIMES": "30m,soon"}, "'soon' is not a duration"),
        ({"LOG_FORMAT": "xml"}, "use json, text or auto"),
        ({"ALERT_ROUTES": "team=tpu"}, "ALERT_ROUTES: 'team=tpu' does not end in a channel id (C… or G…); write it like"),
        ({"ALERT_ROUTES": "team:C0TPU"}, "'team:C0TPU' is not label=value:CHANNEL or *:CHANNEL"),
        ({"ALERT_STORM_WINDOW": "0s"}, "ALERT_STORM_WINDOW must be longer than 0"),
    ],
)
def test_known_wrong_values_are_rejected_with_the_fix(tmp_path, monkeypatch, env, fragment):
    with pytest.raises(ValidationError) as excinfo:
        load(tmp_path, monkeypatch, **env)
    assert fragment in error_text(excinfo)


def test_secrets_are_masked_in_the_source_table(tmp_path, monkeypatch):
    s = load(tmp_path, monkeypatch, SLACK_BOT_TOKEN="xoxb-1234-secretsecret", SLACK_SIGNING_SECRET="shh-very-secret")
    shown = {name: value for name, value, _ in describe_sources(s, tmp_path / "tpu.env")}
    assert "secretsecret" not in shown["SLACK_BOT_TOKEN"]
    assert "very-secret" not in shown["SLACK_SIGNING_SECRET"]


def test_model_source_ranges_are_normalised_and_a_digest_pins_the_image(tmp_path, monkeypatch):
    settings = load(tmp_path, monkeypatch, MODEL_SOURCE_RANGES="203.0.113.7, 10.128.0.0/20",
                    VLLM_IMAGE="us-docker.pkg.dev/p/r/vllm-tpu@sha256:" + "a" * 64)
    assert settings.model_source_ranges == ["203.0.113.7/32", "10.128.0.0/20"]
    assert settings.vllm_image.endswith("a" * 64) and settings.endpoint_address == "external"


@pytest.mark.parametrize("image", [
    "vllm/vllm-tpu:v0.32.0",
    "us-west4-docker.pkg.dev/p/r/vllm-tpu:v0.32.0",
    "vllm/vllm-tpu:v0.32.0@sha256:" + "c" * 64,
    "vllm/vllm-tpu@sha256:" + "c" * 64,
    "localhost:5000/vllm-tpu:v0.33.0",
    "vllm/vllm-tpu:nightly-20261020-abc1234-def5678",  # a dated nightly is pinned; its version is unknown
])
def test_an_image_that_serves_e2b_is_taken_from_any_registry_by_tag_or_digest(tmp_path, monkeypatch, image):
    assert load(tmp_path, monkeypatch, VLLM_IMAGE=image).vllm_image == image


def test_the_pinned_defaults_serve_e2b_with_flags_that_start(tmp_path, monkeypatch):
    s = load(tmp_path, monkeypatch)
    assert s.vllm_image == "vllm/vllm-tpu:v0.32.0"
    assert s.model_revision == "3e22461f65e89153144f8adb70e3b8c2cc9845a7"
    assert s.vllm_gpu_memory_utilization is None and s.xla_cache_bucket == ""
    # Images only (audio and video said at 0), so the largest item is an image: a small batch budget starts.
    images = load(tmp_path, monkeypatch, VLLM_LIMIT_MM_PER_PROMPT='{"image":2}', VLLM_MAX_NUM_BATCHED_TOKENS="512")
    assert images.vllm_max_num_batched_tokens == 512
    assert images.vllm_limit_mm_per_prompt == '{"image":2,"audio":0,"video":0}'
    assert s.vllm_limit_mm_per_prompt == '{"image":4,"audio":0,"video":0}' and s.vllm_max_num_seqs == 32
    # The two zones Google documents flex-start v5e in come first; the node runs as the default account.
    assert s.tpu_zones[:2] == ["us-west4-a", "us-central1-a"] and s.tpu_service_account == ""
    custom = load(tmp_path, monkeypatch, TPU_SERVICE_ACCOUNT="serviceAccount:tpubot-node@p.iam.gserviceaccount.com")
    assert custom.tpu_service_account == "tpubot-node@p.iam.gserviceaccount.com"
    assert load(tmp_path, monkeypatch, VLLM_GPU_MEMORY_UTILIZATION="0.92").vllm_gpu_memory_utilization == 0.92
    # The allocation limit was measured on v5e; a v6e chip is not held to it.
    v6e = load(tmp_path, monkeypatch, TPU_ACCELERATOR_TYPE="v6e-1", TPU_RUNTIME_VERSION="v2-alpha-tpuv6e",
               TPU_MACHINE_TYPE="ct6e-standard-1t", VLLM_GPU_MEMORY_UTILIZATION="0.95")
    assert v6e.vllm_gpu_memory_utilization == 0.95
    assert load(tmp_path, monkeypatch, XLA_CACHE_BUCKET="gs://acme-vllm-cache/").xla_cache_bucket == "acme-vllm-cache"


def test_the_mcp_identity_may_stand_in_an_id_list(tmp_path, monkeypatch):
    s = load(tmp_path, monkeypatch, MCP_USER="mcp-local", ADMINS="mcp-local,U0ADMIN")
    assert s.admins == ["mcp-local", "U0ADMIN"]


def test_a_url_password_never_shows_in_the_error(tmp_path, monkeypatch):
    with pytest.raises(ValidationError) as excinfo:
        load(tmp_path, monkeypatch, REDIS_URL="tcp://user:hunter22@cache:6379")
    assert "hunter22" not in error_text(excinfo)


def test_an_env_file_named_but_missing_is_refused(tmp_path, monkeypatch):
    from bot.settings import SettingError

    monkeypatch.setenv("TPUBOT_ENV_FILE", str(tmp_path / "missing.env"))
    with pytest.raises(SettingError, match="TPUBOT_ENV_FILE=.*missing.env names no file"):
        Settings.load()


@pytest.mark.parametrize("written, shown", [("9d", "9d"), ("36h", "1d12h"), ("90m", "1h30m"), ("14400s", "4h")])
def test_a_duration_is_echoed_in_days_hours_and_minutes(tmp_path, monkeypatch, written, shown):
    s = load(tmp_path, monkeypatch, PREFLIGHT_TTL=written)
    assert {name: value for name, value, _ in describe_sources(s, tmp_path / "tpu.env")}["PREFLIGHT_TTL"] == shown


def test_config_shows_unset_one_way_and_its_json_keeps_the_types(tmp_path, monkeypatch):
    """Issue 44: unset showed as `(unset)`, blank, `None` or `{}`, and --json made every value a string."""
    import json

    from typer.testing import CliRunner

    from bot.cli import app

    for name in ("GCP_PROJECT", "TPU_LABELS", "VLLM_GPU_MEMORY_UTILIZATION", "BUDGET_CHANNEL_MONTHLY",
                 "MODEL_SOURCE_RANGES", "SLACK_BOT_TOKEN", "AGENT_STREAM", "PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)
    monkeypatch.setenv("AGENT_STREAM", "false")
    shown = {name: value for name, value, _ in describe_sources(Settings.load(), os.devnull)}
    for name in ("GCP_PROJECT", "TPU_LABELS", "VLLM_GPU_MEMORY_UTILIZATION", "BUDGET_CHANNEL_MONTHLY",
                 "MODEL_SOURCE_RANGES", "SLACK_BOT_TOKEN"):
        assert shown[name] == "(unset)", (name, shown[name])
    assert shown["AGENT_STREAM"] == "false" and "$0.60/chip-hour" in shown["PRICES"]
    result = CliRunner().invoke(app, ["config", "--json"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    values = {row["variable"]: row["value"] for row in json.loads(result.stdout)["settings"]}
    assert values["PORT"] == 3000 and values["AGENT_STREAM"] is False and values["AGENT_MAX_STEPS"] == 4
    assert values["GCP_PROJECT"] is None and values["VLLM_GPU_MEMORY_UTILIZATION"] is None
    assert values["TPU_ZONES"][0] == "us-west4-a" and values["ALERT_LEAD_TIMES"] == ["30m", "5m"]
    assert values["TPU_LABELS"] == {} and values["MAX_RUN_DURATION"] == "4h" and values["SLACK_BOT_TOKEN"] is None
    assert any(entry["usd_per_chip_hour"] == 0.6 for entry in values["PRICES"]["entries"])
