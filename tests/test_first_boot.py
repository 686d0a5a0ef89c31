"""A first boot that cannot hang (issue 40), in-process (tests/in_process_bot.py): signed `/tpu up`
into the bolt app, the worker, the sandbox TPU VM running the real startup script against its
metadata server, the project's APIs (with IAM) and the Docker stand-in; the card read from the
Slack stand-in.

Time on the sandbox VM runs 60/SANDBOX_TIME_SCALE times wall time (infra/sandbox/tpu_vm.py):
"sandbox minutes" below are the VM's, which its `slept` adds up.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from handlers import cards
from infra.sandbox.iam import default_compute_account
from infra.sandbox.world import SandboxWorld

CHANNEL = "C0FIRST"
NODE = default_compute_account(123456789012)
ROOT = Path(__file__).resolve().parents[1]



def until(bot, predicate, **kwargs):
    """bot.until with this file's 90 s: a first boot runs the real startup script on a sandbox VM."""
    return bot.until(predicate, **{"timeout": 90.0, **kwargs})


def card_bodies(bot) -> list[dict]:
    return [c.body for c in bot.slack.calls if c.method in ("chat.postMessage", "chat.update")]


def first_card(bot, word: str) -> dict | None:
    return next((b for b in card_bodies(bot) if word in b["text"]), None)


def the_vm(bot):
    qr = until(bot, lambda: bot.tpu_sandbox.queued_resources() and bot.tpu_sandbox.queued_resources()[0])
    return until(bot, lambda: bot.node_models.vm(qr["zone"], qr["node_id"]), what="the node's VM"), qr


def test_up_on_defaults_runs_the_real_startup_script_and_its_guest_attributes_drive_the_card_to_ready(make_bot):
    from bot.wiring import startup_script_from
    from infra.state.leases import Lease, LeaseState

    bot = make_bot(poll_interval="0.2s")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    vm, qr = the_vm(bot)
    ready = until(bot, lambda: first_card(bot, "READY"))
    # The VM ran the bytes the create sent — what the worker renders for this lease — under bash.
    sent = bot.tpu_sandbox.node_metadata(qr["zone"], qr["node_id"])["startup-script"]
    lease = Lease(lease_id=qr["labels"]["tpubot-lease"], team="T", channel=CHANNEL, holder="UALICE", zone=qr["zone"],
                  qr_id=qr["qr_id"], node_id=qr["node_id"], state=LeaseState.ACTIVE)
    assert vm.script == sent == startup_script_from(bot.settings)(lease)
    assert (vm.root / "startup-script").read_text() == sent
    # Every phase the card showed before READY is one the script wrote to its metadata server.
    written = [value for name, value in vm.metadata.writes if name == "tpubot/phase"]
    assert written[:3] == ["reading-secrets", "pulling-image", "loading-weights"] and "serving" in written
    bodies = card_bodies(bot)
    shown = {phase for phase, name in cards.BOOT_PHASE_NAMES.items()
             if any(f"*Boot phase*\\n{name} for " in str(b["blocks"]) for b in bodies[: bodies.index(ready)])}
    assert shown and shown <= set(written), (shown, written)
    # Both secrets were read by the VM's own account; the key reached vLLM only through its environment.
    reads = {caller for method, path, caller in bot.cloud.project_api.requests if path.endswith(":access")
             and caller == NODE}
    assert reads == {NODE}
    assert vm.docker.containers["tpubot-vllm"].env["VLLM_API_KEY"] == vm.docker.emulators()[0].api_key
    assert "vllm-0.32.0-sandbox" in str(ready["blocks"]) and "`vllm/vllm-tpu:v0.32.0`" in str(ready["blocks"])
    # Every call the VM and the bot made (secrets, their IAM policy, the project) passed Google's own schemas.
    api = bot.cloud.project_api
    assert api.rejected == [] and api.response_problems == []
    assert {"secretmanager.projects.secrets.setIamPolicy",
            "secretmanager.projects.secrets.versions.access"} <= set(api.apis["secretmanager"].checked)
    assert "cloudresourcemanager.projects.get" in api.apis["resourcemanager"].checked
    slack.close()


def test_a_key_secret_the_nodes_account_may_not_read_fails_after_seven_sandbox_minutes_with_the_grant(make_bot):
    bot = make_bot(poll_interval="0.2s")  # MODEL_BOOT_TIMEOUT stays 60 minutes
    iam = bot.cloud.project_api.iam
    # An IAM deny policy on the keys for the VM's account: whatever the bot grants, the VM cannot read them.
    iam.deny(f"serviceAccount:{NODE}", "secretmanager.versions.access", "projects/tpubot-sandbox/secrets/tpubot-model-key-")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    vm, qr = the_vm(bot)
    active = until(bot, lambda: first_card(bot, "ACTIVE"))
    started = time.monotonic()
    failed = until(bot, lambda: first_card(bot, "FAILED"))
    took = time.monotonic() - started
    lease_id = qr["labels"]["tpubot-lease"]
    blocks = str(failed["blocks"])
    assert f"may not read this lease's API-key secret tpubot-model-key-{lease_id} (HTTP 403)" in blocks, blocks
    assert (f"gcloud secrets add-iam-policy-binding tpubot-model-key-{lease_id} --project tpubot-sandbox "
            f"--member serviceAccount:{NODE} --role roles/secretmanager.secretAccessor") in blocks
    assert cards.BOOT_PHASE_NAMES["failed"] in blocks
    # The bot had granted it (the deny policy is what refused): the grant is on the key's own policy.
    policy = iam.policy(f"projects/tpubot-sandbox/secrets/tpubot-model-key-{lease_id}")
    assert f"serviceAccount:{NODE}" in policy.bindings["roles/secretmanager.secretAccessor"]
    # Seven sandbox minutes of waiting, not less: the bot grants the key moments before the VM exists, and
    # an IAM grant can take about 7 minutes to reach Secret Manager, so a shorter wait would fail leases
    # whose grant was merely late. Not much more either, and the wall clock agrees.
    assert 7 * 60 <= vm.slept <= 8 * 60
    assert took * vm.speed <= 8 * 60 + 60 * 30, (took, vm.speed)  # + the bot's polls on a loaded machine
    assert active is not None and not any("READY" in b["text"] for b in card_bodies(bot))
    slack.close()


def test_a_docker_hub_rate_limit_fails_with_the_mirror_fix_after_bounded_retries(make_bot):
    bot = make_bot(poll_interval="0.2s", sandbox_time_scale="0.05")  # 900 VM seconds of backoff in 0.75 s
    bot.cloud.registry.pulls_left = 0  # another node behind the same NAT address used them all
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    vm, _ = the_vm(bot)
    failed = until(bot, lambda: first_card(bot, "FAILED"))
    blocks = str(failed["blocks"])
    assert "Docker Hub refused the image pull" in blocks and "toomanyrequests" in blocks
    assert "gcloud artifacts repositories create vllm --repository-format=docker --location=us-west4" in blocks
    assert "VLLM_IMAGE=us-west4-docker.pkg.dev/tpubot-sandbox/vllm/vllm-tpu:v0.32.0" in blocks
    # Five tries, backing off 60, 120, 240 and 480 VM seconds (minutes, then it gives up), each said on the card.
    assert [status for _, _, status in bot.cloud.registry.pulls] == [429] * 5
    assert vm.slept == 60 + 120 + 240 + 480
    retries = [v for name, v in vm.metadata.writes if name == "tpubot/last-error" and "(try " in v]
    assert len(retries) == 4 and retries[-1].endswith("(try 4 of 5; again in 480s)")
    assert any("*Retrying*" in str(b["blocks"]) and "toomanyrequests" in str(b["blocks"]) for b in card_bodies(bot))
    slack.close()


def test_a_vm_that_publishes_nothing_is_named_on_the_card_and_the_boot_goes_on(make_bot):

    world = SandboxWorld(guest_attributes_disabled=True)  # the org policy compute.disableGuestAttributesAccess
    bot = make_bot(world=world, poll_interval="0.2s", sandbox_time_scale="3", model_boot_silence="1s")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    silent = until(bot, lambda: next((b for b in card_bodies(bot)
                                      if "has published no boot phase" in str(b["blocks"])), None))
    assert "constraints/compute.disableGuestAttributesAccess" in str(silent["blocks"])
    ready = until(bot, lambda: first_card(bot, "READY"))  # vLLM came up all the same
    assert "*Boot phase*" not in str(ready["blocks"])
    slack.close()


def _readme_block(after: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(after, 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def _run_readme_block(api, tmp_path: Path, after: str, **extra_env: str) -> subprocess.CompletedProcess:
    """The README's first bash block after `after`, under `bash -euo pipefail` as pasted, with PROJECT set and a
    gcloud that calls the sandbox's APIs as the project's owner."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'gcloud_stand_in.py'} \"$@\"\n")
    gcloud.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PROJECT": "tpubot-sandbox",
           "CLOUDSDK_AUTH_ACCESS_TOKEN": api.iam.mint(OPERATOR),
           **{f"CLOUDSDK_API_ENDPOINT_OVERRIDES_{name}": api.base_url
              for name in ("SECRETMANAGER", "CLOUDRESOURCEMANAGER", "STORAGE", "IAM")}, **extra_env}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", _readme_block(after)], env=env, capture_output=True,
                          text=True, timeout=60)


OPERATOR = "user:operator@example.com"  # the project's owner, who pastes the README's commands


def test_the_readmes_commands_word_for_word_give_a_node_that_reads_both_secrets(make_bot, tmp_path):
    """A project where the TPU VM's account has nothing: the README's block for it is run as pasted
    (PROJECT set, as it says), by a gcloud that calls the sandbox's APIs as the project's owner."""

    world = SandboxWorld(secrets={}, iam_grants=(("project", "roles/owner", OPERATOR),))
    bot = make_bot(world=world, poll_interval="0.2s")
    api = bot.cloud.project_api
    hf_token = "hf_" + "r3adm3" * 6
    block = _readme_block("**The TPU VM's service account.**")
    assert "PROJECT_NUMBER" not in block and "gcloud secrets create hf-token" in block
    ran = _run_readme_block(api, tmp_path, "**The TPU VM's service account.**", HF_TOKEN=hf_token)
    assert ran.returncode == 0, ran.stderr
    assert api.secrets["hf-token"] == hf_token
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    ready = until(bot, lambda: first_card(bot, "READY") or first_card(bot, "FAILED"))
    assert "READY" in ready["text"], str(ready["blocks"])
    reads = [(path, caller) for method, path, caller in api.requests if path.endswith(":access") and caller == NODE]
    assert {re.sub(r"tpubot-model-key-\w+", "KEY", path) for path, _ in reads} == {
        "/v1/projects/tpubot-sandbox/secrets/hf-token/versions/latest:access",
        "/v1/projects/tpubot-sandbox/secrets/KEY/versions/latest:access"}
    assert "roles/logging.logWriter" in api.iam.policy("projects/tpubot-sandbox").roles_of({f"serviceAccount:{NODE}"})
    slack.close()


DEDICATED = "tpubot-node@tpubot-sandbox.iam.gserviceaccount.com"  # what the README's dedicated block creates


def test_the_readmes_dedicated_account_block_word_for_word_gives_a_node_that_runs_as_it_and_reads_both_secrets(
        make_bot, tmp_path):
    """The "A dedicated account instead" block, as pasted (PROJECT and BOT_SA set, the HF token created as the
    README says before it), in a project where nothing is granted to anyone but its owner and the bot; then
    `/tpu up` with the TPU_SERVICE_ACCOUNT line it printed."""

    world = SandboxWorld(iam_grants=(("project", "roles/owner", OPERATOR),))  # hf-token exists, readable by none
    bot = make_bot(world=world, poll_interval="0.2s", tpu_service_account=DEDICATED)
    api = bot.cloud.project_api
    assert not api.iam.account_exists(DEDICATED)
    after = "A dedicated account instead"
    assert "BOT_ACCOUNT_EMAIL" not in _readme_block(after)
    ran = _run_readme_block(api, tmp_path, after, BOT_SA=api.iam.bot_account)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1] == f"TPU_SERVICE_ACCOUNT={DEDICATED}"  # the line to set
    assert api.iam.account_exists(DEDICATED)
    assert api.iam.policy(api.iam.account_resource(DEDICATED)).bindings == {
        "roles/iam.serviceAccountUser": {f"serviceAccount:{api.iam.bot_account}"}}
    # Pasted twice, the create is refused as gcloud reports Google's 409, and nothing else runs.
    again = _run_readme_block(api, tmp_path, after, BOT_SA=api.iam.bot_account)
    assert again.returncode == 1 and again.stderr.strip() == (
        "ERROR: (gcloud.iam.service-accounts.create) Resource in projects [tpubot-sandbox] is the subject of a "
        "conflict: Service account tpubot-node already exists within project projects/tpubot-sandbox.")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    vm, qr = the_vm(bot)
    ready = until(bot, lambda: first_card(bot, "READY") or first_card(bot, "FAILED"))
    assert "READY" in ready["text"], str(ready["blocks"])
    assert qr["request"]["tpu"]["nodeSpec"][0]["node"]["serviceAccount"]["email"] == DEDICATED
    assert vm.metadata.identity.service_account == DEDICATED
    reads = {re.sub(r"tpubot-model-key-\w+", "KEY", path) for _, path, caller in api.requests
             if path.endswith(":access") and caller == DEDICATED}
    assert reads == {"/v1/projects/tpubot-sandbox/secrets/hf-token/versions/latest:access",
                     "/v1/projects/tpubot-sandbox/secrets/KEY/versions/latest:access"}
    assert not [caller for _, path, caller in api.requests if path.endswith(":access") and caller == NODE]
    assert "roles/logging.logWriter" in api.iam.policy("projects/tpubot-sandbox").roles_of(
        {f"serviceAccount:{DEDICATED}"})
    assert api.rejected == [] and api.response_problems == []
    slack.close()


def test_a_bot_that_may_not_act_as_the_configured_account_fails_the_lease_before_any_tpu_with_the_grant(
        make_bot):
    """The dedicated block without its last grant: Google refuses to create a TPU that runs as an account its
    creator may not act as; the card names the grant the README's block makes."""

    node = f"serviceAccount:{DEDICATED}"
    world = SandboxWorld(iam_grants=(("secret:hf-token", "roles/secretmanager.secretAccessor", node),
                                     ("project", "roles/logging.logWriter", node)))
    bot = make_bot(world=world, poll_interval="0.2s", tpu_service_account=DEDICATED)
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    failed = until(bot, lambda: first_card(bot, "FAILED"))
    blocks = " ".join(block["text"]["text"] for block in failed["blocks"] if isinstance(block.get("text"), dict))
    assert f"Permission 'iam.serviceaccounts.actAs' denied on service account {DEDICATED}" in blocks, blocks
    assert (f"gcloud iam service-accounts add-iam-policy-binding {DEDICATED} --project tpubot-sandbox "
            "--member serviceAccount:$BOT_SA --role roles/iam.serviceAccountUser") in blocks
    assert "TPU_SERVICE_ACCOUNT" in blocks
    # One refused create, not a zone search: the refusal would follow the request to every zone.
    assert [attempt.outcome for attempt in bot.tpu_sandbox.create_attempts] == ["permission_denied"]
    assert bot.tpu_sandbox.queued_resources() == []
    slack.close()


def test_every_pre_vllm_failure_the_table_knows_is_in_the_readme():
    from infra.vllm_startup_errors import KNOWN_STARTUP_ERRORS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("**When the VM cannot start vLLM**", 1)[1].split("\n\n", 2)[1]
    listed = re.findall(r"^\| `([a-z-]+)` \|", table, re.MULTILINE)
    assert listed == [known.name for known in KNOWN_STARTUP_ERRORS if known.before_vllm]


def test_a_configured_service_account_is_sent_with_the_create_and_the_vm_runs_as_it(make_bot):

    custom = "tpubot-node@tpubot-sandbox.iam.gserviceaccount.com"
    world = SandboxWorld(iam_grants=(("secret:hf-token", "roles/secretmanager.secretAccessor", f"serviceAccount:{custom}"),
                                     ("project", "roles/logging.logWriter", f"serviceAccount:{custom}"),
                                     (f"serviceAccount:{custom}", "roles/iam.serviceAccountUser",
                                      "serviceAccount:tpubot@tpubot-sandbox.iam.gserviceaccount.com")))
    bot = make_bot(world=world, poll_interval="0.2s", tpu_service_account=custom)
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    vm, qr = the_vm(bot)
    assert qr["request"]["tpu"]["nodeSpec"][0]["node"]["serviceAccount"] == {
        "email": custom, "scope": ["https://www.googleapis.com/auth/cloud-platform"]}
    ready = until(bot, lambda: first_card(bot, "READY") or first_card(bot, "FAILED"))
    assert "READY" in ready["text"], str(ready["blocks"])
    assert vm.metadata.identity.service_account == custom
    # The bot let the configured account (not the default one) read this lease's key.
    lease_id = qr["labels"]["tpubot-lease"]
    policy = bot.cloud.project_api.iam.policy(f"projects/tpubot-sandbox/secrets/tpubot-model-key-{lease_id}")
    assert policy.bindings["roles/secretmanager.secretAccessor"] == {f"serviceAccount:{custom}"}
    assert {caller for _, path, caller in bot.cloud.project_api.requests if path.endswith(":access")
            and caller != "tpubot@tpubot-sandbox.iam.gserviceaccount.com"} == {custom}
    slack.close()


def test_a_bot_that_may_not_grant_the_vm_its_key_fails_the_lease_before_any_tpu_with_the_role(make_bot):

    world = SandboxWorld(denied=("secretmanager.secrets.setIamPolicy",))  # a narrowed custom role for the bot
    bot = make_bot(world=world, poll_interval="0.2s")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    failed = until(bot, lambda: first_card(bot, "FAILED"))
    blocks = str(failed["blocks"])
    assert f"Secret Manager refused to let the TPU VM's account (serviceAccount:{NODE}) read the model's API key" \
        in blocks
    assert "roles/secretmanager.admin" in blocks
    assert bot.tpu_sandbox.create_attempts == []  # no TPU whose VM could not have started
    slack.close()


def test_a_retried_key_creation_restores_the_vms_grant_on_the_existing_secret():
    import asyncio

    from infra.deployment_mode import DeploymentMode
    from infra.model_keys import ModelKeys
    from infra.node_account import NodeAccount
    from infra.sandbox.world import CloudSandbox

    with CloudSandbox(SandboxWorld()) as cloud:
        api = cloud.project_api
        creds = DeploymentMode.SANDBOX.credentials()

        def keys() -> ModelKeys:  # one per worker process
            return ModelKeys("tpubot-sandbox", credentials=creds, api_endpoint=api.base_url,
                             reader=NodeAccount("tpubot-sandbox", credentials=creds,
                                                resourcemanager_endpoint=api.base_url,
                                                secretmanager_endpoint=api.base_url))

        asyncio.run(keys().create("l1"))
        key = api.secrets["tpubot-model-key-l1"]
        api.iam.forget("projects/tpubot-sandbox/secrets/tpubot-model-key-l1")  # the grant was lost in between
        asyncio.run(keys().create("l1"))  # the retried job: the secret exists (409), read back, grant restored
        assert api.secrets["tpubot-model-key-l1"] == key  # the key the VM may already have read is kept
        policy = api.iam.policy("projects/tpubot-sandbox/secrets/tpubot-model-key-l1")
        assert policy.bindings == {"roles/secretmanager.secretAccessor": {f"serviceAccount:{NODE}"}}
        assert "secretmanager.projects.secrets.getIamPolicy" in api.apis["secretmanager"].checked
        assert api.rejected == [] and api.response_problems == []


def _sandbox_keys(api, **reader):
    from infra.deployment_mode import DeploymentMode
    from infra.model_keys import ModelKeys
    from infra.node_account import NodeAccount

    creds = DeploymentMode.SANDBOX.credentials()
    return ModelKeys("tpubot-sandbox", credentials=creds, api_endpoint=api.base_url,
                     reader=NodeAccount("tpubot-sandbox", credentials=creds, resourcemanager_endpoint=api.base_url,
                                        secretmanager_endpoint=api.base_url, **reader))


def test_a_grant_that_loses_a_race_for_the_keys_policy_is_redone_from_a_fresh_read_keeping_the_other_writers():
    import asyncio

    from infra.sandbox.world import CloudSandbox

    secret = "projects/tpubot-sandbox/secrets/tpubot-model-key-l1"
    with CloudSandbox(SandboxWorld()) as cloud:
        api = cloud.project_api
        asyncio.run(_sandbox_keys(api).create("l1"))
        api.iam.forget(secret)  # the grant was lost: the retried job reads, adds, writes back with the etag
        api.iam.contend(secret, times=2)  # and twice someone else writes the policy in between
        asyncio.run(_sandbox_keys(api).create("l1"))
        policy = api.iam.policy(secret)
        assert policy.bindings["roles/secretmanager.secretAccessor"] == {
            f"serviceAccount:{NODE}", "user:admin-1@example.com", "user:admin-2@example.com"}  # no write lost
        sets = [path for method, path, _ in api.requests if path.endswith("tpubot-model-key-l1:setIamPolicy")]
        assert len(sets) == 1 + 3  # the first create's; then two refused (409) and the third kept
        assert api.rejected == [] and api.response_problems == []


def test_a_keys_policy_that_changes_under_every_write_fails_with_what_to_stop():
    import asyncio

    import pytest
    from infra.model_keys import SET_POLICY_TRIES, ModelKeyError
    from infra.sandbox.world import CloudSandbox

    secret = "projects/tpubot-sandbox/secrets/tpubot-model-key-l1"
    with CloudSandbox(SandboxWorld()) as cloud:
        api = cloud.project_api
        asyncio.run(_sandbox_keys(api).create("l1"))
        api.iam.forget(secret)
        api.iam.contend(secret, times=100)
        with pytest.raises(ModelKeyError) as raised:
            asyncio.run(_sandbox_keys(api).create("l1"))
        assert raised.value.message.startswith(
            f"Secret Manager kept refusing the TPU VM's grant on the model's API key: its policy changed under each "
            f"of {SET_POLICY_TRIES} read-modify-writes (")
        assert "There were concurrent policy changes" in raised.value.message
        assert "something else keeps rewriting the IAM policy of tpubot-model-key-* secrets" in raised.value.fix


def test_a_tpu_service_account_that_does_not_exist_fails_the_lease_before_any_tpu_naming_it(make_bot):

    missing = "tpubot-nodee@tpubot-sandbox.iam.gserviceaccount.com"  # a typo of the README's account
    bot = make_bot(world=SandboxWorld(), poll_interval="0.2s", tpu_service_account=missing)
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    failed = until(bot, lambda: first_card(bot, "FAILED"))
    blocks = str(failed["blocks"])
    assert f"Service account {missing} does not exist." in blocks, blocks
    assert f"TPU_SERVICE_ACCOUNT={missing} must name an existing service account" in blocks
    assert "Secret Manager API is enabled" not in blocks  # not the generic fix of a failed call
    assert bot.tpu_sandbox.create_attempts == []
    slack.close()


def test_the_default_account_missing_names_the_compute_engine_api():
    import asyncio

    import pytest
    from infra.model_keys import ModelKeyError
    from infra.sandbox.world import CloudSandbox

    with CloudSandbox(SandboxWorld()) as cloud:
        api = cloud.project_api
        api.iam.delete_account(NODE)  # a project whose Compute Engine API was never enabled has no such account
        with pytest.raises(ModelKeyError) as raised:
            asyncio.run(_sandbox_keys(api).create("l2"))
        assert f"Service account {NODE} does not exist." in raised.value.message
        assert "gcloud services enable compute.googleapis.com --project tpubot-sandbox" in raised.value.fix


def test_a_bot_with_the_readmes_custom_role_instead_of_secretmanager_admin_brings_a_lease_to_ready(make_bot):
    """The README's narrower alternative is enough: create, grant, read back, list and delete each key."""
    from infra.model_keys import BOT_SECRET_PERMISSIONS
    from infra.sandbox.iam import BOT_ROLES

    role = "projects/tpubot-sandbox/roles/tpubotKeys"
    world = SandboxWorld(bot_roles=tuple(r for r in BOT_ROLES if r != "roles/secretmanager.admin") + (role,),
                         custom_roles={role: BOT_SECRET_PERMISSIONS})
    bot = make_bot(world=world, poll_interval="0.2s")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    ready = until(bot, lambda: first_card(bot, "READY") or first_card(bot, "FAILED"))
    assert "READY" in ready["text"], str(ready["blocks"])
    api = bot.cloud.project_api
    lease_id = bot.tpu_sandbox.queued_resources()[0]["labels"]["tpubot-lease"]
    assert f"tpubot-model-key-{lease_id}" in api.secrets
    slack.slash("down", user="UALICE", channel=CHANNEL)
    slack.click(action_id=cards.TEARDOWN_CONFIRM_ACTION, value=lease_id, user="UALICE", channel=CHANNEL,
                label="Tear down")
    until(bot, lambda: first_card(bot, "released"))
    until(bot, lambda: f"tpubot-model-key-{lease_id}" not in api.secrets, what="the key's secret deleted")
    slack.close()
