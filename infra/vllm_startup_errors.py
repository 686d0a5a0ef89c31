"""Known vLLM start-up errors → why, and the fix: the one table the boot watcher reads.

A VM whose vLLM container keeps exiting publishes the last error line of its log (guest attribute
`last-error`, infra/boot_phases.py). The card should say what that line means and what to change,
not just repeat it; like SkyPilot's table of cloud errors, every known cause is one row here, and
an unknown line still reaches the card verbatim with the generic fix. Add a row when a new crash is
understood (reference/vllm-tpu.md holds the sources).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra.vllm_flags import DEFAULT_IMAGE

# What tpu-inference's JAX Gemma 4 model asserts before v0.22.1 (`assert num_kv_shared_layers == 0,
# "Expect no shared layers"`, tpu_inference/models/jax/gemma4.py), as the container log's last line.
SHARED_KV_ASSERTION = "AssertionError: Expect no shared layers"

LOGS_COMMAND = ("gcloud compute tpus tpu-vm ssh {node} --zone {zone} -- 'sudo docker logs --tail 100 tpubot-vllm'")


@dataclass(frozen=True)
class StartupError:
    name: str
    pattern: re.Pattern[str]
    reason: str
    fix: str


KNOWN_STARTUP_ERRORS: tuple[StartupError, ...] = (
    StartupError(
        "shared-kv-layers", re.compile(r"Expect no shared layers|num_kv_shared_layers", re.IGNORECASE),
        "this image's TPU backend cannot load a model with shared-KV layers (Gemma 4 E2B has 20)",
        f"set VLLM_IMAGE={DEFAULT_IMAGE} (a vLLM TPU image that serves Gemma 4 E2B), then `/tpu down` and "
        "`/tpu up` again."),
    StartupError(
        "gated-model", re.compile(r"GatedRepoError|Access to model .* is restricted|401 Client Error.*huggingface",
                                  re.IGNORECASE),
        "Hugging Face refused the weights to the VM's token",
        "accept the Gemma license on huggingface.co for the account whose token is in HF_TOKEN_SECRET, then "
        "`/tpu down` and `/tpu up` again."),
    StartupError(
        "out-of-memory", re.compile(r"RESOURCE_EXHAUSTED|out of memory|Insufficient memory", re.IGNORECASE),
        "the model and its KV cache do not fit in the TPU's memory with these flags",
        "lower VLLM_MAX_MODEL_LEN (or --gpu-memory-utilization), then `/tpu down` and `/tpu up` again."),
    StartupError(
        "unknown-flag", re.compile(r"unrecognized arguments|error: argument", re.IGNORECASE),
        "this image's vLLM does not accept a flag the startup script passes",
        f"use the image the bot's flags are made for (VLLM_IMAGE={DEFAULT_IMAGE}), or check "
        "`tpubot render-startup-script`."),
)


def classify_startup_error(line: str) -> StartupError | None:
    """The known cause of a vLLM start-up error line, or None."""
    return next((known for known in KNOWN_STARTUP_ERRORS if known.pattern.search(line or "")), None)


def crash_loop_explanation(line: str, restarts: int, *, node: str, zone: str) -> tuple[str, str]:
    """(reason, fix) for a lease whose vLLM container crashed `restarts` times at start-up."""
    said = f" Its last error: `{line}`." if line else ""
    known = classify_startup_error(line)
    if known is not None:
        return f"vLLM crashed {restarts} times at start-up: {known.reason}.{said}", known.fix
    return (f"vLLM crashed {restarts} times at start-up.{said}",
            f"read the container's log (`{LOGS_COMMAND.format(node=node, zone=zone)}`), fix the cause, then "
            "`/tpu down` and `/tpu up` again.")
