"""The metadata server of one sandbox TPU VM: what `http://metadata.google.internal` answers on a real one.

Every route wants `Metadata-Flavor: Google` (403 without it, as Google's does) and answers plain
text, except the token, which is JSON:

- `instance/service-accounts/default/token`: `{"access_token", "expires_in", "token_type"}`, a token
  minted for the VM's service account by the project's IAM (infra/sandbox/iam.py), which the
  emulated APIs then take for that account;
- `instance/service-accounts/default/email` and `/scopes`; `project/project-id`,
  `project/numeric-project-id`; `instance/attributes/KEY` (the instance metadata the node was
  created with: `startup-script`, `enable-guest-attributes`); `instance/hostname`;
- `instance/guest-attributes/NAMESPACE/KEY`: PUT stores a value (what the bot reads back with
  `nodes.getGuestAttributes`), GET returns it. Guest attributes are off unless the instance metadata
  says `enable-guest-attributes: TRUE`, and the org policy `compute.disableGuestAttributesAccess`
  turns them off whatever it says: then a write is refused with 403 Forbidden (what the OS Config
  agent meets, GoogleCloudPlatform/osconfig#411).

A VM finds it through GCE_METADATA_HOST, the variable Google's own client libraries honour.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from infra.sandbox.http_server import ServerThread, handler_class, read_body, reply
from infra.sandbox.iam import Iam

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
_GUEST_ATTRIBUTE = re.compile(r"^/computeMetadata/v1/instance/guest-attributes/(?P<namespace>[^/]+)/(?P<key>[^/]+)$")


@dataclass
class VmIdentity:
    """What the metadata server knows of its VM."""

    project: str
    project_number: int
    service_account: str
    hostname: str
    attributes: Mapping[str, str] = field(default_factory=dict)  # the instance metadata (startup-script, …)
    scopes: tuple[str, ...] = (CLOUD_PLATFORM,)
    guest_attributes_allowed: bool = True  # False: the org policy compute.disableGuestAttributesAccess


class MetadataServer:
    def __init__(self, identity: VmIdentity, iam: Iam,
                 on_guest_attribute: Callable[[str, str, str], None] | None = None,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.identity = identity
        self.iam = iam
        self.on_guest_attribute = on_guest_attribute  # (namespace, key, value): what the TPU API serves back
        self.guest_attributes: dict[str, str] = {}  # "namespace/key" -> value, as the VM last wrote it
        self.writes: list[tuple[str, str]] = []  # every ("namespace/key", value) written, in order
        self.refused_writes = 0
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.tokens: list[str] = []
        self._lock = threading.Lock()
        handler = handler_class(self._serve_http, ("GET", "PUT", "POST", "DELETE"))
        self._http = ServerThread((host, port), handler, "metadata-server")

    def start(self) -> MetadataServer:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    @property
    def host(self) -> str:
        """`HOST:PORT`, what GCE_METADATA_HOST holds."""
        return self._http.root.removeprefix("http://")

    @property
    def url(self) -> str:
        return f"{self._http.root}/computeMetadata/v1"

    @property
    def guest_attributes_on(self) -> bool:
        enabled = str(self.identity.attributes.get("enable-guest-attributes", "")).upper() == "TRUE"
        return enabled and self.identity.guest_attributes_allowed

    def _serve_http(self, http: BaseHTTPRequestHandler) -> None:
        headers = {key.lower(): value for key, value in http.headers.items()}
        status, content_type, text = self.handle(http.command, http.path, headers, read_body(http))
        reply(http, status, text.encode(), content_type, {"Metadata-Flavor": "Google"})

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, str, str]:
        """(status, content type, body)."""
        path = urlsplit(raw_path).path
        with self._lock:
            self.requests.append((method, path))
        if headers.get("metadata-flavor", "").lower() != "google":
            return 403, "text/html", ("Your client does not have permission to get URL "
                                      f"<code>{path}</code> from this server. Missing Metadata-Flavor:Google header.")
        if match := _GUEST_ATTRIBUTE.match(path):
            return self._guest_attribute(method, f"{match['namespace']}/{match['key']}", body)
        if method != "GET":
            return 405, "text/plain", "Method Not Allowed"
        ident = self.identity
        base = "/computeMetadata/v1/"
        answers: dict[str, Callable[[], tuple[int, str, str]]] = {
            "instance/service-accounts/default/token": self._token,
            "instance/service-accounts/default/email": lambda: (200, "text/plain", ident.service_account),
            "instance/service-accounts/default/scopes": lambda: (200, "text/plain", "\n".join(ident.scopes) + "\n"),
            "project/project-id": lambda: (200, "text/plain", ident.project),
            "project/numeric-project-id": lambda: (200, "text/plain", str(ident.project_number)),
            "instance/hostname": lambda: (200, "text/plain", ident.hostname),
        }
        relative = path.removeprefix(base)
        if relative in answers:
            return answers[relative]()
        if relative.startswith("instance/attributes/"):
            name = relative.removeprefix("instance/attributes/")
            if name in ident.attributes:
                return 200, "text/plain", str(ident.attributes[name])
        return 404, "text/html", "Not Found"

    def _token(self) -> tuple[int, str, str]:
        token = self.iam.mint(self.identity.service_account)
        with self._lock:
            self.tokens.append(token)
        return 200, "application/json", json.dumps({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})

    def _guest_attribute(self, method: str, name: str, body: bytes) -> tuple[int, str, str]:
        if not self.guest_attributes_on:
            with self._lock:
                self.refused_writes += method == "PUT"
            return 403, "text/plain", "Forbidden"
        with self._lock:
            if method == "PUT":
                value = body.decode("utf-8")
                self.guest_attributes[name] = value
                self.writes.append((name, value))
            elif method == "GET":
                found = self.guest_attributes.get(name)
                return (200, "text/plain", found) if found is not None else (404, "text/plain", "Not Found")
            else:
                return 405, "text/plain", "Method Not Allowed"
        if self.on_guest_attribute is not None:
            namespace, key = name.split("/", 1)
            self.on_guest_attribute(namespace, key, value)
        return 200, "text/plain", ""
