"""A local emulator of the project-level Google APIs that `tpubot doctor`, the bot and the startup script call.

One HTTP server, the wire formats of the real services, for the real clients only:

- Compute Engine v1 (`AuthorizedSession` GETs): `projects/P`, `projects/P/global/networks/N`,
  `projects/P/regions/R/subnetworks/S`; errors in Compute's shape (`error.errors[].reason`).
- Cloud Quotas v1 (`cloudquotas_v1.CloudQuotasClient(transport="rest")`): get and list QuotaInfo
  under `projects/P/locations/global/services/tpu.googleapis.com/quotaInfos` (reference §5).
- Compute Engine firewalls: `projects/P/global/firewalls` (list), what doctor's firewall check reads.
- Compute Engine routers: `projects/P/regions/R/routers` (list) and `…/routers/NAME` (get), with
  their Cloud NAT configs in `nats[]`: what doctor's internal-egress check reads.
- Cloud Storage JSON API: `storage/v1/b/BUCKET` (buckets.get) with the bucket's `location` and
  `locationType`; a missing bucket is Storage's 404 (`The specified bucket does not exist.`,
  `errors[].reason: notFound`), a denied `storage.buckets.get` its 403. Objects: list
  (`b/B/o?prefix=`), get (`b/B/o/OBJECT`, `?alt=media` for the bytes), simple media upload
  (`/upload/storage/v1/b/B/o?uploadType=media&name=N`); the bucket's IAM policy (`b/B/iam`, GET and
  PUT). What the startup script keeps vLLM's compile cache in.
- Cloud Resource Manager v1: `projects/P` (get: the project's number, what names the default
  Compute Engine account, and its folder or organization), `projects/P:getIamPolicy`,
  `:setIamPolicy` and `:testIamPermissions` (what the caller holds of the permissions it names).
- Secret Manager v1 (`secretmanager_v1.SecretManagerServiceClient(transport="rest")` and curl):
  `projects/P/secrets` (list, paged, with `labels.KEY=VALUE` / `name:TEXT` filters),
  `projects/P/secrets/S` (get, create with `?secretId=`, delete), `…:addVersion` and
  `…/versions/latest:access` → base64 payload with its CRC32C (§7); the per-lease model API keys
  live here.
- IAM (infra/sandbox/iam.py): every Secret Manager, Storage, Resource Manager, Cloud Quotas and
  Compute firewall/router call is decided for its caller — the token's principal (a sandbox TPU VM's
  service account, minted by its metadata server), or the bot for a request without a token — by
  the policies on the project and on the secret or bucket; a refusal is Google's 403 with an
  `IAM_PERMISSION_DENIED` ErrorInfo naming the permission (Storage: its own 403 wording). Secrets
  have `:getIamPolicy`/`:setIamPolicy`. `denied`: permissions the bot lacks whatever its roles.
- IAM v1 service accounts (what `gcloud iam service-accounts create` and `add-iam-policy-binding`
  call): `projects/P/serviceAccounts` (create, `accountId` 6-30 characters of
  `[a-z]([-a-z0-9]*[a-z0-9])`; a taken one is Google's 409 ALREADY_EXISTS `Service account
  ACCOUNT_ID already exists within project projects/P.`), `projects/P/serviceAccounts/EMAIL` (get; P may be
  `-`), `…:getIamPolicy` and `…:setIamPolicy` (the account's own policy, where
  `roles/iam.serviceAccountUser` lets someone act as it). Permissions: `iam.serviceAccounts.create`
  on the project, `get`/`getIamPolicy`/`setIamPolicy` on the account (or the project).
  `…:testIamPermissions` (what doctor asks before any `/tpu up`: may the bot `iam.serviceAccounts.actAs`
  TPU_SERVICE_ACCOUNT?) is iam.v1's `iam.projects.serviceAccounts.testIamPermissions` in the
  google-api-python-client 2.202.0 wheel (revision 20261023): `POST v1/{+resource}:testIamPermissions`,
  resource `projects/[^/]+/serviceAccounts/[^/]+`, body `TestIamPermissionsRequest {permissions[]}`, answer
  `TestIamPermissionsResponse {permissions[]}`, "a subset of … permissions that the caller is allowed"; the
  sandbox asks no permission of the caller (Resource Manager documents that for its own testIamPermissions;
  IAM's page names none). Not verified: what IAM answers for an account that does not exist. The
  sandbox answers an empty set, as iam.v1 documents for its workforce pools' testIamPermissions ("If the
  pool doesn't exist, this call returns an empty set of permissions. It doesn't return a `NOT_FOUND`
  error.") and most Google APIs for theirs; the document says nothing of it for service accounts.

Every request is checked against Google's discovery documents (Compute, Secret Manager, Storage, IAM) or the
google-cloud-quotas protos (Cloud Quotas) by `infra.sandbox.discovery`; an unknown field or
parameter gets the real 400 INVALID_ARGUMENT.

The metadata server is not here: each sandbox TPU VM has its own (infra/sandbox/metadata_server.py),
minting tokens for its service account from the same `Iam`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from datetime import datetime, timezone
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

from infra.gcs_location import DUAL_REGIONS
from infra.preflight import PREEMPTIBLE_QUOTA_IDS, QUOTA_SERVICE  # noqa: F401  (the ids Google uses)
from infra.sandbox.http_server import LazyServed, handler_class, read_body, reply
from infra.sandbox.discovery import DiscoveryApi, RequestRejected, held_to_schema, load_api, proto_api
from infra.sandbox.google_errors import error_body, error_info, legacy_error, resource_info
from infra.sandbox.iam import BOT, Iam, PolicyError

_COMPUTE = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)(?:/(?P<rest>.*))?$")
_BUCKET = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)(?P<iam>/iam)?$")
_OBJECTS = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o(?:/(?P<object>[^/]+))?$")
_UPLOAD = re.compile(r"^/upload(?P<path>/storage/v1/b/(?P<bucket>[^/]+)/o)$")
_PROJECT = re.compile(r"^/v1/projects/(?P<project>[^/:]+)(?::(?P<verb>getIamPolicy|setIamPolicy|testIamPermissions))?$")
_QUOTAS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/locations/global/services/(?P<service>[^/]+)"
                     r"/quotaInfos(?:/(?P<quota>[^/]+))?$")
_SECRET = re.compile(r"^/v1/projects/(?P<project>[^/]+)/secrets/(?P<secret>[^/:]+)"
                     r"(?:/versions/(?P<version>[^/:]+):access|(?P<add>:addVersion)|:(?P<iam>getIamPolicy|setIamPolicy))?$")
SEEDED_CREATE_TIME = "2026-01-01T00:00:00Z"
SEEDED_TIME_MS = "2026-01-01T00:00:00.000Z"
_SECRETS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/secrets$")
_ACCOUNTS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/serviceAccounts(?:/(?P<account>[^/:]+)"
                       r"(?::(?P<verb>getIamPolicy|setIamPolicy|testIamPermissions))?)?$")
_ACCOUNT_ID = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])")


class GcpProjectSandbox(LazyServed):
    _what = "GCP project sandbox"

    def __init__(
        self,
        project: str = "tpubot-sandbox",
        *,
        networks: Iterable[str] = ("default",),
        subnetworks: Mapping[str, Iterable[str]] | None = None,  # region -> names
        quotas: Mapping[str, Mapping[str, int]] | None = None,  # quota id -> zone -> limit
        secrets_: Mapping[str, str] | None = None,  # secret name -> latest payload
        firewalls: Iterable[Mapping[str, Any]] = (),  # Compute Firewall resources (JSON)
        routers: Iterable[Mapping[str, Any]] = (),  # Compute Router resources (JSON; region and network by name)
        buckets: Mapping[str, str] | None = None,  # Cloud Storage bucket -> location, e.g. "US-WEST4", "US"
        denied: Iterable[str] = (),  # IAM permissions the bot does not have, whatever its roles
        project_number: int = 123456789012,
        iam: Iam | None = None,  # who may do what; None: the bot with the README's roles, nobody else
        private_google_access: bool = True,  # every subnetwork's privateIpGoogleAccess
        parent: str = "",  # "folders/ID" or "organizations/ID": where grants the project inherits live
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.project = project
        self.project_number = project_number
        self.networks = set(networks)
        self.subnetworks = {region: set(names) for region, names in (subnetworks or {}).items()}
        self.quotas = {qid: dict(zones) for qid, zones in (quotas or {}).items()}
        self.secrets: dict[str, str | None] = dict(secrets_ or {})  # None: created, no version yet
        self.secret_labels: dict[str, dict[str, str]] = {}
        self.secret_created: dict[str, str] = {}  # secret -> createTime; seeded secrets have SEEDED_CREATE_TIME
        self.firewalls = [dict(rule) for rule in firewalls]
        self.routers = [dict(router) for router in routers]
        self.buckets = dict(buckets or {})
        self.private_google_access = private_google_access
        self.parent = parent
        self.objects: dict[str, dict[str, bytes]] = {bucket: {} for bucket in self.buckets}  # bucket -> name -> bytes
        self.account_fields: dict[str, dict[str, str]] = {}  # email -> displayName/description given at create
        self.iam = iam or Iam(project, project_number, denied=denied)
        self.apis: dict[str, DiscoveryApi | None] = {
            "compute": load_api("compute.v1", "google.cloud.compute.v1"),
            "secretmanager": load_api("secretmanager.v1", "google.cloud.secretmanager.v1"),
            "storage": load_api("storage.v1", "google.storage.v1"),
            "resourcemanager": load_api("cloudresourcemanager.v1", "google.cloudresourcemanager.v1"),
            "iam": load_api("iam.v1", "google.iam.admin.v1"),
            "quotas": _quotas_api(),
        }
        self.rejected: list[RequestRejected] = []
        self.response_problems: list[str] = []
        # (method, path, caller): every request and who made it (the bot, or a VM's service account)
        self.requests: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._address = (host, port)
        self._http = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return handler_class(self._serve_http)

    def _serve_http(self, http: BaseHTTPRequestHandler) -> None:
        raw = read_body(http)
        headers = {key.lower(): value for key, value in http.headers.items()}
        if _UPLOAD.match(urlsplit(http.path).path):
            status, payload = self.handle(http.command, http.path, headers, raw)
        else:
            try:
                body = json.loads(raw) if raw.strip() else None
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                status, payload = _google_error(400, f"Invalid JSON payload received. {exc}")
            else:
                status, payload = self.handle(http.command, http.path, headers, body)
        media = isinstance(payload, bytes)
        reply(http, status, payload if media else json.dumps(payload).encode(),
              "application/octet-stream" if media else "application/json; charset=UTF-8")

    @property
    def denied(self) -> set[str]:
        return self.iam.denied

    # --- request handling -------------------------------------------------------------------
    @property
    def strict(self) -> bool:
        return all(api is not None for api in self.apis.values())

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str], body: Any = None) -> tuple[int, Any]:
        """(status, JSON body or raw bytes) for one request; `body` is parsed JSON, or bytes for a media upload."""
        url = urlsplit(raw_path)
        query = parse_qs(url.query, keep_blank_values=True)
        principal = self.iam.principal(headers.get("authorization", ""))
        with self._lock:
            self.requests.append((method, url.path, self.iam.email(principal) if principal else "?"))
        if principal is None:
            return _google_error(401, "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                                      "login cookie or other valid authentication credential. See https://developers."
                                      "google.com/identity/sign-in/web/devconsole-project.", "UNAUTHENTICATED")
        upload = _UPLOAD.match(url.path)
        api_name = _api_of(url.path)

        def refusal(rejected: RequestRejected) -> dict:
            if api_name in ("compute", "storage"):  # both add their legacy errors[] list
                return _with_errors((400, rejected.google_error()), "invalid")[1]
            return rejected.google_error()

        # A media upload is objects.insert with its bytes as the body: the query is what is checked.
        request = (method, upload["path"], query, None) if upload else (method, url.path, query, body)
        answer = partial(self._route, method, url.path, query, principal, body)
        return held_to_schema(self.apis[api_name], request, answer, self.rejected, self.response_problems,
                              "gcp project", refusal)

    def _route(self, method: str, path: str, query: dict, principal: str, body: Any) -> tuple[int, Any]:
        unsupported = _google_error(405, f"Method {method} is not supported by the sandbox on {path}.")
        if match := _COMPUTE.match(path):
            rest = match["rest"] or ""
            return self._compute(match["project"], rest, query, principal) if method == "GET" else unsupported
        if match := _UPLOAD.match(path):
            data = body if isinstance(body, bytes) else b""
            return self._upload(match["bucket"], query, principal, data) if method == "POST" else unsupported
        if match := _OBJECTS.match(path):
            return self._object(match["bucket"], match["object"], query, principal) if method == "GET" else unsupported
        if match := _BUCKET.match(path):
            if match["iam"]:
                return self._bucket_iam(method, match["bucket"], principal, body or {})
            return self._bucket(match["bucket"], principal) if method == "GET" else unsupported
        if match := _QUOTAS.match(path):
            if denied := self._deny("cloudquotas.quotas.get", f"projects/{match['project']}", principal):
                return denied
            return self._quotas(match["project"], match["service"], match["quota"], query)
        if match := _ACCOUNTS.match(path):
            return self._service_accounts(method, match["project"], match["account"], match["verb"], principal,
                                          body or {})
        if match := _PROJECT.match(path):
            return self._project(method, match["project"], match["verb"], principal, body or {})
        if match := _SECRETS.match(path):
            if method == "POST":
                return self._create_secret(match["project"], (query.get("secretId") or [""])[0], body or {}, principal)
            if method == "GET":
                return self._list_secrets(match["project"], query, principal)
        if match := _SECRET.match(path):
            if match["iam"]:
                return self._secret_iam(method, match["project"], match["secret"], match["iam"], principal, body or {})
            if method == "POST" and match["add"]:
                return self._add_version(match["project"], match["secret"], body or {}, principal)
            if method == "DELETE" and not match["version"] and not match["add"]:
                return self._delete_secret(match["project"], match["secret"], principal)
            if method == "GET" and not match["add"]:
                return self._secret(match["project"], match["secret"], match["version"], principal)
        return _google_error(404, f"The requested URL {path} was not found on this server.")

    def _deny(self, permission: str, resource: str, principal: str = BOT) -> tuple[int, dict] | None:
        """Google's 403 when `principal` may not do `permission` on `resource` (a project or a secret)."""
        if self.iam.allows(principal, permission, resource):
            return None
        service = permission.split(".", 1)[0]
        message = f"Permission '{permission}' denied on resource '//{service}.googleapis.com/{resource}' (or it may " \
                  "not exist)."
        return 403, error_body(403, message, details=[error_info("IAM_PERMISSION_DENIED", f"{service}.googleapis.com",
                                                                 permission=permission, resource=resource)])

    def _ours(self, project: str) -> bool:
        """A request may name the project by id or by number."""
        return project in (self.project, str(self.project_number))

    def _secret_resource(self, secret: str) -> str:
        """The IAM resource of a secret, by project id (a request may name the project by number)."""
        return f"projects/{self.project}/secrets/{secret}"

    def _create_secret(self, project: str, secret_id: str, body: dict, principal: str) -> tuple[int, dict]:
        if denied := self._deny("secretmanager.secrets.create", f"projects/{project}", principal):
            return denied
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,255}", secret_id):
            return _google_error(400, f"Invalid secret id [{secret_id}]: it must match [a-zA-Z_0-9-]{{1,255}}.")
        with self._lock:
            if secret_id in self.secrets:
                return _google_error(409, f"Secret [projects/{self.project_number}/secrets/{secret_id}] already "
                                          "exists.")
            self.secrets[secret_id] = None
            self.secret_labels[secret_id] = dict(body.get("labels") or {})
            self.secret_created[secret_id] = _now_rfc3339()
        self.iam.forget(self._secret_resource(secret_id))  # a new secret starts with no policy of its own
        return 200, self._secret_json(secret_id)

    def _list_secrets(self, project: str, query: dict, principal: str) -> tuple[int, dict]:
        """ListSecrets: sorted by name, paged with pageSize (capped at 25,000; 0 lets the server
        choose) and an opaque pageToken. Of the filter language only `labels.KEY=VALUE` and
        `name:TEXT` terms joined by AND are emulated; any other filter is refused, naming it."""
        if denied := self._deny("secretmanager.secrets.list", f"projects/{project}", principal):
            return denied
        terms = [t for t in re.split(r"\s+AND\s+", (query.get("filter") or [""])[0].strip()) if t]
        tests: list[Callable[..., bool]] = []  # each called with a secret id (its defaults bind the term)
        for term in terms:
            if label := re.fullmatch(r"labels\.([a-z][\w-]*)\s*[=:]\s*\"?([\w-]*)\"?", term):
                tests.append(lambda sid, k=label[1], v=label[2]: self.secret_labels.get(sid, {}).get(k) == v)
            elif name := re.fullmatch(r"name\s*:\s*\"?([\w-]+)\"?", term):
                tests.append(lambda sid, text=name[1]: text in sid)
            else:
                return _google_error(400, f"The tpubot sandbox does not emulate the filter term [{term}] "
                                          "(only labels.KEY=VALUE and name:TEXT, joined by AND).")
        size = int((query.get("pageSize") or ["0"])[0] or 0)
        size = 25_000 if size <= 0 else min(size, 25_000)
        start = int((query.get("pageToken") or ["0"])[0] or 0)
        with self._lock:
            matching = sorted(sid for sid in self.secrets if all(test(sid) for test in tests))
        page = matching[start:start + size]
        body: dict[str, Any] = {"secrets": [self._secret_json(sid) for sid in page], "totalSize": len(matching)}
        if start + size < len(matching):
            body["nextPageToken"] = str(start + size)
        if not page:
            body.pop("secrets")  # proto3 JSON leaves an empty repeated field out
        return 200, body

    def _add_version(self, project: str, secret: str, body: dict, principal: str) -> tuple[int, dict]:
        if denied := self._deny("secretmanager.versions.add", self._secret_resource(secret), principal):
            return denied
        payload = body.get("payload") or {}
        data = base64.b64decode(payload.get("data") or "")
        if "dataCrc32c" in payload and int(payload["dataCrc32c"]) != crc32c(data):
            return _google_error(400, "Checksum mismatch: the payload's dataCrc32c does not match its data.")
        with self._lock:
            if secret not in self.secrets:
                return self._no_secret(secret)
            self.secrets[secret] = data.decode()
        return 200, {"name": f"projects/{self.project_number}/secrets/{secret}/versions/1",
                     "createTime": "2026-01-01T00:00:00Z", "state": "ENABLED"}

    def _delete_secret(self, project: str, secret: str, principal: str) -> tuple[int, dict]:
        if denied := self._deny("secretmanager.secrets.delete", self._secret_resource(secret), principal):
            return denied
        with self._lock:
            if self.secrets.pop(secret, "missing") == "missing":
                return self._no_secret(secret)
            self.secret_labels.pop(secret, None)
            self.secret_created.pop(secret, None)
        self.iam.forget(self._secret_resource(secret))
        return 200, {}

    def _no_secret(self, secret: str) -> tuple[int, dict]:
        return _google_error(404, f"Secret [projects/{self.project_number}/secrets/{secret}] not found.")

    def _secret_json(self, secret: str) -> dict:
        body = {"name": f"projects/{self.project_number}/secrets/{secret}", "replication": {"automatic": {}},
                "createTime": self.secret_created.get(secret, SEEDED_CREATE_TIME)}
        if self.secret_labels.get(secret):
            body["labels"] = dict(self.secret_labels[secret])
        return body

    def _secret_iam(self, method: str, project: str, secret: str, verb: str, principal: str,
                    body: dict) -> tuple[int, dict]:
        """`:getIamPolicy` (GET) and `:setIamPolicy` (POST {policy}) of one secret."""
        resource = self._secret_resource(secret)
        if (method, verb) not in (("GET", "getIamPolicy"), ("POST", "setIamPolicy")):
            return _google_error(405, f"Method {method} is not supported on :{verb}.")
        if denied := self._deny(f"secretmanager.secrets.{verb}", resource, principal):
            return denied
        with self._lock:
            if secret not in self.secrets:
                return self._no_secret(secret)
        return self._policy(verb, resource, body)

    def _held(self, principal: str, resource: str, body: dict, exists: bool = True) -> tuple[int, dict]:
        """testIamPermissions: anyone may ask; the answer is the subset of the asked permissions the caller
        holds on `resource` (an empty subset is an empty message: no `permissions` at all), none on a
        resource that does not exist. No wildcards."""
        asked = [str(p) for p in body.get("permissions") or []]
        if bad := next((p for p in asked if "*" in p or p.count(".") < 2), None):
            return _google_error(400, f"Permission {bad} is not valid for this resource.")
        held = [p for p in asked if exists and self.iam.allows(principal, p, resource)]
        return 200, {"permissions": held} if held else {}

    def _policy(self, verb: str, resource: str, body: dict) -> tuple[int, dict]:
        """getIamPolicy or setIamPolicy on a resource, once the caller may."""
        if verb == "getIamPolicy":
            return 200, self.iam.policy(resource).to_json()
        try:
            return 200, self.iam.set_policy(resource, body.get("policy") or {}).to_json()
        except PolicyError as error:
            return _google_error(error.code, error.message, error.status)

    # --- IAM service accounts -----------------------------------------------------------------
    def _service_accounts(self, method: str, project: str, account: str | None, verb: str | None, principal: str,
                          body: dict) -> tuple[int, dict]:
        from urllib.parse import unquote

        if not self._ours(project) and project != "-":
            return _google_error(403, f"Permission 'iam.serviceAccounts.{'create' if account is None else 'get'}' "
                                      f"denied on resource (or it may not exist).")
        if account is None:
            if method != "POST":
                return _google_error(405, f"Method {method} is not supported by the sandbox on serviceAccounts.")
            return self._create_account(body, principal)
        email = unquote(account)
        resource = self.iam.account_resource(email)
        if verb == "testIamPermissions":
            if method != "POST":
                return _google_error(405, f"Method {method} is not supported on :{verb}.")
            return self._held(principal, resource, body, exists=self.iam.account_exists(email))
        permission = f"iam.serviceAccounts.{verb or 'get'}"
        if (method, verb) not in (("GET", None), ("POST", "getIamPolicy"), ("POST", "setIamPolicy")):
            return _google_error(405, f"Method {method} is not supported on serviceAccounts/{email}.")
        if not self.iam.allows(principal, permission, resource):
            # IAM's own wording: the resource is not named, as it may not exist.
            return 403, error_body(403, f"Permission '{permission}' denied on resource (or it may not exist).",
                                   details=[error_info("IAM_PERMISSION_DENIED", "iam.googleapis.com",
                                                       permission=permission)])
        if not self.iam.account_exists(email):
            return _google_error(404, "Unknown service account")
        if verb is None:
            return 200, self._account_json(email)
        return self._policy(verb, resource, body)

    def _create_account(self, body: dict, principal: str) -> tuple[int, dict]:
        if denied := self._deny("iam.serviceAccounts.create", f"projects/{self.project}", principal):
            return denied
        account_id = str(body.get("accountId") or "")
        if not (6 <= len(account_id) <= 30 and _ACCOUNT_ID.fullmatch(account_id)):
            return _google_error(400, f"Invalid account id [{account_id}]: it must be 6-30 characters long and match "
                                      f"{_ACCOUNT_ID.pattern}.")
        email = f"{account_id}@{self.project}.iam.gserviceaccount.com"
        with self._lock:
            if self.iam.account_exists(email):
                message = f"Service account {account_id} already exists within project projects/{self.project}."
                return 409, error_body(409, message, details=[resource_info(self.iam.account_resource(email))])
            given = body.get("serviceAccount") or {}
            self.account_fields[email] = {k: str(given[k]) for k in ("displayName", "description") if given.get(k)}
            self.iam.add_account(email)
        self.iam.forget(self.iam.account_resource(email))  # a new account starts with no policy of its own
        return 200, self._account_json(email)

    def _account_json(self, email: str) -> dict:
        unique_id = str(100_000_000_000_000_000_000 + int(hashlib.sha256(email.encode()).hexdigest()[:12], 16))
        return {"name": self.iam.account_resource(email), "projectId": self.project, "uniqueId": unique_id,
                "email": email, "etag": "MDEwMjE5MjA=", "oauth2ClientId": unique_id,
                **self.account_fields.get(email, {})}

    def _project(self, method: str, project: str, verb: str | None, principal: str, body: dict) -> tuple[int, dict]:
        """Resource Manager v1: projects.get, :getIamPolicy, :setIamPolicy."""
        if not self._ours(project):
            return 403, {"error": {"code": 403, "message": "The caller does not have permission",
                                   "status": "PERMISSION_DENIED"}}
        if verb is None:
            if method != "GET":
                return _google_error(405, f"Method {method} is not supported on projects/{project}.")
            if denied := self._deny("resourcemanager.projects.get", f"projects/{self.project}", principal):
                return denied
            body = {"projectNumber": str(self.project_number), "projectId": self.project,
                    "lifecycleState": "ACTIVE", "name": self.project, "createTime": SEEDED_CREATE_TIME}
            if self.parent:
                kind, _, parent_id = self.parent.partition("/")
                body["parent"] = {"type": kind.removesuffix("s"), "id": parent_id}
            return 200, body
        if method != "POST":
            return _google_error(405, f"Method {method} is not supported on :{verb}.")
        if verb == "testIamPermissions":
            return self._held(principal, f"projects/{self.project}", body)
        if denied := self._deny(f"resourcemanager.projects.{verb}", f"projects/{self.project}", principal):
            return denied
        return self._policy(verb, self.iam.project_resource, body)

    def _compute(self, project: str, rest: str, query: dict, principal: str) -> tuple[int, dict]:
        if rest == "global/firewalls":
            if denied := self._deny("compute.firewalls.list", f"projects/{project}", principal):
                return _with_errors(denied, "forbidden")
        if project != self.project:
            return _legacy_error(404, f"The resource 'projects/{project}' was not found", "notFound")
        if not rest:
            return 200, {"kind": "compute#project", "id": str(self.project_number), "name": project,
                         "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}"}
        if match := re.fullmatch(r"global/networks/([^/]+)", rest):
            name = match[1]
            if name not in self.networks:
                return _legacy_error(404, f"The resource 'projects/{project}/global/networks/{name}' was not found",
                                      "notFound")
            return 200, {"kind": "compute#network", "name": name, "autoCreateSubnetworks": True,
                         "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/global/networks/{name}"}
        if match := re.fullmatch(r"regions/([^/]+)/subnetworks/([^/]+)", rest):
            region, name = match[1], match[2]
            # An auto-mode network has a subnetwork named after it in every region.
            if name not in self.subnetworks.get(region, set()) and name not in self.networks:
                return _legacy_error(404, f"The resource 'projects/{project}/regions/{region}/subnetworks/{name}' "
                                           "was not found", "notFound")
            network = name if name in self.networks else "default"
            return 200, {"kind": "compute#subnetwork", "name": name, "region": region,
                         "network": f"https://www.googleapis.com/compute/v1/projects/{project}/global/networks/{network}",
                         "privateIpGoogleAccess": self.private_google_access}
        if match := re.fullmatch(r"regions/([^/]+)/routers(?:/([^/]+))?", rest):
            return self._routers(project, match[1], match[2], principal)
        if rest == "global/firewalls":
            return 200, {"kind": "compute#firewallList", "id": f"projects/{project}/global/firewalls",
                         "items": [self._firewall_json(project, rule) for rule in self.firewalls],
                         "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/global/firewalls"}
        return _legacy_error(404, f"The resource 'projects/{project}/{rest}' was not found", "notFound")

    def _routers(self, project: str, region: str, router: str | None, principal: str) -> tuple[int, dict]:
        if denied := self._deny("compute.routers.get" if router else "compute.routers.list", f"projects/{project}",
                                principal):
            return _with_errors(denied, "forbidden")
        base = f"https://www.googleapis.com/compute/v1/projects/{project}/regions/{region}/routers"
        found = [self._router_json(project, index, r) for index, r in enumerate(self.routers)
                 if r.get("region") == region]
        if router is not None:
            match = next((r for r in found if r["name"] == router), None)
            if match is None:
                return _legacy_error(404, f"The resource 'projects/{project}/regions/{region}/routers/{router}' "
                                           "was not found", "notFound")
            return 200, match
        body: dict[str, Any] = {"kind": "compute#routerList", "id": f"projects/{project}/regions/{region}/routers",
                                "selfLink": base}
        if found:
            body["items"] = found  # Compute leaves an empty list out
        return 200, body

    def _router_json(self, project: str, index: int, router: Mapping[str, Any]) -> dict:
        base = f"https://www.googleapis.com/compute/v1/projects/{project}"
        region = router["region"]
        network = str(router.get("network") or "default").rsplit("/", 1)[-1]
        return {"kind": "compute#router", "id": str(7_000_000_000_000_000_000 + index),
                "creationTimestamp": "2026-01-01T00:00:00.000-08:00", **router,
                "region": f"{base}/regions/{region}", "network": f"{base}/global/networks/{network}",
                "selfLink": f"{base}/regions/{region}/routers/{router['name']}"}

    def _storage_denied(self, permission: str, bucket: str, principal: str, what: str) -> tuple[int, dict] | None:
        """Storage's own 403: `EMAIL does not have PERMISSION access to the Google Cloud Storage THING.`"""
        if self.iam.allows(principal, permission, f"projects/_/buckets/{bucket}"):
            return None
        message = (f"{self.iam.email(principal)} does not have {permission} access to the Google Cloud Storage "
                   f"{what}. Permission '{permission}' denied on resource (or it may not exist).")
        return _legacy_error(403, message, "forbidden")

    def _bucket(self, bucket: str, principal: str) -> tuple[int, dict]:
        if denied := self._storage_denied("storage.buckets.get", bucket, principal, "bucket"):
            return denied
        location = self.buckets.get(bucket)
        if location is None:
            return _legacy_error(404, "The specified bucket does not exist.", "notFound")
        kind = _LOCATION_TYPES.get(location.upper(), "region")
        return 200, {"kind": "storage#bucket", "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}",
                     "id": bucket, "name": bucket, "projectNumber": str(self.project_number), "metageneration": "1",
                     "location": location.upper(), "locationType": kind, "storageClass": "STANDARD", "etag": "CAE=",
                     "timeCreated": "2026-01-01T00:00:00.000Z", "updated": "2026-01-01T00:00:00.000Z",
                     "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}, "rpo": "DEFAULT"}

    def _object_json(self, bucket: str, name: str, data: bytes) -> dict:
        from urllib.parse import quote

        encoded = quote(name, safe="")
        link = f"https://www.googleapis.com/storage/v1/b/{bucket}/o/{encoded}"
        return {"kind": "storage#object", "id": f"{bucket}/{name}/1", "selfLink": link,
                "mediaLink": f"https://storage.googleapis.com/download/storage/v1/b/{bucket}/o/{encoded}?generation=1&alt=media",
                "name": name, "bucket": bucket, "generation": "1", "metageneration": "1",
                "contentType": "application/x-tar", "storageClass": "STANDARD", "size": str(len(data)),
                "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(),  # noqa: S324 - Storage's own field
                "crc32c": base64.b64encode(crc32c(data).to_bytes(4, "big")).decode(), "etag": "CAE=",
                "timeCreated": SEEDED_TIME_MS, "updated": SEEDED_TIME_MS, "timeStorageClassUpdated": SEEDED_TIME_MS}

    def _object(self, bucket: str, name: str | None, query: dict, principal: str) -> tuple[int, Any]:
        """objects.get (metadata, or the bytes with alt=media) and objects.list (with prefix)."""
        from urllib.parse import unquote

        if bucket not in self.buckets:
            return _legacy_error(404, "The specified bucket does not exist.", "notFound")
        if name is None:
            if denied := self._storage_denied("storage.objects.list", bucket, principal, "bucket"):
                return denied
            prefix = (query.get("prefix") or [""])[0]
            with self._lock:
                items = [self._object_json(bucket, n, d) for n, d in sorted(self.objects[bucket].items())
                         if n.startswith(prefix)]
            return 200, {"kind": "storage#objects", **({"items": items} if items else {})}
        name = unquote(name)
        if denied := self._storage_denied("storage.objects.get", bucket, principal, "object"):
            return denied
        with self._lock:
            data = self.objects[bucket].get(name)
        if data is None:
            return _legacy_error(404, f"No such object: {bucket}/{name}", "notFound")
        return (200, data) if (query.get("alt") or ["json"])[0] == "media" else (200, self._object_json(bucket, name, data))

    def _upload(self, bucket: str, query: dict, principal: str, data: bytes) -> tuple[int, dict]:
        """objects.insert, simple media upload: `?uploadType=media&name=NAME`, the bytes as the body."""
        if bucket not in self.buckets:
            return _legacy_error(404, "The specified bucket does not exist.", "notFound")
        if (query.get("uploadType") or [""])[0] != "media":
            return _legacy_error(400, "Upload requests must include an uploadType URL parameter and a URL path "
                                       "beginning with /upload/", "invalid")
        name = (query.get("name") or [""])[0]
        if not name:
            return _legacy_error(400, "Required", "required")
        if denied := self._storage_denied("storage.objects.create", bucket, principal, "object"):
            return denied
        with self._lock:
            self.objects[bucket][name] = data
        return 200, self._object_json(bucket, name, data)

    def _bucket_iam(self, method: str, bucket: str, principal: str, body: dict) -> tuple[int, dict]:
        """buckets.getIamPolicy (GET b/B/iam) and buckets.setIamPolicy (PUT b/B/iam, the policy as the body)."""
        if bucket not in self.buckets:
            return _legacy_error(404, "The specified bucket does not exist.", "notFound")
        permission = {"GET": "storage.buckets.getIamPolicy", "PUT": "storage.buckets.setIamPolicy"}.get(method)
        if permission is None:
            return _google_error(405, f"Method {method} is not supported on b/{bucket}/iam.")
        if denied := self._storage_denied(permission, bucket, principal, "bucket"):
            return denied
        resource = f"projects/_/buckets/{bucket}"
        try:
            policy = self.iam.policy(resource) if method == "GET" else self.iam.set_policy(resource, body)
        except PolicyError as error:
            return _legacy_error(error.code, error.message, "invalid" if error.code == 400 else "conflict")
        return 200, {"kind": "storage#policy", "resourceId": resource, **policy.to_json()}

    def _firewall_json(self, project: str, rule: Mapping[str, Any]) -> dict:
        base = f"https://www.googleapis.com/compute/v1/projects/{project}/global"
        view = {"kind": "compute#firewall", "direction": "INGRESS", "priority": 1000, "disabled": False, **rule}
        view["network"] = f"{base}/networks/{str(view.get('network') or 'default').rsplit('/', 1)[-1]}"
        view["selfLink"] = f"{base}/firewalls/{view['name']}"
        return view

    def _quota_info(self, project: str, service: str, quota_id: str) -> dict:
        zones = self.quotas[quota_id]
        return {
            "name": f"projects/{project}/locations/global/services/{service}/quotaInfos/{quota_id}",
            "quotaId": quota_id, "metric": f"{service}/{quota_id.lower()}", "service": service,
            "isPrecise": True, "containerType": "PROJECT", "dimensions": ["zone"],
            "metricDisplayName": quota_id, "quotaDisplayName": quota_id, "metricUnit": "1",
            "quotaIncreaseEligibility": {"isEligible": True},
            "dimensionsInfos": [{"dimensions": {"zone": zone}, "details": {"value": str(limit)},
                                 "applicableLocations": [zone]} for zone, limit in sorted(zones.items())],
        }

    def _quotas(self, project: str, service: str, quota_id: str | None, query: dict) -> tuple[int, dict]:
        if not self._ours(project):
            return _google_error(403, f"Permission 'cloudquotas.quotas.get' denied on resource "
                                      f"'//cloudquotas.googleapis.com/projects/{project}' (or it may not exist).")
        if quota_id is None:
            ids = sorted(self.quotas) if service == QUOTA_SERVICE else []
            return 200, {"quotaInfos": [self._quota_info(project, service, qid) for qid in ids]}
        if service != QUOTA_SERVICE or quota_id not in self.quotas:
            return _google_error(404, f"QuotaInfo 'projects/{project}/locations/global/services/{service}/"
                                      f"quotaInfos/{quota_id}' not found.")
        return 200, self._quota_info(project, service, quota_id)

    def _secret(self, project: str, secret: str, version: str | None, principal: str) -> tuple[int, dict]:
        permission = "secretmanager.versions.access" if version else "secretmanager.secrets.get"
        resource = f"projects/{project}/secrets/{secret}" + (f"/versions/{version}" if version else "")
        if not self.iam.allows(principal, permission, self._secret_resource(secret)):
            # Secret Manager's wording for a refused access (the ErrorInfo names the permission).
            _, body = self._deny(permission, resource, principal) or (403, {})
            body["error"]["message"] = (f"Permission '{permission}' denied for resource '{resource}' (or it may not "
                                        "exist).")
            return 403, body
        if not self._ours(project) or secret not in self.secrets:
            return _google_error(404, f"Secret [projects/{self.project_number}/secrets/{secret}] not found or has "
                                      "no versions.")
        name = f"projects/{self.project_number}/secrets/{secret}"
        if version is None:
            return 200, self._secret_json(secret)
        value = self.secrets[secret]
        if version not in ("latest", "1") or value is None:
            return _google_error(404, f"Secret Version [{name}/versions/{version}] not found.")
        data = value.encode()
        return 200, {"name": f"{name}/versions/1",
                     "payload": {"data": base64.b64encode(data).decode(), "dataCrc32c": str(crc32c(data))}}


# Storage's locationType of the multi- and dual-regions the sandbox knows (infra/gcs_location.py).
_LOCATION_TYPES = {"US": "multi-region", "EU": "multi-region", "ASIA": "multi-region",
                   **{name: "dual-region" for name in DUAL_REGIONS}}


def _api_of(path: str) -> str:
    if path.startswith("/compute/"):
        return "compute"
    if path.startswith(("/storage/", "/upload/storage/")):
        return "storage"
    if _PROJECT.match(path):
        return "resourcemanager"
    if _ACCOUNTS.match(path):
        return "iam"
    return "quotas" if "/quotaInfos" in path else "secretmanager"


def _quotas_api() -> DiscoveryApi | None:
    """Cloud Quotas v1 get/list QuotaInfo, described by the google-cloud-quotas protos (no discovery doc)."""
    from google.cloud import cloudquotas_v1

    base = "v1/projects/{projectsId}/locations/{locationsId}/services/{servicesId}/quotaInfos"
    page = {"pageSize": {"type": "integer", "format": "int32", "location": "query"},
            "pageToken": {"type": "string", "location": "query"}}
    return proto_api("cloudquotas.v1", "google.api.cloudquotas.v1", [
        ("cloudquotas.projects.locations.services.quotaInfos.get", "GET", base + "/{quotaInfosId}", None,
         cloudquotas_v1.QuotaInfo.pb(), {}),
        ("cloudquotas.projects.locations.services.quotaInfos.list", "GET", base, None,
         cloudquotas_v1.ListQuotaInfosResponse.pb(), page),
    ])


def _google_error(code: int, message: str, status: str = "") -> tuple[int, dict]:
    return code, error_body(code, message, status)


def _legacy_error(code: int, message: str, reason: str) -> tuple[int, dict]:
    """Compute Engine's and Cloud Storage's error shape."""
    return code, legacy_error(code, message, reason)


def _with_errors(answer: tuple[int, dict], reason: str) -> tuple[int, dict]:
    """A Google error with the legacy `errors[]` list Compute Engine and Cloud Storage add to it."""
    answer[1]["error"]["errors"] = [{"message": answer[1]["error"]["message"], "domain": "global", "reason": reason}]
    return answer


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), what Secret Manager reports as `dataCrc32c`."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
