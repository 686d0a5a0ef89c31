"""Which service account a TPU VM runs as, and what it may read: for the bot's grants and doctor's check.

A node created with `serviceAccount: {}` runs as the project's default Compute Engine service
account, `PROJECT_NUMBER-compute@developer.gserviceaccount.com`; with TPU_SERVICE_ACCOUNT it runs as
that account (infra/tpu.py sends it). The project number comes from Cloud Resource Manager
(`GET v1/projects/PROJECT` → `projectNumber`), which `roles/tpu.admin` already allows the bot
(`resourcemanager.projects.get`).

`can_read_secret` answers from the allow policies (the secret's, then the project's): whether a role
that holds `secretmanager.versions.access` is bound to the account. It cannot see IAM conditions,
groups or deny policies, and says so when the answer rests on them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.auth.credentials import Credentials

RESOURCE_MANAGER_ENDPOINT = "https://cloudresourcemanager.googleapis.com"
CALL_TIMEOUT = 15.0
# Predefined roles that hold secretmanager.versions.access.
SECRET_READING_ROLES = frozenset({"roles/secretmanager.secretAccessor", "roles/secretmanager.admin", "roles/owner"})
SECRET_ACCESSOR = "roles/secretmanager.secretAccessor"


class NodeAccountError(Exception):
    """The account could not be told or checked; `fix` says what to change."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def default_compute_account(project_number: str | int) -> str:
    return f"{project_number}-compute@developer.gserviceaccount.com"


def grant_command(secret_id: str, project: str, account: str) -> str:
    """The gcloud command that lets `account` read `secret_id` (what an operator pastes)."""
    return (f"gcloud secrets add-iam-policy-binding {secret_id} --project {project} "
            f"--member serviceAccount:{account} --role {SECRET_ACCESSOR}")


@dataclass
class NodeAccount:
    project: str
    configured: str = ""  # TPU_SERVICE_ACCOUNT
    credentials: Credentials | None = None
    resourcemanager_endpoint: str = ""
    secretmanager_endpoint: str = ""
    _email: str = field(default="", init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def email(self) -> str:
        """The account's email. Raises NodeAccountError."""
        if self.configured:
            return self.configured
        with self._lock:
            if not self._email:
                self._email = default_compute_account(self._project_number())
            return self._email

    @property
    def described(self) -> str:
        """How the account was found, for people: `TPU_SERVICE_ACCOUNT` or `the project's default …`."""
        return "TPU_SERVICE_ACCOUNT" if self.configured else "the project's default Compute Engine service account"

    def _project_number(self) -> str:
        from google.auth.transport.requests import AuthorizedSession

        base = (self.resourcemanager_endpoint or RESOURCE_MANAGER_ENDPOINT).rstrip("/")
        fix = ("grant the bot's account roles/tpu.admin (it holds resourcemanager.projects.get) and enable the Cloud "
               "Resource Manager API (`gcloud services enable cloudresourcemanager.googleapis.com`), or set "
               "TPU_SERVICE_ACCOUNT to the account the TPU VMs run as")
        try:
            with AuthorizedSession(self.credentials) as session:
                response = session.get(f"{base}/v1/projects/{self.project}", timeout=CALL_TIMEOUT)
        except (requests.RequestException, auth_exc.GoogleAuthError) as error:
            raise NodeAccountError(f"could not ask Cloud Resource Manager for project {self.project}'s number: "
                                   f"{error}", fix) from error
        if response.status_code != 200:
            raise NodeAccountError(f"Cloud Resource Manager refused project {self.project}'s number (HTTP "
                                   f"{response.status_code}: {_message(response)})", fix)
        return str(response.json().get("projectNumber", ""))

    def can_read_secret(self, secret_name: str) -> tuple[bool | None, str]:
        """(True/False, how it was found), or (None, why it could not be told) for `projects/P/secrets/S`.

        The secret's policy is read with the Secret Manager client (the bot holds
        secretmanager.admin); the project's through Resource Manager, which needs
        resourcemanager.projects.getIamPolicy (roles/browser): without it only a grant on the secret
        itself can be seen.
        """
        account = f"serviceAccount:{self.email()}"
        members = {account, "allUsers", "allAuthenticatedUsers"}
        secret_roles = _roles_of(self._secret_policy(secret_name), members)
        if secret_roles & SECRET_READING_ROLES:
            return True, f"{sorted(secret_roles & SECRET_READING_ROLES)[0]} on the secret"
        try:
            project_roles = _roles_of(self._project_policy(), members)
        except NodeAccountError as error:
            return None, (f"no grant on the secret, and the project's policy is not readable ({error.message}): grant "
                          "the bot roles/browser to check it")
        if project_roles & SECRET_READING_ROLES:
            return True, f"{sorted(project_roles & SECRET_READING_ROLES)[0]} on the project"
        return False, "no role that reads secrets is bound to it on the secret or on the project"

    def _secret_policy(self, secret_name: str) -> dict:
        return _secret_policy(secret_name, self.credentials, self.secretmanager_endpoint)

    def _project_policy(self) -> dict:
        from google.auth.transport.requests import AuthorizedSession

        base = (self.resourcemanager_endpoint or RESOURCE_MANAGER_ENDPOINT).rstrip("/")
        try:
            with AuthorizedSession(self.credentials) as session:
                response = session.post(f"{base}/v1/projects/{self.project}:getIamPolicy", json={},
                                        timeout=CALL_TIMEOUT)
        except (requests.RequestException, auth_exc.GoogleAuthError) as error:
            raise NodeAccountError(str(error), "check the network path to Cloud Resource Manager") from error
        if response.status_code != 200:
            raise NodeAccountError(f"HTTP {response.status_code}: {_message(response)}",
                                   "grant the bot's account roles/browser on the project")
        return response.json()


def _secret_policy(secret_name: str, credentials: Credentials | None, endpoint: str) -> dict:
    """The secret's allow policy as JSON bindings. Raises NodeAccountError."""
    from google.cloud import secretmanager_v1
    from google.protobuf import json_format

    options = {"api_endpoint": endpoint} if endpoint else None
    client = secretmanager_v1.SecretManagerServiceClient(transport="rest", credentials=credentials,
                                                          client_options=options)
    try:
        policy = client.get_iam_policy(request={"resource": secret_name}, timeout=CALL_TIMEOUT)
    except gexc.NotFound as error:
        raise NodeAccountError(f"secret {secret_name} does not exist", "create it (README: the HF token secret)") \
            from error
    except gexc.Forbidden as error:
        raise NodeAccountError(f"the secret's policy is not readable: {error.message}",
                               "grant the bot's account roles/secretmanager.admin on the project") from error
    except (gexc.GoogleAPICallError, requests.RequestException, auth_exc.GoogleAuthError) as error:
        raise NodeAccountError(f"Secret Manager could not be asked: {error}",
                               "enable the Secret Manager API (`gcloud services enable secretmanager.googleapis.com`)") \
            from error
    finally:
        client.transport.close()
    return json_format.MessageToDict(policy)


def _roles_of(policy: dict, members: set[str]) -> set[str]:
    return {str(b.get("role")) for b in policy.get("bindings") or [] if members & set(b.get("members") or [])}


def _message(response) -> str:
    try:
        return str(response.json().get("error", {}).get("message", ""))
    except ValueError:
        return response.text[:200]
