"""Which cloud the bot drives: a GCP project, or the local sandbox of `infra/sandbox/`.

Decided once, from the settings (`Settings.mode` in bot/settings.py: no GCP_PROJECT means the
sandbox), and handed to whatever behaves differently on each, so nothing re-derives it from the
project id. There is no setting for it: the mode follows from GCP_PROJECT, as it always has.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.auth.credentials import Credentials


class DeploymentMode(enum.Enum):
    CLOUD = "cloud"  # GCP_PROJECT names a project: Google's APIs, Application Default Credentials
    SANDBOX = "sandbox"  # no GCP_PROJECT: the local emulators, called anonymously

    @classmethod
    def for_project(cls, gcp_project: str) -> DeploymentMode:
        return cls.CLOUD if gcp_project else cls.SANDBOX

    @property
    def is_sandbox(self) -> bool:
        return self is DeploymentMode.SANDBOX

    def credentials(self) -> Credentials | None:
        """What the Google clients sign with. The emulators check no credentials, and a newcomer on
        the sandbox has none to find; None lets each client find the deployment's own (ADC)."""
        if not self.is_sandbox:
            return None
        # Imported here: settings import this module, and a CLI command that calls no cloud loads no google.auth.
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
