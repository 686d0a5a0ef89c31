"""The model endpoint's API key: one per lease, kept in Secret Manager, destroyed with the lease.

vLLM on the TPU VM takes the key from its environment (VLLM_API_KEY); without it every `/v1/*` call
answers 401, so an endpoint a firewall rule admits is still usable only by the bot. The key is made
when the lease first asks for a TPU (before the VM can boot), stored as a version of the secret
`tpubot-model-key-{lease}` — like the HF token, the VM reads it at boot with its own
metadata-server token, so it is never in instance metadata or the startup script — read back by
every caller of the endpoint (agent, health probes, bench) and deleted with the lease.

The VM's account gets `roles/secretmanager.secretAccessor` on that one secret when the bot creates
it (`reader`, infra/node_account.py: TPU_SERVICE_ACCOUNT or the project's default Compute Engine
account), so no one has to grant the VM every secret of the project.

The key itself never leaves this module except as the Authorization header's value: it is not
logged, not put in Slack, not in the lease record and not in any model prompt.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.auth.credentials import Credentials

from infra.gcp_credentials import CREDENTIALS_VARIABLE, REJECTED_FIX, rejected_credentials
from infra.node_account import SECRET_ACCESSOR, NodeAccount, NodeAccountError
from infra.tpu import MANAGED_BY

if TYPE_CHECKING:
    from google.cloud.secretmanager_v1 import SecretManagerServiceClient

SECRET_PREFIX = "tpubot-model-key-"
# What the bot's account does in Secret Manager, on the project: create a secret per lease, add its
# version, read it back, grant the VM (get and set the secret's policy), list them for the reconciler
# and delete them. Of Google's predefined roles only roles/secretmanager.admin holds create, delete and
# setIamPolicy together (secretAccessor, secretVersionAdder, secretVersionManager and viewer hold none
# of those three), so the README names it, or a custom role with exactly these.
BOT_SECRET_PERMISSIONS = (
    "secretmanager.secrets.create", "secretmanager.secrets.delete", "secretmanager.secrets.list",
    "secretmanager.secrets.getIamPolicy", "secretmanager.secrets.setIamPolicy", "secretmanager.versions.add",
    "secretmanager.versions.access",
)
CALL_TIMEOUT = 15.0
# setIamPolicy with a stale etag (409 ABORTED): Google's advice is to retry the whole read-modify-write with
# exponential backoff. Four tries over ~1.5 s outlast a person's edit in the console; a tool that rewrites
# the policy every time will not be outlasted, and is named instead.
SET_POLICY_TRIES = 4
SET_POLICY_BACKOFF_SECONDS = 0.25
_CALL_ERRORS = (gexc.GoogleAPICallError, requests.RequestException, auth_exc.GoogleAuthError)


def model_key_secret_id(lease_id: str) -> str:
    return f"{SECRET_PREFIX}{lease_id}"


def model_key_secret_version(project: str, lease_id: str) -> str:
    """What the startup script reads at boot: `projects/P/secrets/tpubot-model-key-L/versions/latest`."""
    return f"projects/{project}/secrets/{model_key_secret_id(lease_id)}/versions/latest"


@dataclass(frozen=True)
class KeySecret:
    lease_id: str
    created: datetime | None  # the secret's createTime


class ModelKeyError(Exception):
    """Secret Manager refused or failed; `fix` says what to change (said to people, never the key)."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def _call_failed(doing: str, error: Exception, fix: str) -> ModelKeyError:
    """A call that failed; credentials Google refuses are named as such, since no Secret Manager setting fixes them."""
    if (said := rejected_credentials(error)) is not None:
        return ModelKeyError(f"Google credentials were rejected: {said}", f"{CREDENTIALS_VARIABLE}: {REJECTED_FIX}")
    return ModelKeyError(f"Secret Manager could not {doing}: {error}", fix)


class NoModelKeys:
    """The key store of a sandbox without a Secret Manager emulator: its endpoints run without a
    key, so there is none to make, read or delete."""

    async def create(self, lease_id: str) -> None:
        return None

    async def key(self, lease_id: str) -> str | None:
        return None

    async def destroy(self, lease_id: str) -> None:
        return None

    async def keyed_leases(self) -> list[KeySecret]:
        return []


@dataclass
class ModelKeys:
    project: str
    credentials: Credentials | None = None
    api_endpoint: str = ""  # "" → https://secretmanager.googleapis.com
    reader: NodeAccount | None = None  # the TPU VM's account, granted to read each key; None: nobody is

    def __post_init__(self) -> None:
        self._cache: dict[str, str] = {}  # lease id → key; a key never changes during its lease
        self._lock = threading.Lock()
        self._client: SecretManagerServiceClient | None = None

    # --- the lease's life -------------------------------------------------------------------
    async def create(self, lease_id: str) -> None:
        """Make (or, on a retried job, keep) the lease's key. Raises ModelKeyError."""
        await asyncio.to_thread(self._create, lease_id)

    async def key(self, lease_id: str) -> str | None:
        """The lease's key; None when it has none (a lease from before keys existed, or already destroyed)."""
        with self._lock:
            if lease_id in self._cache:
                return self._cache[lease_id]
        return await asyncio.to_thread(self._read, lease_id)

    async def destroy(self, lease_id: str) -> None:
        """Delete the secret and every version of it; already gone counts as done."""
        with self._lock:
            self._cache.pop(lease_id, None)
        await asyncio.to_thread(self._delete, lease_id)

    async def keyed_leases(self) -> list[KeySecret]:
        """Every lease that has a key secret in the project (the reconciler sweeps the orphans)."""
        return await asyncio.to_thread(self._list)

    # --- Secret Manager -----------------------------------------------------------------------
    def _secrets(self):
        from google.cloud import secretmanager_v1

        with self._lock:
            if self._client is None:
                options = {"api_endpoint": self.api_endpoint} if self.api_endpoint else None
                self._client = secretmanager_v1.SecretManagerServiceClient(
                    transport="rest", credentials=self.credentials, client_options=options)
            return self._client

    def _name(self, lease_id: str) -> str:
        return f"projects/{self.project}/secrets/{model_key_secret_id(lease_id)}"

    def _create(self, lease_id: str) -> None:
        client = self._secrets()
        try:
            try:
                client.create_secret(parent=f"projects/{self.project}", secret_id=model_key_secret_id(lease_id),
                                     secret={"replication": {"automatic": {}},
                                             "labels": {"managed-by": MANAGED_BY, "tpubot-lease": lease_id}},
                                     timeout=CALL_TIMEOUT)
            except gexc.Conflict:
                if self._read(lease_id) is not None:
                    self._let_the_vm_read(lease_id, fresh=False)  # a retried job: the key exists, its grant may not
                    return
            key = secrets.token_urlsafe(32)
            client.add_secret_version(parent=self._name(lease_id), payload={"data": key.encode()},
                                      timeout=CALL_TIMEOUT)
            self._let_the_vm_read(lease_id, fresh=True)
        except gexc.Forbidden as error:
            raise ModelKeyError(f"Secret Manager refused to store the model's API key: {error.message}",
                                "grant the bot's account roles/secretmanager.admin on the project (it creates and "
                                "deletes one secret per lease)") from error
        except _CALL_ERRORS as error:
            raise _call_failed("store the model's API key", error,
                               "check that the Secret Manager API is enabled "
                               "(`gcloud services enable secretmanager.googleapis.com`), then `/tpu up` again") from error
        with self._lock:
            self._cache[lease_id] = key

    def _let_the_vm_read(self, lease_id: str, *, fresh: bool) -> None:
        """Bind the TPU VM's account to secretAccessor on this lease's secret: a secret this call created has
        no policy yet, so the binding is the whole policy; else read, add, write back (with its etag).

        A write that loses a race to another writer of the policy (409: the etag moved) is redone from a
        fresh read, up to SET_POLICY_TRIES times. A 400 is the member: an account that does not exist."""
        if self.reader is None:
            return
        try:
            account = f"serviceAccount:{self.reader.email()}"
        except NodeAccountError as error:
            raise ModelKeyError(f"The bot could not tell which service account the TPU VM runs as, to let it read "
                                f"the model's API key: {error.message}", error.fix) from error
        client, name = self._secrets(), self._name(lease_id)
        try:
            for attempt in range(1, SET_POLICY_TRIES + 1):
                try:
                    self._bind(client, name, account, fresh=fresh and attempt == 1)
                    return
                except gexc.Conflict as error:
                    if attempt == SET_POLICY_TRIES:
                        raise ModelKeyError(
                            f"Secret Manager kept refusing the TPU VM's grant on the model's API key: its policy "
                            f"changed under each of {attempt} read-modify-writes ({error.message})",
                            "something else keeps rewriting the IAM policy of tpubot-model-key-* secrets (a "
                            "policy-enforcing tool?); stop it for these secrets, then `/tpu up` again") from error
                    time.sleep(SET_POLICY_BACKOFF_SECONDS * 2 ** (attempt - 1))  # Google: back off, then redo it all
        except gexc.Forbidden as error:
            raise ModelKeyError(f"Secret Manager refused to let the TPU VM's account ({account}) read the model's API "
                                f"key: {error.message}",
                                "grant the bot's account roles/secretmanager.admin on the project (it holds "
                                "secretmanager.secrets.setIamPolicy), then `/tpu up` again") from error
        except gexc.BadRequest as error:
            raise ModelKeyError(f"Secret Manager would not let the TPU VM's account ({account}) read the model's API "
                                f"key: {error.message}", self._bad_member_fix(account)) from error

    def _bind(self, client, name: str, account: str, *, fresh: bool) -> None:
        if fresh:
            client.set_iam_policy(request={"resource": name, "policy": {"bindings": [
                {"role": SECRET_ACCESSOR, "members": [account]}]}}, timeout=CALL_TIMEOUT)
            return
        policy = client.get_iam_policy(request={"resource": name}, timeout=CALL_TIMEOUT)
        for binding in policy.bindings:
            if binding.role == SECRET_ACCESSOR:
                if account in binding.members:
                    return  # already granted: writing it back could only lose a race
                binding.members.append(account)
                break
        else:
            policy.bindings.add(role=SECRET_ACCESSOR, members=[account])
        client.set_iam_policy(request={"resource": name, "policy": policy}, timeout=CALL_TIMEOUT)

    def _bad_member_fix(self, account: str) -> str:
        email = account.removeprefix("serviceAccount:")
        if self.reader is not None and self.reader.configured:
            return (f"TPU_SERVICE_ACCOUNT={email} must name an existing service account: create it (README, \"a "
                    f"dedicated account\") or fix the name (`gcloud iam service-accounts list --project "
                    f"{self.project}`)")
        return ("the project's default Compute Engine service account is created when the Compute Engine API is "
                f"enabled (`gcloud services enable compute.googleapis.com --project {self.project}`); if it was "
                "deleted, set TPU_SERVICE_ACCOUNT to a dedicated account (README)")

    def _read(self, lease_id: str) -> str | None:
        try:
            response = self._secrets().access_secret_version(name=f"{self._name(lease_id)}/versions/latest",
                                                             timeout=CALL_TIMEOUT)
        except gexc.NotFound:
            return None
        except _CALL_ERRORS as error:
            raise _call_failed("be asked for the model's API key", error,
                               "grant the bot's account roles/secretmanager.admin on the project") from error
        key = response.payload.data.decode()
        with self._lock:
            self._cache[lease_id] = key
        return key

    def _list(self) -> list[KeySecret]:
        try:
            pages = self._secrets().list_secrets(request={"parent": f"projects/{self.project}",
                                                          "filter": f"labels.managed-by={MANAGED_BY}"},
                                                 timeout=CALL_TIMEOUT)
            found = []
            for secret in pages:
                secret_id = secret.name.rsplit("/", 1)[-1]
                if secret_id.startswith(SECRET_PREFIX):
                    created = secret.create_time if isinstance(secret.create_time, datetime) else None
                    found.append(KeySecret(secret.labels.get("tpubot-lease") or secret_id[len(SECRET_PREFIX):], created))
            return found
        except gexc.Forbidden as error:
            raise ModelKeyError(f"Secret Manager refused to list the model keys: {error.message}",
                                "grant the bot's account roles/secretmanager.admin on the project") from error
        except _CALL_ERRORS as error:
            raise _call_failed("list the model keys", error, "check that the Secret Manager API is enabled") from error

    def _delete(self, lease_id: str) -> None:
        try:
            self._secrets().delete_secret(name=self._name(lease_id), timeout=CALL_TIMEOUT)
        except gexc.NotFound:
            pass

    def close(self) -> None:
        if self._client is not None:
            self._client.transport.close()
