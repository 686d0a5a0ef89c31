"""Which cloud the bot drives: a GCP project, or the local sandbox of `infra/sandbox/`.

Decided once, from the settings (`Settings.mode` in bot/settings.py: no GCP_PROJECT means the
sandbox), and turned here into a `DeploymentTarget`: what differs between the two (credentials,
where an unset API endpoint leads, how often to poll, what to call it). Everything that behaves
differently asks the target; only this module tells the modes apart (tests/test_layers.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.auth.credentials import Credentials


@dataclass(frozen=True)
class DeploymentTarget:
    # The sandbox: an API whose endpoint is unset has no Google behind it, only a local emulator
    # (started by the process, or absent).
    emulated_apis: bool
    # The emulators check no credentials, and a newcomer on the sandbox has none to find.
    anonymous: bool
    lro_poll_interval: float  # seconds between polls of a create LRO (the emulator settles it in a fraction of one)
    job_poll_delay: float  # seconds between the worker's polls of the job queue
    # The emulated cloud moves in seconds, not minutes: a local stack looks at it at least this often.
    poll_interval_cap: timedelta | None
    default_model_source_ranges: tuple[str, ...]  # who may reach a node's model port when MODEL_SOURCE_RANGES is unset
    sandbox_model: bool  # `tpubot shell`/`dev` answer mentions with a sandbox model unless GEMMA_BASE_URL is set

    def credentials(self) -> Credentials | None:
        """What the Google clients sign with; None lets each client find the deployment's own (ADC)."""
        if not self.anonymous:
            return None
        # Imported here: settings import this module, and a CLI command that calls no cloud loads no google.auth.
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()

    def api_endpoint(self, configured: str) -> str | None:
        """Where one Google API is called: the configured endpoint, else Google's own ("") on a
        project; None on the sandbox, where an API with no emulator is a backend this deployment lacks
        (anonymous calls to Google would only fail)."""
        return configured or (None if self.emulated_apis else "")

    def label_for(self, project: str, *, sandbox: str = "sandbox") -> str:
        """The deployment named for people: `sandbox` (or the caller's words for it), or `GCP project P`."""
        return sandbox if self.emulated_apis else f"GCP project {project}"


class DeploymentMode(enum.Enum):
    CLOUD = "cloud"  # GCP_PROJECT names a project: Google's APIs, Application Default Credentials
    SANDBOX = "sandbox"  # no GCP_PROJECT: the local emulators, called anonymously

    @classmethod
    def for_project(cls, gcp_project: str) -> DeploymentMode:
        return cls.CLOUD if gcp_project else cls.SANDBOX

    @property
    def target(self) -> DeploymentTarget:
        return _TARGETS[self]

    def credentials(self) -> Credentials | None:
        return self.target.credentials()


_TARGETS = {
    DeploymentMode.CLOUD: DeploymentTarget(
        emulated_apis=False, anonymous=False, lro_poll_interval=1.0, job_poll_delay=0.5, poll_interval_cap=None,
        default_model_source_ranges=(), sandbox_model=False),
    DeploymentMode.SANDBOX: DeploymentTarget(
        emulated_apis=True, anonymous=True, lro_poll_interval=0.05, job_poll_delay=0.1,
        poll_interval_cap=timedelta(milliseconds=500),
        # The sandbox bot reaches its nodes' models over loopback.
        default_model_source_ranges=("127.0.0.1/32",), sandbox_model=True),
}
