"""Which vLLM a container image serves, and which versions cannot serve Gemma 4 E2B on a TPU.

The one place these facts live (reference/vllm-tpu.md §1): settings refuse an image from a
version below, and the sandbox asks `served_vllm_version` which vLLM to imitate.

An image reference is `[registry/]path[:tag][@sha256:…]`, in any registry (Docker Hub, an
Artifact Registry mirror). The version is read from a release tag, `v0.32.0` or `0.32.0`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_VLLM_VERSION = "0.32.0"  # the latest vllm-tpu/tpu-inference release (2026-10-22)
DEFAULT_IMAGE = f"vllm/vllm-tpu:v{DEFAULT_VLLM_VERSION}"

_RELEASE_TAG = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?([.+-]?(?:rc|post|dev)\d*)?$")


@dataclass(frozen=True)
class _Unusable:
    up_to: tuple[int, int]  # (major, minor), inclusive
    why: str


# In version order; a version above all of them serves E2B with the parser the bot expects.
UNUSABLE = (
    _Unusable((0, 21), "its TPU backend (tpu-inference) asserts a model has no shared-KV layers and "
                       "Gemma 4 E2B has 20, so the engine crashes at start"),
    _Unusable((0, 23), "its gemma4 tool-call parser predates the rewrite in vLLM 0.24.0, so tool calls "
                       "do not parse as the bot expects"),
)


def image_tag(image: str) -> str:
    """The tag of an image reference ("" when it has none; a registry's `host:port` is not a tag)."""
    name = image.strip().partition("@")[0]
    last = name.rsplit("/", 1)[-1]
    return last.rpartition(":")[2] if ":" in last else ""


DOCKER_HUB = "docker.io"


def image_registry(image: str) -> str:
    """The registry host an image reference names, as the Docker CLI reads it: the first path part when
    it looks like a host (a `.`, a `:port`, `localhost`), else Docker Hub (`docker.io`)."""
    first, slash, _ = image.strip().partition("@")[0].partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return DOCKER_HUB if first in ("index.docker.io", "registry-1.docker.io") else first
    return DOCKER_HUB


def image_digest(image: str) -> str:
    """`sha256:…` when the reference pins a digest, else ""."""
    _, at, digest = image.strip().partition("@")
    return digest if at else ""


def served_vllm_version(image: str) -> str | None:
    """The vLLM version an image serves, like "0.32.0", read from its release tag.

    A digest-only reference (`vllm/vllm-tpu@sha256:…`) says nothing about its version: it is
    taken to be the default image's (DEFAULT_VLLM_VERSION), the digest an operator is told to pin
    after one boot of the default tag. A tag that is not a release (`nightly-20261020-…`, a
    mirror's own name) gives None: unknown.
    """
    tag = image_tag(image)
    if not tag:
        return DEFAULT_VLLM_VERSION if image_digest(image) else None
    match = _RELEASE_TAG.match(tag)
    if match is None:
        return None
    major, minor, patch, suffix = match.groups()
    return f"{major}.{minor}.{patch or 0}{suffix or ''}"


def unusable_reason(image: str) -> str | None:
    """Why this image cannot serve Gemma 4 E2B on a TPU, or None if nothing known stops it."""
    version = served_vllm_version(image)
    if version is None:
        return None
    major, minor = (int(part) for part in version.split(".")[:2])
    for entry in UNUSABLE:
        if (major, minor) <= entry.up_to:
            return f"it serves vLLM {version}, and {entry.why}"
    return None
