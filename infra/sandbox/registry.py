"""A container registry stand-in that answers as Docker Hub (or Artifact Registry) does, for the
sandbox VMs' Docker daemons (infra/sandbox/docker.py).

It speaks the Registry HTTP API v2 for what `docker pull` asks first, the manifest:
`GET /v2/<repository>/manifests/<reference>`, the registry named by the `Host` header
(`registry-1.docker.io` for Docker Hub images, `REGION-docker.pkg.dev` for a mirror). Answers:

- 200: a schema-2 image manifest, with `Docker-Content-Digest` and, from Docker Hub, its rate-limit
  headers (`ratelimit-limit: 100;w=21600`, `ratelimit-remaining: N;w=21600`, as Docker Hub sends
  them: docker/hub-feedback#2464);
- 429 `TOOMANYREQUESTS` "You have reached your unauthenticated pull rate limit.
  https://www.docker.com/increase-rate-limit" from Docker Hub once `pulls_left` is spent (every
  sandbox node pulls through one address, as every node behind one Cloud NAT does);
- 404 `MANIFEST_UNKNOWN` for a reference in `missing`;
- from Artifact Registry (`REGION-docker.pkg.dev/PROJECT/REPO/…`), with the project's IAM given:
  403 `DENIED` "Unauthenticated request. …" without credentials (the daemon's `docker login` as
  `oauth2accesstoken` with a metadata-server token sends them as Basic auth), and "Permission
  'artifactregistry.repositories.downloadArtifacts' denied on resource …" for a principal without it.

Every other reference exists (its digest is a hash of the reference): the sandbox does not know
Docker Hub's tags, and an image tpubot's settings accept is taken to be there.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler
import base64

from infra.sandbox.http_server import ServerThread, handler_class, reply
from infra.sandbox.iam import Iam
from infra.vllm_images import DOCKER_HUB as DOCKER_HUB_NAME
from infra.vllm_images import image_registry

DOCKER_HUB = "registry-1.docker.io"
RATE_LIMIT_WINDOW = 21600
RATE_LIMIT_MESSAGE = "You have reached your unauthenticated pull rate limit. https://www.docker.com/increase-rate-limit"
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def split_reference(image: str) -> tuple[str, str, str]:
    """(registry host, repository, tag or digest) of an image reference, as the Docker CLI reads it."""
    name, digest = (image.split("@", 1) + [""])[:2]
    registry = image_registry(image)
    if registry == DOCKER_HUB_NAME:
        host, path = DOCKER_HUB, name.removeprefix("docker.io/")
    else:
        host, path = registry, name.partition("/")[2]
    path, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "latest")
    if host == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return host, path, digest or tag


def digest_of(image: str) -> str:
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


class RegistryStandIn:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, iam: Iam | None = None) -> None:
        self.iam = iam  # Artifact Registry's access checks; None: every registry is public
        self.pulls_left: int | None = None  # Docker Hub manifests left in the window; None: no limit reached
        self.missing: set[str] = set()  # references (`repo:tag`) that do not exist
        self.pulls: list[tuple[str, str, int]] = []  # (registry host, repository:reference, status)
        self._lock = threading.Lock()
        self._http = ServerThread((host, port), handler_class(self._serve_http, ("GET",)), "registry-stand-in")

    def start(self) -> RegistryStandIn:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    @property
    def url(self) -> str:
        return self._http.root

    def _serve_http(self, http: BaseHTTPRequestHandler) -> None:
        host = (http.headers.get("Host") or DOCKER_HUB).split(":")[0]
        path = http.path.split("?", 1)[0]
        body: dict
        authorization = http.headers.get("Authorization") or ""
        if path in ("/v2", "/v2/"):
            status, headers, body = 200, {"Docker-Distribution-Api-Version": "registry/2.0"}, {}
            if host.endswith("-docker.pkg.dev") and self.iam is not None and authorization:
                password = _basic_password(authorization)
                if not password or self.iam.principal(f"Bearer {password}") is None:
                    status, body = 401, {"errors": [{"code": "UNAUTHORIZED", "message": "authentication failed"}]}
        elif "/manifests/" in path and path.startswith("/v2/"):
            repository, _, reference = path.removeprefix("/v2/").partition("/manifests/")
            status, headers, body = self.manifest(host, repository, reference, authorization)
        else:
            status, headers, body = 404, {}, {"errors": [{"code": "NAME_UNKNOWN",
                                                          "message": "repository name not known to registry"}]}
        content_type = headers.pop("Content-Type", "application/json")
        reply(http, status, json.dumps(body).encode(), content_type, headers)

    def refusal(self, host: str, repository: str, authorization: str) -> str | None:
        """Artifact Registry's message when it refuses these credentials this repository, else None."""
        if self.iam is None or not host.endswith("-docker.pkg.dev"):
            return None
        project, repo = (repository.split("/") + ["", ""])[:2]
        resource = f"projects/{project}/locations/{host.removesuffix('-docker.pkg.dev')}/repositories/{repo}"
        permission = "artifactregistry.repositories.downloadArtifacts"
        password = _basic_password(authorization)
        principal = self.iam.principal(f"Bearer {password}") if password else None
        if principal is None:
            return (f'Unauthenticated request. Unauthenticated requests do not have permission "{permission}" on '
                    f'resource "{resource}" (or it may not exist)')
        if not self.iam.allows(principal, permission, resource):
            return f'Permission "{permission}" denied on resource "{resource}" (or it may not exist)'
        return None

    def manifest(self, host: str, repository: str, reference: str,
                 authorization: str = "") -> tuple[int, dict[str, str], dict]:
        """(status, headers, body) of a manifest GET."""
        key = f"{repository}:{reference}"
        headers: dict[str, str] = {"Docker-Distribution-Api-Version": "registry/2.0"}
        if (refused := self.refusal(host, repository, authorization)) is not None:
            with self._lock:
                self.pulls.append((host, key, 403))
            return 403, headers, {"errors": [{"code": "DENIED", "message": refused}]}
        with self._lock:
            if host == DOCKER_HUB and self.pulls_left is not None:
                headers["ratelimit-limit"] = f"100;w={RATE_LIMIT_WINDOW}"
                if self.pulls_left <= 0:
                    self.pulls.append((host, key, 429))
                    headers["ratelimit-remaining"] = f"0;w={RATE_LIMIT_WINDOW}"
                    return 429, headers, {"errors": [{"code": "TOOMANYREQUESTS", "message": RATE_LIMIT_MESSAGE}]}
                self.pulls_left -= 1
                headers["ratelimit-remaining"] = f"{self.pulls_left};w={RATE_LIMIT_WINDOW}"
            if key in self.missing or f"{repository.removeprefix('library/')}:{reference}" in self.missing:
                self.pulls.append((host, key, 404))
                return 404, headers, {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown",
                                                  "detail": {"Tag": reference}}]}
            self.pulls.append((host, key, 200))
        digest = digest_of(f"{host}/{key}")
        headers.update({"Docker-Content-Digest": digest, "Content-Type": MANIFEST_TYPE})
        # Layer sizes: the vLLM TPU image is 19.5-25.9 GB unpacked (tpu-inference PR #1245).
        layers = [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": size,
                   "digest": digest_of(f"{digest}/{n}")} for n, size in enumerate((29_000_000, 6_400_000_000,
                                                                                    2_100_000_000))]
        return 200, headers, {"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                              "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                         "size": 14_000, "digest": digest_of(digest)}, "layers": layers}


def _basic_password(authorization: str) -> str:
    """The password of Basic credentials (what `docker login` keeps: a metadata-server token); "" for others."""
    scheme, _, encoded = authorization.partition(" ")
    try:
        return base64.b64decode(encoded).decode().partition(":")[2] if scheme.lower() == "basic" else ""
    except ValueError:
        return ""
