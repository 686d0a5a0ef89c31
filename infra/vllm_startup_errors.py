"""Known start-up errors of a TPU VM → why, and the fix: the one table the boot watcher reads.

A VM that cannot start vLLM says so through its guest attributes (infra/boot_phases.py): a step
before vLLM that gives up (a secret it may not read, an image pull Docker Hub refuses) publishes
phase `failed` and the line it gave up on; a vLLM container that keeps exiting publishes the last
error line of its log. The card should say what that line means and what to change, not just
repeat it; like SkyPilot's table of cloud errors, every known cause is one row here, and an
unknown line still reaches the card verbatim with the generic fix. Add a row when a new failure is
understood (reference/vllm-tpu.md holds the sources).

A row's reason and fix may name what its pattern captured (`{secret}`, `{account}`, `{image}`)
and where the lease is (`{project}`, `{zone}`, `{region}`, `{node}`): the fix for a refused secret
is the grant command for that secret and that account, ready to paste.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra.vllm_flags import DEFAULT_IMAGE

# What tpu-inference's JAX Gemma 4 model asserts before v0.22.1 (`assert num_kv_shared_layers == 0,
# "Expect no shared layers"`, tpu_inference/models/jax/gemma4.py), as the container log's last line.
SHARED_KV_ASSERTION = "AssertionError: Expect no shared layers"

LOGS_COMMAND = ("gcloud compute tpus tpu-vm ssh {node} --zone {zone} -- 'sudo docker logs --tail 100 tpubot-vllm'")
STARTUP_LOG_COMMAND = ("gcloud compute tpus tpu-vm ssh {node} --zone {zone} -- "
                       "'sudo journalctl -u google-startup-scripts'")
AGAIN = "then `/tpu down` and `/tpu up` again."
# The startup script's lines for a secret (infra/templates/startup-script.sh, fetch_secret).
_SECRET = r"reading secret projects/[^/ ]+/secrets/(?P<secret>[^/ ]+)/versions/\S+ as (?P<account>\S+): "
_GRANT = ("`gcloud secrets add-iam-policy-binding {secret} --project {project} --member serviceAccount:{account} "
          "--role roles/secretmanager.secretAccessor`")


@dataclass(frozen=True)
class StartupError:
    name: str
    pattern: re.Pattern[str]
    reason: str
    fix: str
    before_vllm: bool = False  # a step before vLLM (the VM gave up: phase `failed`), not a vLLM crash


KNOWN_STARTUP_ERRORS: tuple[StartupError, ...] = (
    # --- before vLLM: the VM gave up (phase `failed`) --------------------------------------
    StartupError(
        "key-secret-denied", re.compile(_SECRET.replace("(?P<secret>[^/ ]+)", r"(?P<secret>tpubot-model-key-[^/ ]+)")
                                        + r"HTTP 403"),
        "the TPU VM's service account {account} may not read this lease's API-key secret {secret} (HTTP 403), so "
        "vLLM could not be given its key",
        f"grant it: {_GRANT}, {AGAIN} tpubot grants this itself on every key it creates: check that "
        "TPU_SERVICE_ACCOUNT (if set) names the account the TPU VMs run as, and that the bot holds "
        "roles/secretmanager.admin.", before_vllm=True),
    StartupError(
        "secret-denied", re.compile(_SECRET + r"HTTP 403"),
        "the TPU VM's service account {account} may not read the secret {secret} (HTTP 403)",
        f"grant it: {_GRANT}, {AGAIN}", before_vllm=True),
    StartupError(
        "key-secret-missing", re.compile(_SECRET.replace("(?P<secret>[^/ ]+)", r"(?P<secret>tpubot-model-key-[^/ ]+)")
                                         + r"HTTP 404"),
        "this lease's API-key secret {secret} is gone (HTTP 404)",
        f"{AGAIN[0].upper()}{AGAIN[1:]} (a new lease makes a new key)", before_vllm=True),
    StartupError(
        "secret-missing", re.compile(_SECRET + r"HTTP 404"),
        "the secret {secret} does not exist in {project}, or has no version (HTTP 404)",
        "create it with a Hugging Face token whose account accepted the Gemma license: `printf %s \"$HF_TOKEN\" | "
        "gcloud secrets create {secret} --data-file=- --project {project}` (or set HF_TOKEN_SECRET to the secret "
        f"that holds it), {AGAIN}", before_vllm=True),
    StartupError(
        "secret-unreachable", re.compile(_SECRET + r"no answer"),
        "the TPU VM could not reach Secret Manager (no answer)",
        "a node without an external IP (ENDPOINT_ADDRESS=internal) reaches Google's APIs only with Private Google "
        "Access on its subnetwork: `gcloud compute networks subnets update SUBNET --region {region} "
        f"--enable-private-ip-google-access` (run `tpubot doctor`), {AGAIN}", before_vllm=True),
    StartupError(
        "docker-hub-rate-limit", re.compile(r"docker pull (?P<image>\S+): .*toomanyrequests", re.IGNORECASE),
        "Docker Hub refused the image pull: its limit of anonymous pulls per address was reached (every node behind "
        "one Cloud NAT shares the address), and the VM's retries did not outlast it",
        "mirror the image into Artifact Registry in the TPU's region and point VLLM_IMAGE at the mirror: "
        "`gcloud artifacts repositories create vllm --repository-format=docker --location={region} --project "
        "{project}`, then on a machine with Docker: `docker pull {image} && docker tag {image} "
        "{region}-docker.pkg.dev/{project}/vllm/{image_name} && docker push "
        "{region}-docker.pkg.dev/{project}/vllm/{image_name}`, set VLLM_IMAGE={region}-docker.pkg.dev/{project}/vllm/"
        f"{{image_name}} and grant the TPU VM's account roles/artifactregistry.reader on the repository; {AGAIN}",
        before_vllm=True),
    StartupError(
        "image-missing", re.compile(r"docker pull (?P<image>\S+): .*manifest unknown", re.IGNORECASE),
        "the registry has no image {image} (manifest unknown)",
        f"set VLLM_IMAGE to a tag or digest that exists (the tested one: VLLM_IMAGE={DEFAULT_IMAGE}), {AGAIN}",
        before_vllm=True),
    StartupError(
        "image-denied", re.compile(r"docker pull (?P<image>\S+): .*(unauthorized|denied)", re.IGNORECASE),
        "the registry refused the image {image} to the TPU VM",
        "grant the TPU VM's service account roles/artifactregistry.reader on the repository that holds VLLM_IMAGE "
        f"(or make the image public), {AGAIN}", before_vllm=True),
    StartupError(
        "disk-full", re.compile(r"no space left on device", re.IGNORECASE),
        "the TPU VM's disk filled up while Docker unpacked the image (the vLLM TPU image is 19.5–25.9 GB unpacked)",
        f"read what else is on the disk (`{STARTUP_LOG_COMMAND}`); a new VM starts empty: {AGAIN}", before_vllm=True),
    # --- vLLM itself: the container keeps exiting -------------------------------------------
    StartupError(
        "shared-kv-layers", re.compile(r"Expect no shared layers|num_kv_shared_layers", re.IGNORECASE),
        "this image's TPU backend cannot load a model with shared-KV layers (Gemma 4 E2B has 20)",
        f"set VLLM_IMAGE={DEFAULT_IMAGE} (a vLLM TPU image that serves Gemma 4 E2B), {AGAIN}"),
    StartupError(
        "gated-model", re.compile(r"GatedRepoError|Access to model .* is restricted|401 Client Error.*huggingface",
                                  re.IGNORECASE),
        "Hugging Face refused the weights to the VM's token",
        "accept the Gemma license on huggingface.co for the account whose token is in HF_TOKEN_SECRET, then "
        "`/tpu down` and `/tpu up` again."),
    StartupError(
        "out-of-memory", re.compile(r"RESOURCE_EXHAUSTED|out of memory|Insufficient memory", re.IGNORECASE),
        "the model and its KV cache do not fit in the TPU's memory with these flags",
        "lower VLLM_MAX_MODEL_LEN or VLLM_MAX_NUM_SEQS (or --gpu-memory-utilization), then `/tpu down` and `/tpu up` "
        "again."),
    StartupError(
        "unknown-flag", re.compile(r"unrecognized arguments|error: argument|invalid (tool call|reasoning) parser",
                                   re.IGNORECASE),
        "this image's vLLM does not accept a flag the startup script passes",
        f"use the image the bot's flags are made for (VLLM_IMAGE={DEFAULT_IMAGE}), or check "
        "`tpubot render-startup-script`."),
)


def classify_startup_error(line: str) -> StartupError | None:
    """The known cause of a start-up error line, or None."""
    return next((known for known in KNOWN_STARTUP_ERRORS if known.pattern.search(line or "")), None)


def _filled(text: str, line: str, known: StartupError, **where: str) -> str:
    match = known.pattern.search(line)
    found = {k: v for k, v in (match.groupdict() if match else {}).items() if v is not None}
    image = found.get("image", "")
    names = {**where, "region": where.get("zone", "").rsplit("-", 1)[0], **found,
             "image_name": image.rsplit("/", 1)[-1].split("@")[0] if image else ""}
    return text.format_map(_Keep(names))


class _Keep(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def crash_loop_explanation(line: str, restarts: int, *, node: str, zone: str) -> tuple[str, str]:
    """(reason, fix) for a lease whose vLLM container crashed `restarts` times at start-up."""
    said = f" Its last error: `{line}`." if line else ""
    known = classify_startup_error(line)
    if known is not None:
        reason = _filled(known.reason, line, known, node=node, zone=zone)
        return f"vLLM crashed {restarts} times at start-up: {reason}.{said}", _filled(known.fix, line, known, node=node,
                                                                                       zone=zone)
    return (f"vLLM crashed {restarts} times at start-up.{said}",
            f"read the container's log (`{LOGS_COMMAND.format(node=node, zone=zone)}`), fix the cause, then "
            "`/tpu down` and `/tpu up` again.")


def failed_boot_explanation(line: str, *, project: str, node: str, zone: str) -> tuple[str, str]:
    """(reason, fix) for a VM that gave up before vLLM started (phase `failed`, its last-error line)."""
    said = f" The VM said: `{line}`." if line else ""
    known = classify_startup_error(line)
    if known is not None:
        where = {"project": project, "node": node, "zone": zone}
        return (f"The TPU VM gave up before vLLM started: {_filled(known.reason, line, known, **where)}.{said}",
                _filled(known.fix, line, known, **where))
    return (f"The TPU VM gave up before vLLM started.{said}",
            f"read the startup script's log (`{STARTUP_LOG_COMMAND.format(node=node, zone=zone)}`), fix the cause, "
            "then `/tpu down` and `/tpu up` again.")
