"""The TPU VM's startup script: one template, rendered without any chance of mangling bash.

The template (`infra/templates/startup-script.sh`, shipped as package data) is ordinary bash,
full of `${VAR}`, brace expansion and JSON. Placeholders use a delimiter bash never produces,
`@@NAME`, so nothing else in the file is touched; every value is inserted shell-quoted, and the
render fails loudly on an unknown or leftover placeholder instead of sending a broken script.

What never goes in: the Hugging Face token and the model endpoint's API key. The script fetches
both at boot (metadata-server token → Secret Manager), so instance metadata — readable by anyone
with compute.instances.get — holds no secret (reference/gcp-apis.md §7). vLLM gets the key through
the container's environment: vLLM 0.32.0 reads VLLM_API_KEY when no `--api-key` is given
(vllm/entrypoints/serve/middleware/register.py, `args.api_key or [envs.VLLM_API_KEY]`), so the key
is in no process's argv, on the host or in the container.

Where Google is comes from one place: the metadata server's host from GCE_METADATA_HOST at run time
(Google's own libraries' variable; unset on a TPU VM), Secret Manager and Cloud Storage from the
deployment's settings, Google's by default. The sandbox's TPU VM (infra/sandbox/tpu_vm.py) runs these
very bytes against its emulators that way, with no branch for it in the script.

Every wait before vLLM is bounded by `WaitBudget`'s defaults, and `pre_vllm_wait_seconds` adds them up:
MODEL_BOOT_TIMEOUT must leave room for them, so a VM that cannot start says why (phase `failed`)
before the bot's own timeout.
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
SECRET_MANAGER_URL = "https://secretmanager.googleapis.com"
STORAGE_URL = "https://storage.googleapis.com"
# Guest-attribute writes and metadata reads outside the retry loops before vLLM starts: the phases
# (two writes each: reading-secrets, pulling-image, restoring-cache, failed), restarts, last-error
# (four times), cache, cache-note, the account's email, the tokens for docker login and the cache.
FIXED_METADATA_CALLS = 18
# A cold vLLM start on v5e after those waits: loading and compiling, 857 s measured for 32,768 tokens
# (reference/vllm-tpu.md §4), 960 s allowed by tpu-inference's CI. The default MODEL_BOOT_TIMEOUT is the
# worst case of the waits plus this, so a VM that got through every step late still has time to serve.
COLD_START_SECONDS = 16 * 60


class TemplateError(ValueError):
    """The template and the values given do not match (a bug, caught before anything is sent)."""


class _ScriptTemplate(string.Template):
    # `@@NAME` only: `$`, `${…}`, `{a,b}` and JSON braces stay exactly as written.
    delimiter = "@@"
    idpattern = r"[A-Z][A-Z0-9_]*"
    braceidpattern = r"(?!)"  # no `@@{…}` form, so a brace after @@ can never be taken for one
    flags = re.RegexFlag(0)  # case-sensitive: placeholders are upper-case only


@dataclass(frozen=True)
class WaitBudget:
    """How long each call before vLLM may take, how often each step is tried and how long apart (seconds).

    Every call the script makes has a time limit (curl --max-time, `timeout`), every retry a count."""

    metadata_seconds: int = 5  # one metadata-server call (token, email, a guest-attribute write)
    api_seconds: int = 10  # one Secret Manager call (or `docker login`)
    # The compile cache: ~200 MB in the TPU's region (reference/vllm-tpu.md §4): seconds, not minutes.
    cache_transfer_seconds: int = 180
    docker_seconds: int = 60  # one `docker run --detach`/rm/logs/inspect: the daemon answers in seconds, or is stuck
    # Secrets are tried every 30 s. A 403 on the lease's key is tried for 7 minutes: the bot grants the
    # VM's account just before the VM exists, and an IAM grant takes up to about 7 minutes to reach
    # Secret Manager. A 403 on the HF token (the operator's grant, which doctor checks) 2 minutes, a 404
    # (waiting creates nothing) 1 minute, anything else (5xx, no answer) 2.5 minutes.
    secret_retry_seconds: int = 30
    key_denied_tries: int = 15
    secret_denied_tries: int = 5
    secret_missing_tries: int = 3
    secret_tries: int = 6
    # The image pull: Docker Hub's rate limit is backed off 60, 120, 240 and 480 s (15 minutes: its
    # window is an hour, and another node's pull may be what used the address's share); any other
    # failure 15, 30, 45, 60 s. All of it, the pulls themselves included (20-26 GB), within 20 minutes.
    pull_tries: int = 5
    pull_retry_seconds: int = 15
    pull_rate_limit_seconds: int = 60
    pull_budget_seconds: int = 1200

    def secret_seconds(self, denied_tries: int) -> int:
        """The longest one secret can take: every try a token and a call, every retry a published line and a pause."""
        tries = max(denied_tries, self.secret_missing_tries, self.secret_tries)
        one_try = self.metadata_seconds + self.api_seconds
        return tries * one_try + (tries - 1) * (self.metadata_seconds + self.secret_retry_seconds)

    def pre_vllm_wait_seconds(self) -> int:
        """The longest the VM can take before it starts vLLM or gives up: both secrets tried to the end, a
        `docker login`, the pull's whole budget, the cache's download, `docker rm` and `docker run`, and the
        metadata calls in between."""
        return (self.secret_seconds(self.secret_denied_tries) + self.secret_seconds(self.key_denied_tries)
                + self.api_seconds + self.pull_budget_seconds + self.cache_transfer_seconds
                + 2 * self.docker_seconds  # the old container's `docker rm`, the new one's `docker run`
                + FIXED_METADATA_CALLS * self.metadata_seconds)


@dataclass(frozen=True)
class StartupScriptConfig:
    project: str
    hf_token_secret: str = "hf-token"
    vllm: VllmConfig = field(default_factory=VllmConfig)
    secret_manager_url: str = SECRET_MANAGER_URL
    storage_url: str = STORAGE_URL
    waits: WaitBudget = field(default_factory=WaitBudget)
    # The lease's API-key secret version (infra/model_keys.py); vLLM refuses /v1/* without the key.
    api_key_secret: str = "projects/PROJECT/secrets/tpubot-model-key-LEASE/versions/latest"
    accelerator_type: str = "v5litepod-1"  # part of the compile cache's key: XLA programs are per chip
    xla_cache_bucket: str = ""  # a bucket name; "" keeps the compile cache on the VM only

    @property
    def secret_version(self) -> str:
        return secret_version(self.project, self.hf_token_secret)


def secret_version(project: str, hf_token_secret: str) -> str:
    """`projects/P/secrets/S/versions/latest`; a full secret name in the setting is kept as is."""
    secret = hf_token_secret.strip().strip("/")
    if not secret.startswith("projects/"):
        secret = f"projects/{project}/secrets/{secret}"
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
    vllm, waits = config.vllm, config.waits
    return {
        "MODEL_LABEL": _comment_safe(f"{vllm.model} on port {vllm.port}"),
        "SECRET_MANAGER_URL": shlex.quote(config.secret_manager_url.rstrip("/")),
        "STORAGE_URL": shlex.quote(config.storage_url.rstrip("/")),
        "VLLM_IMAGE": shlex.quote(vllm.image),
        "MODEL_NAME": shlex.quote(vllm.model),
        "MODEL_PORT": shlex.quote(str(vllm.port)),
        "HF_TOKEN_SECRET": shlex.quote(config.secret_version),
        "API_KEY_SECRET": shlex.quote(config.api_key_secret),
        **{name.upper(): str(int(getattr(waits, name))) for name in WaitBudget.__dataclass_fields__},
        "VLLM_ARGS": " ".join(shlex.quote(arg) for arg in vllm_flags(vllm)),
        "CACHE_KEY": shlex.quote(compile_cache_key(config)),
        "CACHE_BUCKET": shlex.quote(config.xla_cache_bucket) if config.xla_cache_bucket else "''",
        **_boot_phase_values(),
    }


def _boot_phase_values() -> dict[str, str]:
    """The guest-attribute names, from the module the bot reads them with (infra/boot_phases.py)."""
    b = boot_phases
    names = {
        "KEY_PHASE": b.PHASE_KEY, "KEY_PHASE_SINCE": b.PHASE_SINCE_KEY, "KEY_LAST_ERROR": b.LAST_ERROR_KEY,
        "KEY_RESTARTS": b.RESTARTS_KEY, "KEY_CACHE": b.CACHE_KEY, "KEY_CACHE_NOTE": b.CACHE_NOTE_KEY,
        "PHASE_READING_SECRETS": b.READING_SECRETS, "PHASE_PULLING_IMAGE": b.PULLING_IMAGE,
        "PHASE_RESTORING_CACHE": b.RESTORING_CACHE, "PHASE_LOADING_WEIGHTS": b.LOADING_WEIGHTS,
        "PHASE_COMPILING": b.COMPILING, "PHASE_SERVING": b.SERVING, "PHASE_CRASHED": b.CRASHED,
        "PHASE_FAILED": b.FAILED, "CACHE_WARM": b.CACHE_WARM, "CACHE_COLD": b.CACHE_COLD, "CACHE_OFF": b.CACHE_OFF,
    }
    if not re.fullmatch(r"[a-z][a-z0-9-]*", b.NAMESPACE):
        raise TemplateError(f"guest-attribute namespace {b.NAMESPACE!r} would need quoting inside a URL")
    return {
        **{name: shlex.quote(value) for name, value in names.items()},
        "BOOT_NAMESPACE": b.NAMESPACE,
        "BOOT_PHASE_LIST": _comment_safe(", ".join(b.PHASES)),
        "LAST_ERROR_MAX_CHARS": str(b.LAST_ERROR_MAX_CHARS),
    }


def render_startup_script(config: StartupScriptConfig) -> str:
    """The exact `startup-script` metadata value sent with a create (leases differ only in the name of
    their API-key secret)."""
    return render_template(load_template(), script_values(config))


def _comment_safe(text: str) -> str:
    return " ".join(text.split())
