"""Which service account a TPU VM runs as, and what it may read: for the bot's grants and doctor's check.

A node created with `serviceAccount: {}` runs as the project's default Compute Engine service
account, `PROJECT_NUMBER-compute@developer.gserviceaccount.com`; with TPU_SERVICE_ACCOUNT it runs as
that account (infra/tpu.py sends it). The project number comes from Cloud Resource Manager
(`GET v1/projects/PROJECT` → `projectNumber`), which `roles/tpu.admin` already allows the bot
(`resourcemanager.projects.get`).

`can_read_secret` answers from the allow policies (the secret's, then the project's): whether a role
that holds `secretmanager.versions.access` is bound to the account. It says "cannot tell" (None)
rather than "no" when the answer could rest on what it cannot see: a group's or a domain's members,
a custom role's permissions, a grant on the project's folder or organization. Deny policies and
IAM conditions it cannot see either; a grant it finds is reported as found.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.auth.credentials import Credentials
from google.auth.transport.requests import AuthorizedSession

RESOURCE_MANAGER_ENDPOINT = "https://cloudresourcemanager.googleapis.com"
CALL_TIMEOUT = 15.0
# Predefined roles that hold secretmanager.versions.access.
SECRET_READING_ROLES = frozenset({"roles/secretmanager.secretAccessor", "roles/secretmanager.admin", "roles/owner"})
SECRET_ACCESSOR = "roles/secretmanager.secretAccessor"
# Members that may stand for the account without naming it: its group, its domain, a principal set.
INDIRECT_MEMBERS = ("group:", "domain:", "principalSet:", "principal:")


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
    _project_json: dict = field(default_factory=dict, init=False, repr=False)
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
        return str(self._project().get("projectNumber", ""))

    def _project(self) -> dict:
        """Resource Manager's projects.get (the number, the parent), asked once."""
        if self._project_json:
            return self._project_json
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
                                   f"{response.status_code}: {error_message(response)})", fix)
        self._project_json = response.json()
        return self._project_json

    def can_read_secret(self, secret_name: str) -> tuple[bool | None, str]:
        """(True/False, how it was found), or (None, why it could not be told) for `projects/P/secrets/S`.

        The secret's policy is read with the Secret Manager client (the bot holds
        secretmanager.admin); the project's through Resource Manager, which needs
        resourcemanager.projects.getIamPolicy (roles/browser): without it only a grant on the secret
        itself can be seen.
        """
        account = f"serviceAccount:{self.email()}"
        members = {account, "allUsers", "allAuthenticatedUsers"}
        secret_policy = self._secret_policy(secret_name)
        secret_roles = _roles_of(secret_policy, members)
        if secret_roles & SECRET_READING_ROLES:
            return True, f"{sorted(secret_roles & SECRET_READING_ROLES)[0]} on the secret"
        try:
            project_policy = self._project_policy()
        except NodeAccountError as error:
            return None, (f"no grant on the secret, and the project's policy is not readable ({error.message}): grant "
                          "the bot roles/browser to check it")
        project_roles = _roles_of(project_policy, members)
        if project_roles & SECRET_READING_ROLES:
            return True, f"{sorted(project_roles & SECRET_READING_ROLES)[0]} on the project"
        # No grant the bot can see. Whether one it cannot see exists decides between "no" and "cannot tell".
        for where, policy, roles in (("secret", secret_policy, secret_roles), ("project", project_policy,
                                                                              project_roles)):
            if custom := sorted(role for role in roles if _is_custom(role)):
                return None, (f"no predefined role that reads secrets is bound to it, but the custom role {custom[0]} "
                              f"is, on the {where}: whether it holds secretmanager.versions.access was not checked")
            if indirect := _indirect_readers(policy):
                return None, (f"no role that reads secrets is bound to it by name, but {indirect[0]} holds one on the "
                              f"{where}, and whether the account is among its members cannot be seen")
        try:
            parent = self._project().get("parent") or {}
        except NodeAccountError as error:
            return None, f"no grant on the secret or the project, and the project's parent could not be read: {error}"
        if parent.get("type") in ("folder", "organization"):
            return None, (f"no grant on the secret or the project; project {self.project} is in {parent['type']} "
                          f"{parent.get('id', '?')}, where a grant would not show here")
        return False, "no role that reads secrets is bound to it on the secret or on the project"

    def _secret_policy(self, secret_name: str) -> dict:
        return _secret_policy(secret_name, self.credentials, self.secretmanager_endpoint)

    def _project_policy(self) -> dict:
        base = (self.resourcemanager_endpoint or RESOURCE_MANAGER_ENDPOINT).rstrip("/")
        try:
            with AuthorizedSession(self.credentials) as session:
                response = session.post(f"{base}/v1/projects/{self.project}:getIamPolicy", json={},
                                        timeout=CALL_TIMEOUT)
        except (requests.RequestException, auth_exc.GoogleAuthError) as error:
            raise NodeAccountError(str(error), "check the network path to Cloud Resource Manager") from error
        if response.status_code != 200:
            raise NodeAccountError(f"HTTP {response.status_code}: {error_message(response)}",
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


def _is_custom(role: str) -> bool:
    return role.startswith(("projects/", "organizations/"))


def _indirect_readers(policy: dict) -> list[str]:
    """`MEMBER (ROLE)` for each group, domain or principal set bound to a role that may read secrets."""
    return [f"{member} ({b.get('role')})" for b in policy.get("bindings") or []
            if b.get("role") in SECRET_READING_ROLES or _is_custom(str(b.get("role")))
            for member in b.get("members") or [] if member.startswith(INDIRECT_MEMBERS)]


def _roles_of(policy: dict, members: set[str]) -> set[str]:
    return {str(b.get("role")) for b in policy.get("bindings") or [] if members & set(b.get("members") or [])}


def error_message(response) -> str:
    """What a Google REST API's error body says (its `error.message`), else the start of the body."""
    try:
        return str(response.json().get("error", {}).get("message", ""))
    except ValueError:
        return response.text[:200]
