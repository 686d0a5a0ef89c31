"""Who is asking, and may they: the sandbox project's IAM.

Google answers every API call as a principal, from the caller's OAuth token, and decides with the
allow policies on the project and on the resource (a secret, a bucket). The sandbox does the same,
for the emulators that check it (Secret Manager, Cloud Storage, Resource Manager):

- principals come from tokens: the metadata server of each sandbox TPU VM mints tokens for the
  VM's service account (`mint`); a request that carries none is the bot, as the sandbox's clients
  are anonymous (`DeploymentMode.credentials`) where a deployment's would carry the bot's own
  Application Default Credentials; a token nobody minted is refused (401);
- policies are Google's JSON (`bindings: [{role, members}]`, `etag`, `version`), on the project and
  per resource; a permission is allowed when a role holding it is bound to the principal (or to
  `allUsers`/`allAuthenticatedUsers`) on either;
- roles are the predefined roles the README names, with the permissions Google documents for them
  that these emulators check, and any custom role a test defines (`define_role`) (ROLE_PERMISSIONS; `roles/editor` does not hold
  `secretmanager.versions.access`, which is why the default Compute Engine account cannot read a
  secret until someone grants it).

Deny policies are emulated as far as `deny(member, permission, resource_prefix)` says: a denial
beats every grant, as Google's deny policies do. Not emulated: IAM conditions, groups and their
members, propagation delay.

Service accounts exist when the world says so: the bot's, the project's default Compute Engine
account, any account a grant names, and any `add_account` adds (the IAM API's create does). Each
has its own allow policy, resource `projects/P/serviceAccounts/EMAIL` (`account_resource`): a
`roles/iam.serviceAccountUser` grant there, or on the project, lets a principal act as it
(`iam.serviceAccounts.actAs`), what creating a TPU that runs as that account takes. A
setIamPolicy that names another `serviceAccount:` member is Google's 400 `Service account EMAIL does not exist.`; one whose etag is
not the current policy's is Google's 409 ABORTED. `contend(prefix, n)` makes the next n etag'd
setIamPolicy calls on matching resources lose a race to another writer (who adds a binding of its
own, a new one each time), as two administrators editing one policy do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

BOT = "bot"  # the principal of a request without a token

# Predefined roles and the permissions of theirs that the emulators check (Google's role reference).
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "roles/owner": frozenset({"*"}),
    # Editor holds most permissions, not the payload of a secret (secretmanager.versions.access).
    # It holds iam.serviceAccounts.actAs too: an Editor may run things as any account of the project.
    "roles/editor": frozenset({"storage.*", "artifactregistry.*", "logging.logEntries.create", "compute.*", "tpu.*",
                               "iam.serviceAccounts.actAs",
                               "resourcemanager.projects.get", "secretmanager.secrets.get",
                               "secretmanager.secrets.list", "secretmanager.secrets.create",
                               "secretmanager.secrets.delete", "secretmanager.versions.add"}),
    "roles/viewer": frozenset({"resourcemanager.projects.get", "resourcemanager.projects.getIamPolicy",
                               "secretmanager.secrets.get", "secretmanager.secrets.list", "storage.buckets.get",
                               "compute.networks.get", "compute.firewalls.list", "compute.routers.list",
                               "compute.routers.get", "compute.subnetworks.get", "cloudquotas.quotas.get"}),
    "roles/browser": frozenset({"resourcemanager.projects.get", "resourcemanager.projects.getIamPolicy"}),
    "roles/secretmanager.admin": frozenset({"secretmanager.*", "resourcemanager.projects.get"}),
    "roles/secretmanager.secretAccessor": frozenset({"secretmanager.versions.access"}),
    "roles/storage.admin": frozenset({"storage.*"}),
    "roles/storage.objectAdmin": frozenset({"storage.objects.*"}),
    "roles/storage.objectUser": frozenset({"storage.objects.get", "storage.objects.list", "storage.objects.create",
                                           "storage.objects.delete", "storage.objects.update"}),
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.objectCreator": frozenset({"storage.objects.create"}),
    "roles/storage.bucketViewer": frozenset({"storage.buckets.get", "storage.buckets.list"}),
    "roles/logging.logWriter": frozenset({"logging.logEntries.create"}),
    "roles/logging.viewer": frozenset({"logging.logEntries.list"}),
    "roles/tpu.admin": frozenset({"tpu.*", "resourcemanager.projects.get"}),
    "roles/cloudquotas.viewer": frozenset({"cloudquotas.quotas.get"}),
    "roles/compute.networkViewer": frozenset({"compute.networks.get", "compute.subnetworks.get",
                                              "compute.firewalls.list", "compute.routers.list",
                                              "compute.routers.get"}),
    "roles/artifactregistry.reader": frozenset({"artifactregistry.repositories.downloadArtifacts"}),
    "roles/iam.serviceAccountUser": frozenset({"iam.serviceAccounts.actAs"}),
    # Manages accounts and who may use them, without using them itself (no actAs).
    "roles/iam.serviceAccountAdmin": frozenset({f"iam.serviceAccounts.{verb}" for verb in (
        "create", "delete", "disable", "enable", "get", "getIamPolicy", "list", "setIamPolicy", "undelete",
        "update")}),
    "roles/iam.serviceAccountCreator": frozenset({"iam.serviceAccounts.create"}),
}
# The README's roles for the bot's own account (on the project).
BOT_ROLES = ("roles/tpu.admin", "roles/logging.viewer", "roles/cloudquotas.viewer", "roles/compute.networkViewer",
             "roles/storage.bucketViewer", "roles/secretmanager.admin")


def default_compute_account(project_number: int | str) -> str:
    """The project's default Compute Engine service account: what a TPU VM runs as unless told otherwise."""
    return f"{project_number}-compute@developer.gserviceaccount.com"


PUBLIC = ("allUsers", "allAuthenticatedUsers")  # the members that stand for everyone


def member(principal: str) -> str:
    """The policy member for a principal (`serviceAccount:EMAIL`); the bot is its own account's."""
    return principal if ":" in principal or principal in PUBLIC else f"serviceAccount:{principal}"


def granted(permission: str, held: Iterable[str]) -> bool:
    for pattern in held:
        if pattern == "*" or pattern == permission or (pattern.endswith(".*") and permission.startswith(pattern[:-1])):
            return True
    return False


@dataclass
class Policy:
    """One allow policy: role -> members (Google's `bindings`), with an etag that moves on every write."""

    bindings: dict[str, set[str]] = field(default_factory=dict)
    version: int = 1

    def etag(self) -> str:
        digest = hashlib.sha256(json.dumps(self.to_json_bindings(), sort_keys=True).encode()).digest()[:8]
        return base64.b64encode(digest).decode()

    def to_json_bindings(self) -> list[dict]:
        return [{"role": role, "members": sorted(members)} for role, members in sorted(self.bindings.items()) if members]

    def to_json(self) -> dict:
        body: dict = {"version": self.version, "etag": self.etag()}
        if self.bindings:
            body["bindings"] = self.to_json_bindings()
        return body

    @classmethod
    def from_json(cls, body: Mapping) -> Policy:
        bindings: dict[str, set[str]] = {}
        for binding in body.get("bindings") or []:
            bindings.setdefault(str(binding.get("role", "")), set()).update(str(m) for m in binding.get("members") or [])
        return cls(bindings, int(body.get("version") or 1))

    def roles_of(self, principals: Iterable[str]) -> set[str]:
        wanted = set(principals)
        return {role for role, members in self.bindings.items() if members & wanted}


class PolicyError(ValueError):
    """A setIamPolicy body Google would refuse (400 INVALID_ARGUMENT, or 409 ABORTED for a stale etag)."""

    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


class Iam:
    """The sandbox project's principals, tokens and allow policies (thread-safe)."""

    def __init__(self, project: str, project_number: int, *, bot_account: str = "",
                 project_bindings: Mapping[str, Iterable[str]] | None = None,
                 denied: Iterable[str] = (), bot_roles: Iterable[str] = BOT_ROLES) -> None:
        self.project = project
        self.project_number = project_number
        self.bot_account = bot_account or f"tpubot@{project}.iam.gserviceaccount.com"
        self.denied = set(denied)  # permissions the bot lacks whatever its roles say (a narrowed custom role)
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}
        self._denials: list[tuple[str, str, str]] = []  # (member, permission, resource prefix)
        bindings = {role: set(members) for role, members in (project_bindings or {}).items()}
        if project_bindings is None:
            for role in bot_roles:
                bindings.setdefault(role, set()).add(member(self.bot_account))
        self._policies: dict[str, Policy] = {self.project_resource: Policy(bindings)}
        self._accounts = {self.bot_account, default_compute_account(project_number)}
        self._accounts.update(who.removeprefix("serviceAccount:") for members in bindings.values() for who in members
                              if who.startswith("serviceAccount:"))
        self._contention: dict[str, int] = {}  # resource prefix -> setIamPolicy calls still to lose a race
        self._rival_writes = 0
        self._roles: dict[str, frozenset[str]] = dict(ROLE_PERMISSIONS)  # predefined, and the project's custom ones

    @property
    def project_resource(self) -> str:
        return f"projects/{self.project}"

    # --- who -------------------------------------------------------------------------------
    def mint(self, principal: str) -> str:
        """A fresh OAuth token for `principal` (what a VM's metadata server hands out)."""
        token = "ya29.sandbox-" + secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[token] = principal
        return token

    def principal(self, authorization: str) -> str | None:
        """Who an `Authorization` header is: BOT without one, the token's principal, None if unknown."""
        if not authorization:
            return BOT
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        with self._lock:
            return self._tokens.get(token.strip())

    def email(self, principal: str) -> str:
        return self.bot_account if principal == BOT else principal

    def define_role(self, name: str, permissions: Iterable[str]) -> None:
        """A custom role (`projects/P/roles/NAME`), as `gcloud iam roles create --permissions` makes one."""
        if not name.startswith((f"projects/{self.project}/roles/", "organizations/")):
            raise ValueError(f"a custom role is named projects/{self.project}/roles/NAME, not {name}")
        with self._lock:
            self._roles[name] = frozenset(permissions)

    def add_account(self, email: str) -> None:
        """A service account now exists (`gcloud iam service-accounts create`)."""
        with self._lock:
            self._accounts.add(email)

    def delete_account(self, email: str) -> None:
        """The account is gone (deleted; or, for the default Compute Engine account, the Compute Engine API was
        never enabled). Bindings that name it stay, as Google's do until it is purged."""
        with self._lock:
            self._accounts.discard(email)

    def account_resource(self, email: str) -> str:
        """The IAM resource of a service account of this project (its own allow policy lives there)."""
        return f"projects/{self.project}/serviceAccounts/{email}"

    def account_exists(self, email: str) -> bool:
        with self._lock:
            return email in self._accounts

    def contend(self, resource_prefix: str, times: int = 1) -> None:
        """The next `times` setIamPolicy calls that carry an etag, on resources starting with the prefix,
        find that another writer changed the policy since it was read."""
        with self._lock:
            self._contention[resource_prefix] = times

    # --- what ------------------------------------------------------------------------------
    def deny(self, who: str, permission: str, resource_prefix: str = "") -> None:
        """A deny rule: `who` (a member, e.g. `serviceAccount:X`) may not do `permission` on resources
        whose name starts with `resource_prefix`, whatever is granted."""
        with self._lock:
            self._denials.append((who, permission, resource_prefix))

    def allows(self, principal: str, permission: str, resource: str = "") -> bool:
        if principal == BOT and permission in self.denied:
            return False
        principals = {member(self.email(principal)), *PUBLIC}
        with self._lock:
            if any(who in principals and permission == denied and resource.startswith(prefix)
                   for who, denied, prefix in self._denials):
                return False
            policies = [self._policies.get(self.project_resource), self._policies.get(resource)]
            roles = set().union(*(p.roles_of(principals) for p in policies if p is not None))
            held = [self._roles.get(role, frozenset()) for role in roles]
        return any(granted(permission, permissions) for permissions in held)

    def policy(self, resource: str) -> Policy:
        with self._lock:
            found = self._policies.get(resource)
            return Policy({r: set(m) for r, m in found.bindings.items()}, found.version) if found else Policy()

    def set_policy(self, resource: str, body: Mapping) -> Policy:
        """setIamPolicy: the whole policy is replaced; an etag that is not the current one is refused."""
        new = Policy.from_json(body)
        unknown = sorted(role for role in new.bindings if role not in self._roles)
        if unknown:
            raise PolicyError(400, "INVALID_ARGUMENT", f"Role {unknown[0]} is not supported for this resource.")
        for role, members in new.bindings.items():
            for who in members:
                if ":" not in who and who not in PUBLIC:
                    raise PolicyError(400, "INVALID_ARGUMENT",
                                      f"Invalid member type in binding {{role: {role}, member: {who}}}.")
        with self._lock:
            current = self._policies.get(resource) or Policy()
            for role, members in new.bindings.items():
                for who in sorted(members - current.bindings.get(role, set())):
                    email = who.removeprefix("serviceAccount:")
                    if who.startswith("serviceAccount:") and email not in self._accounts:
                        raise PolicyError(400, "INVALID_ARGUMENT", f"Service account {email} does not exist.")
            prefix = next((p for p, n in self._contention.items() if n > 0 and resource.startswith(p)), None)
            if body.get("etag") and prefix is not None:
                self._contention[prefix] -= 1
                self._rival_writes += 1
                current.bindings.setdefault("roles/secretmanager.secretAccessor", set()).add(
                    f"user:admin-{self._rival_writes}@example.com")
                self._policies[resource] = current
            if body.get("etag") and body["etag"] != current.etag():
                raise PolicyError(409, "ABORTED", "There were concurrent policy changes. Please retry the whole "
                                                  "read-modify-write with exponential backoff.")
            self._policies[resource] = new
        return new

    def grant(self, resource: str, role: str, *principals: str) -> None:
        """Add a binding directly (how the sandbox world is set up; the APIs use set_policy)."""
        with self._lock:
            self._accounts.update(p.removeprefix("serviceAccount:") for p in principals
                                  if p.startswith("serviceAccount:") or ("@" in p and ":" not in p))
            policy = self._policies.setdefault(resource, Policy())
            policy.bindings.setdefault(role, set()).update(member(p) for p in principals)

    def forget(self, resource: str) -> None:
        with self._lock:
            self._policies.pop(resource, None)
