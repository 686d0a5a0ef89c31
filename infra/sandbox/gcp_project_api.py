"""A local emulator of the project-level Google APIs that `tpubot doctor` and the startup script call.

One HTTP server, the wire formats of four real services, for the real clients only:

- Compute Engine v1 (`AuthorizedSession` GETs): `projects/P`, `projects/P/global/networks/N`,
  `projects/P/regions/R/subnetworks/S`; errors in Compute's shape (`error.errors[].reason`).
- Cloud Quotas v1 (`cloudquotas_v1.CloudQuotasClient(transport="rest")`): get and list QuotaInfo
  under `projects/P/locations/global/services/tpu.googleapis.com/quotaInfos` (reference §5).
- Compute Engine firewalls: `projects/P/global/firewalls` (list), what doctor's firewall check reads.
- Compute Engine routers: `projects/P/regions/R/routers` (list) and `…/routers/NAME` (get), with
  their Cloud NAT configs in `nats[]`: what doctor's internal-egress check reads.
- Cloud Storage JSON API: `storage/v1/b/BUCKET` (buckets.get) with the bucket's `location` and
  `locationType`; a missing bucket is Storage's 404 (`The specified bucket does not exist.`,
  `errors[].reason: notFound`), a denied `storage.buckets.get` its 403.
- Secret Manager v1 (`secretmanager_v1.SecretManagerServiceClient(transport="rest")` and curl):
  `projects/P/secrets` (list, paged, with `labels.KEY=VALUE` / `name:TEXT` filters),
  `projects/P/secrets/S` (get, create with `?secretId=`, delete), `…:addVersion` and
  `…/versions/latest:access` → base64 payload with its CRC32C (§7); the per-lease model API keys
  live here.
- `denied`: IAM permissions the caller lacks (e.g. `secretmanager.versions.access`), answered with
  Google's 403 and an `IAM_PERMISSION_DENIED` ErrorInfo naming the permission.

Every request is checked against Google's discovery documents (Compute, Secret Manager, Storage) or the
google-cloud-quotas protos (Cloud Quotas) by `infra.sandbox.discovery`; an unknown field or
parameter gets the real 400 INVALID_ARGUMENT.
- The GCE metadata server's token route (`Metadata-Flavor: Google` required), so the startup
  script's token fetch can run against it, and its guest-attributes route (PUT and GET of
  `instance/guest-attributes/NAMESPACE/KEY`, a plain-text value), where the script publishes its
  boot phase; Secret Manager then accepts only tokens it issued (or
  no Authorization header at all, which is what the anonymous sandbox clients send).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

from infra.gcs_location import DUAL_REGIONS
from infra.preflight import PREEMPTIBLE_QUOTA_IDS, QUOTA_SERVICE  # noqa: F401  (the ids Google uses)
from infra.sandbox.http_server import ServerThread
from infra.sandbox.discovery import DiscoveryApi, RequestRejected, load_api, proto_api

_COMPUTE = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)(?:/(?P<rest>.*))?$")
_BUCKET = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)$")
_QUOTAS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/locations/global/services/(?P<service>[^/]+)"
                     r"/quotaInfos(?:/(?P<quota>[^/]+))?$")
_SECRET = re.compile(r"^/v1/projects/(?P<project>[^/]+)/secrets/(?P<secret>[^/:]+)"
                     r"(?:/versions/(?P<version>[^/:]+):access|(?P<add>:addVersion))?$")
SEEDED_CREATE_TIME = "2026-01-01T00:00:00Z"
_SECRETS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/secrets$")
_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
_GUEST_ATTRIBUTE = re.compile(r"^/computeMetadata/v1/instance/guest-attributes/(?P<namespace>[^/]+)/(?P<key>[^/]+)$")


class GcpProjectSandbox:
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
        denied: Iterable[str] = (),  # IAM permissions the caller does not have
        project_number: int = 123456789012,
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
        self.denied = set(denied)
        self.apis: dict[str, DiscoveryApi | None] = {
            "compute": load_api("compute.v1", "google.cloud.compute.v1"),
            "secretmanager": load_api("secretmanager.v1", "google.cloud.secretmanager.v1"),
            "storage": load_api("storage.v1", "google.storage.v1"),
            "quotas": _quotas_api(),
        }
        self.rejected: list[RequestRejected] = []
        self.response_problems: list[str] = []
        self.issued_tokens: set[str] = set()
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, selected headers)
        self.guest_attributes: dict[str, str] = {}  # "namespace/key" -> value, as the VM last wrote it
        self.guest_attribute_writes: list[tuple[str, str]] = []  # every ("namespace/key", value), in order
        self._lock = threading.Lock()
        self._host, self._port = host, port
        self._http: ServerThread | None = None

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> str:
        if self._http is None:
            self._http = ServerThread((self._host, self._port), _handler_for(self), "gcp-project-sandbox").start()
        return self.base_url

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()
            self._http = None

    def __enter__(self) -> "GcpProjectSandbox":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._http is None:
            raise RuntimeError("the GCP project sandbox is not running; call start() first")
        return self._http.root

    @property
    def metadata_url(self) -> str:
        """Stands in for `http://metadata.google.internal/computeMetadata/v1`."""
        return f"{self.base_url}/computeMetadata/v1"

    # --- request handling -------------------------------------------------------------------
    @property
    def strict(self) -> bool:
        return all(api is not None for api in self.apis.values())

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str], body: Any = None) -> tuple[int, dict]:
        url = urlsplit(raw_path)
        query = parse_qs(url.query, keep_blank_values=True)
        with self._lock:
            self.requests.append((method, url.path, {k: v for k, v in headers.items()
                                                     if k.lower() in ("metadata-flavor", "x-goog-api-client")}))
        if url.path == _TOKEN_PATH:
            return self._token(headers)
        api_name = _api_of(url.path)
        api = self.apis[api_name]
        checked = None
        if api is not None:
            try:
                checked = api.check_request(method, url.path, query, body)
            except RequestRejected as rejected:
                with self._lock:
                    self.rejected.append(rejected)
                status, payload = 400, rejected.google_error()
                if api_name in ("compute", "storage"):  # both add their legacy errors[] list
                    payload["error"]["errors"] = [{"message": rejected.message, "domain": "global",
                                                   "reason": "invalid"}]
                return status, payload
        status, payload = self._route(method, url.path, query, headers, body)
        if api is not None and checked is not None and status == 200:
            problems = api.check_response(checked, payload)
            if problems:
                with self._lock:
                    self.response_problems.extend(problems)
                return _google_error(500, "gcp project sandbox bug: " + "; ".join(problems))
        return status, payload

    def _route(self, method: str, path: str, query: dict, headers: Mapping[str, str], body: Any) -> tuple[int, dict]:
        if match := _COMPUTE.match(path):
            if method != "GET":
                return _google_error(405, f"Method {method} is not supported by the sandbox on {path}.")
            return self._compute(match["project"], match["rest"] or "", query)
        if match := _BUCKET.match(path):
            if method != "GET":
                return _google_error(405, f"Method {method} is not supported by the sandbox on {path}.")
            return self._bucket(match["bucket"])
        if match := _QUOTAS.match(path):
            if denied := self._deny("cloudquotas.quotas.get", f"projects/{match['project']}"):
                return denied
            return self._quotas(match["project"], match["service"], match["quota"], query)
        if match := _SECRETS.match(path):
            if method == "POST":
                return self._create_secret(match["project"], (query.get("secretId") or [""])[0], body or {})
            if method == "GET":
                return self._list_secrets(match["project"], query)
        if match := _SECRET.match(path):
            if method == "POST" and match["add"]:
                return self._add_version(match["project"], match["secret"], body or {})
            if method == "DELETE" and not match["version"] and not match["add"]:
                return self._delete_secret(match["project"], match["secret"])
            if method == "GET" and not match["add"]:
                return self._secret(match["project"], match["secret"], match["version"], headers)
        return _google_error(404, f"The requested URL {path} was not found on this server.")

    def _deny(self, permission: str, resource: str) -> tuple[int, dict] | None:
        if permission not in self.denied:
            return None
        service = permission.split(".", 1)[0]
        message = f"Permission '{permission}' denied on resource '//{service}.googleapis.com/{resource}' (or it may " \
                  "not exist)."
        return 403, {"error": {"code": 403, "message": message, "status": "PERMISSION_DENIED", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "IAM_PERMISSION_DENIED",
             "domain": f"{service}.googleapis.com", "metadata": {"permission": permission, "resource": resource}}]}}

    def _create_secret(self, project: str, secret_id: str, body: dict) -> tuple[int, dict]:
        if denied := self._deny("secretmanager.secrets.create", f"projects/{project}"):
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
        return 200, self._secret_json(secret_id)

    def _list_secrets(self, project: str, query: dict) -> tuple[int, dict]:
        """ListSecrets: sorted by name, paged with pageSize (capped at 25,000; 0 lets the server
        choose) and an opaque pageToken. Of the filter language only `labels.KEY=VALUE` and
        `name:TEXT` terms joined by AND are emulated; any other filter is refused, naming it."""
        if denied := self._deny("secretmanager.secrets.list", f"projects/{project}"):
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

    def _add_version(self, project: str, secret: str, body: dict) -> tuple[int, dict]:
        if denied := self._deny("secretmanager.versions.add", f"projects/{project}/secrets/{secret}"):
            return denied
        payload = body.get("payload") or {}
        data = base64.b64decode(payload.get("data") or "")
        if "dataCrc32c" in payload and int(payload["dataCrc32c"]) != crc32c(data):
            return _google_error(400, "Checksum mismatch: the payload's dataCrc32c does not match its data.")
        with self._lock:
            if secret not in self.secrets:
                return _google_error(404, f"Secret [projects/{self.project_number}/secrets/{secret}] not found.")
            self.secrets[secret] = data.decode()
        return 200, {"name": f"projects/{self.project_number}/secrets/{secret}/versions/1",
                     "createTime": "2026-01-01T00:00:00Z", "state": "ENABLED"}

    def _delete_secret(self, project: str, secret: str) -> tuple[int, dict]:
        if denied := self._deny("secretmanager.secrets.delete", f"projects/{project}/secrets/{secret}"):
            return denied
        with self._lock:
            if self.secrets.pop(secret, "missing") == "missing":
                return _google_error(404, f"Secret [projects/{self.project_number}/secrets/{secret}] not found.")
            self.secret_labels.pop(secret, None)
            self.secret_created.pop(secret, None)
        return 200, {}

    def _secret_json(self, secret: str) -> dict:
        body = {"name": f"projects/{self.project_number}/secrets/{secret}", "replication": {"automatic": {}},
                "createTime": self.secret_created.get(secret, SEEDED_CREATE_TIME)}
        if self.secret_labels.get(secret):
            body["labels"] = dict(self.secret_labels[secret])
        return body

    def guest_attribute(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> tuple[int, str] | None:
        """The metadata server's guest-attributes route (None: not that route); answers plain text."""
        match = _GUEST_ATTRIBUTE.match(urlsplit(path).path)
        if match is None:
            return None
        with self._lock:
            self.requests.append((method, urlsplit(path).path, {k: v for k, v in headers.items()
                                                                if k.lower() == "metadata-flavor"}))
        if headers.get("metadata-flavor", "").lower() != "google":
            return 403, "Missing required header: Metadata-Flavor: Google"
        name = f"{match['namespace']}/{match['key']}"
        with self._lock:
            if method == "PUT":
                value = raw.decode("utf-8")
                self.guest_attributes[name] = value
                self.guest_attribute_writes.append((name, value))
                return 200, ""
            if method == "GET":
                return (200, self.guest_attributes[name]) if name in self.guest_attributes else (404, "Not Found")
        return 405, "Method Not Allowed"

    def _token(self, headers: Mapping[str, str]) -> tuple[int, dict]:
        if headers.get("metadata-flavor", "").lower() != "google":
            return 403, {"error": "Missing required header: Metadata-Flavor: Google"}
        token = "ya29.sandbox-" + secrets.token_urlsafe(24)
        with self._lock:
            self.issued_tokens.add(token)
        return 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}

    def _compute(self, project: str, rest: str, query: dict) -> tuple[int, dict]:
        if rest == "global/firewalls":
            if denied := self._deny("compute.firewalls.list", f"projects/{project}"):
                denied[1]["error"]["errors"] = [{"message": denied[1]["error"]["message"], "domain": "global",
                                                 "reason": "forbidden"}]
                return denied
        if project != self.project:
            return _compute_error(404, f"The resource 'projects/{project}' was not found", "notFound")
        if not rest:
            return 200, {"kind": "compute#project", "id": str(self.project_number), "name": project,
                         "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}"}
        if match := re.fullmatch(r"global/networks/([^/]+)", rest):
            name = match[1]
            if name not in self.networks:
                return _compute_error(404, f"The resource 'projects/{project}/global/networks/{name}' was not found",
                                      "notFound")
            return 200, {"kind": "compute#network", "name": name, "autoCreateSubnetworks": True,
                         "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/global/networks/{name}"}
        if match := re.fullmatch(r"regions/([^/]+)/subnetworks/([^/]+)", rest):
            region, name = match[1], match[2]
            if name not in self.subnetworks.get(region, set()):
                return _compute_error(404, f"The resource 'projects/{project}/regions/{region}/subnetworks/{name}' "
                                           "was not found", "notFound")
            return 200, {"kind": "compute#subnetwork", "name": name, "region": region}
        if match := re.fullmatch(r"regions/([^/]+)/routers(?:/([^/]+))?", rest):
            return self._routers(project, match[1], match[2])
        if rest == "global/firewalls":
            return 200, {"kind": "compute#firewallList", "id": f"projects/{project}/global/firewalls",
                         "items": [self._firewall_json(project, rule) for rule in self.firewalls],
                         "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/global/firewalls"}
        return _compute_error(404, f"The resource 'projects/{project}/{rest}' was not found", "notFound")

    def _routers(self, project: str, region: str, router: str | None) -> tuple[int, dict]:
        if denied := self._deny("compute.routers.get" if router else "compute.routers.list", f"projects/{project}"):
            denied[1]["error"]["errors"] = [{"message": denied[1]["error"]["message"], "domain": "global",
                                             "reason": "forbidden"}]
            return denied
        base = f"https://www.googleapis.com/compute/v1/projects/{project}/regions/{region}/routers"
        found = [self._router_json(project, index, r) for index, r in enumerate(self.routers)
                 if r.get("region") == region]
        if router is not None:
            match = next((r for r in found if r["name"] == router), None)
            if match is None:
                return _compute_error(404, f"The resource 'projects/{project}/regions/{region}/routers/{router}' "
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

    def _bucket(self, bucket: str) -> tuple[int, dict]:
        if self._deny("storage.buckets.get", f"projects/_/buckets/{bucket}"):
            message = ("anonymous-caller does not have storage.buckets.get access to the Google Cloud Storage "
                       "bucket. Permission 'storage.buckets.get' denied on resource (or it may not exist).")
            return 403, {"error": {"code": 403, "message": message,
                                   "errors": [{"message": message, "domain": "global", "reason": "forbidden"}]}}
        location = self.buckets.get(bucket)
        if location is None:
            message = "The specified bucket does not exist."
            return 404, {"error": {"code": 404, "message": message,
                                   "errors": [{"message": message, "domain": "global", "reason": "notFound"}]}}
        kind = _LOCATION_TYPES.get(location.upper(), "region")
        return 200, {"kind": "storage#bucket", "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}",
                     "id": bucket, "name": bucket, "projectNumber": str(self.project_number), "metageneration": "1",
                     "location": location.upper(), "locationType": kind, "storageClass": "STANDARD", "etag": "CAE=",
                     "timeCreated": "2026-01-01T00:00:00.000Z", "updated": "2026-01-01T00:00:00.000Z",
                     "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}, "rpo": "DEFAULT"}

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
        if project not in (self.project, str(self.project_number)):
            return _google_error(403, f"Permission 'cloudquotas.quotas.get' denied on resource "
                                      f"'//cloudquotas.googleapis.com/projects/{project}' (or it may not exist).")
        if quota_id is None:
            ids = sorted(self.quotas) if service == QUOTA_SERVICE else []
            return 200, {"quotaInfos": [self._quota_info(project, service, qid) for qid in ids]}
        if service != QUOTA_SERVICE or quota_id not in self.quotas:
            return _google_error(404, f"QuotaInfo 'projects/{project}/locations/global/services/{service}/"
                                      f"quotaInfos/{quota_id}' not found.")
        return 200, self._quota_info(project, service, quota_id)

    def _secret(self, project: str, secret: str, version: str | None, headers: Mapping[str, str]) -> tuple[int, dict]:
        permission = "secretmanager.versions.access" if version else "secretmanager.secrets.get"
        if denied := self._deny(permission, f"projects/{project}/secrets/{secret}"):
            return denied
        auth = headers.get("authorization", "")
        if auth:
            token = auth.removeprefix("Bearer ").strip()
            with self._lock:
                known = token in self.issued_tokens
            if not known:
                return _google_error(401, "Request had invalid authentication credentials. Expected OAuth 2 access "
                                          "token, login cookie or other valid authentication credential.")
        if project not in (self.project, str(self.project_number)) or secret not in self.secrets:
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


def _handler_for(sandbox: GcpProjectSandbox) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {key.lower(): value for key, value in self.headers.items()}
            if (text := sandbox.guest_attribute(self.command, self.path, headers, raw)) is not None:
                data = text[1].encode()
                self.send_response(text[0])
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            try:
                body = json.loads(raw) if raw.strip() else None
            except json.JSONDecodeError as exc:
                status, payload = _google_error(400, f"Invalid JSON payload received. {exc}")
            else:
                status, payload = sandbox.handle(self.command, self.path, headers, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

    return Handler


_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           405: "UNIMPLEMENTED", 409: "ALREADY_EXISTS", 500: "INTERNAL"}


# Storage's locationType of the multi- and dual-regions the sandbox knows (infra/gcs_location.py).
_LOCATION_TYPES = {"US": "multi-region", "EU": "multi-region", "ASIA": "multi-region",
                   **{name: "dual-region" for name in DUAL_REGIONS}}


def _api_of(path: str) -> str:
    if path.startswith("/compute/"):
        return "compute"
    if path.startswith("/storage/"):
        return "storage"
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


def _google_error(code: int, message: str) -> tuple[int, dict]:
    return code, {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}


def _compute_error(code: int, message: str, reason: str) -> tuple[int, dict]:
    return code, {"error": {"code": code, "message": message,
                            "errors": [{"message": message, "domain": "global", "reason": reason}]}}


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
