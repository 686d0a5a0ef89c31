"""The TPU VM's startup script: one template, rendered without any chance of mangling bash.

The template (`infra/templates/startup-script.sh`, shipped as package data) is ordinary bash,
full of `${VAR}`, brace expansion and JSON. Placeholders use a delimiter bash never produces,
`@@NAME`, so nothing else in the file is touched; every value is inserted shell-quoted, and the
render fails loudly on an unknown or leftover placeholder instead of sending a broken script.

What never goes in: the Hugging Face token and the model endpoint's API key. The script fetches
both at boot (metadata-server token → Secret Manager), so instance metadata — readable by anyone
with compute.instances.get — holds no secret (reference/gcp-apis.md §7). vLLM gets the key as
`--api-key "${VLLM_API_KEY}"`, expanded inside the container, so it is in no host process's argv.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import string
from dataclasses import dataclass, field
from importlib import resources

from infra import boot_phases
from infra.vllm_flags import VllmConfig, vllm_flags

TEMPLATE_PACKAGE = "infra.templates"
TEMPLATE_NAME = "startup-script.sh"
METADATA_URL = "http://metadata.google.internal/computeMetadata/v1"
SECRET_MANAGER_URL = "https://secretmanager.googleapis.com"
HF_TOKEN_WAIT_SECONDS = 30 * 60  # the secret may be granted minutes after the VM boots
HF_TOKEN_RETRY_SECONDS = 20


class TemplateError(ValueError):
    """The template and the values given do not match (a bug, caught before anything is sent)."""


class _ScriptTemplate(string.Template):
    # `@@NAME` only: `$`, `${…}`, `{a,b}` and JSON braces stay exactly as written.
    delimiter = "@@"
    idpattern = r"[A-Z][A-Z0-9_]*"
    braceidpattern = r"(?!)"  # no `@@{…}` form, so a brace after @@ can never be taken for one
    flags = re.RegexFlag(0)  # case-sensitive: placeholders are upper-case only


@dataclass(frozen=True)
class StartupScriptConfig:
    project: str
    hf_token_secret: str = "hf-token"
    vllm: VllmConfig = field(default_factory=VllmConfig)
    metadata_url: str = METADATA_URL
    secret_manager_url: str = SECRET_MANAGER_URL
    hf_token_wait_seconds: int = HF_TOKEN_WAIT_SECONDS
    hf_token_retry_seconds: int = HF_TOKEN_RETRY_SECONDS
    # The lease's API-key secret version (infra/model_keys.py); vLLM refuses /v1/* without the key.
    api_key_secret: str = "projects/PROJECT/secrets/tpubot-model-key-LEASE/versions/latest"
    accelerator_type: str = "v5litepod-1"  # part of the compile cache's key: XLA programs are per chip
    xla_cache_bucket: str = ""  # a bucket name; "" keeps the compile cache on the VM only

    @property
    def secret_version(self) -> str:
        """`projects/P/secrets/S/versions/latest`; a full secret name in the setting is kept as is."""
        secret = self.hf_token_secret.strip().strip("/")
        if not secret.startswith("projects/"):
            secret = f"projects/{self.project}/secrets/{secret}"
        return secret if "/versions/" in secret else f"{secret}/versions/latest"


def compile_cache_key(config: StartupScriptConfig) -> str:
    """A name for the compile cache that changes whenever a cached program could be wrong.

    XLA programs depend on the image (vLLM, tpu-inference, JAX), the model and its revision, every
    serve flag (lengths, batch sizes, limits) and the chip; the API key and the port do not enter.
    """
    vllm = config.vllm
    flags = vllm_flags(vllm)
    port_at = flags.index("--port")
    del flags[port_at:port_at + 2]
    inputs = {"image": vllm.image, "model": vllm.model, "revision": vllm.revision, "flags": flags,
              "accelerator": config.accelerator_type}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32]


def load_template() -> str:
    return resources.files(TEMPLATE_PACKAGE).joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")


def render_template(template: str, values: dict[str, str]) -> str:
    """Substitute `@@NAME` placeholders with the given (already shell-safe) texts; strict both ways."""
    tmpl = _ScriptTemplate(template)
    wanted = set(tmpl.get_identifiers())
    if not tmpl.is_valid():
        raise TemplateError("the template has a malformed @@ placeholder")
    missing, unused = wanted - values.keys(), values.keys() - wanted
    if missing or unused:
        raise TemplateError(f"placeholders without a value: {sorted(missing)}; values without a placeholder: {sorted(unused)}")
    return tmpl.substitute(values)


def script_values(config: StartupScriptConfig) -> dict[str, str]:
    vllm = config.vllm
    return {
        "MODEL_LABEL": _comment_safe(f"{vllm.model} on port {vllm.port}"),
        "VLLM_IMAGE": shlex.quote(vllm.image),
        "MODEL_NAME": shlex.quote(vllm.model),
        "MODEL_PORT": shlex.quote(str(vllm.port)),
        "HF_TOKEN_SECRET": shlex.quote(config.secret_version),
        "METADATA_URL": shlex.quote(config.metadata_url.rstrip("/")),
        "SECRET_ACCESS_URL": shlex.quote(f"{config.secret_manager_url.rstrip('/')}/v1/{config.secret_version}:access"),
        "API_KEY_SECRET": shlex.quote(config.api_key_secret),
        "API_KEY_ACCESS_URL": shlex.quote(f"{config.secret_manager_url.rstrip('/')}/v1/{config.api_key_secret}:access"),
        "HF_TOKEN_WAIT_SECONDS": str(int(config.hf_token_wait_seconds)),
        "HF_TOKEN_RETRY_SECONDS": str(int(config.hf_token_retry_seconds)),
        "VLLM_ARGS": " ".join(shlex.quote(arg) for arg in vllm_flags(vllm)),
        "CACHE_KEY": shlex.quote(compile_cache_key(config)),
        "CACHE_BUCKET": shlex.quote(config.xla_cache_bucket) if config.xla_cache_bucket else "''",
        **_boot_phase_values(config),
    }


def _boot_phase_values(config: StartupScriptConfig) -> dict[str, str]:
    """The guest-attribute names, from the module the bot reads them with (infra/boot_phases.py)."""
    b = boot_phases
    names = {
        "KEY_PHASE": b.PHASE_KEY, "KEY_PHASE_SINCE": b.PHASE_SINCE_KEY, "KEY_LAST_ERROR": b.LAST_ERROR_KEY,
        "KEY_RESTARTS": b.RESTARTS_KEY, "KEY_CACHE": b.CACHE_KEY,
        "PHASE_SECRETS_FETCHED": b.SECRETS_FETCHED, "PHASE_PULLING_IMAGE": b.PULLING_IMAGE,
        "PHASE_LOADING_WEIGHTS": b.LOADING_WEIGHTS, "PHASE_COMPILING": b.COMPILING, "PHASE_SERVING": b.SERVING,
        "PHASE_CRASHED": b.CRASHED, "CACHE_WARM": b.CACHE_WARM, "CACHE_COLD": b.CACHE_COLD,
    }
    return {
        **{name: shlex.quote(value) for name, value in names.items()},
        "BOOT_NAMESPACE": _comment_safe(b.NAMESPACE),
        "BOOT_PHASE_LIST": _comment_safe(", ".join(b.PHASES)),
        "LAST_ERROR_MAX_CHARS": str(b.LAST_ERROR_MAX_CHARS),
        "GUEST_ATTRIBUTES_URL": shlex.quote(f"{config.metadata_url.rstrip('/')}/instance/guest-attributes/{b.NAMESPACE}"),
    }


def render_startup_script(config: StartupScriptConfig) -> str:
    """The exact `startup-script` metadata value sent with every create (same for every lease)."""
    return render_template(load_template(), script_values(config))


def _comment_safe(text: str) -> str:
    return " ".join(text.split())
