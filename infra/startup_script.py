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

import shlex
import string
from dataclasses import dataclass, field
from importlib import resources

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
    flags = 0  # case-sensitive: placeholders are upper-case only


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

    @property
    def secret_version(self) -> str:
        """`projects/P/secrets/S/versions/latest`; a full secret name in the setting is kept as is."""
        secret = self.hf_token_secret.strip().strip("/")
        if not secret.startswith("projects/"):
            secret = f"projects/{self.project}/secrets/{secret}"
        return secret if "/versions/" in secret else f"{secret}/versions/latest"


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
    }


def render_startup_script(config: StartupScriptConfig) -> str:
    """The exact `startup-script` metadata value sent with every create (same for every lease)."""
    return render_template(load_template(), script_values(config))


def _comment_safe(text: str) -> str:
    return " ".join(text.split())
