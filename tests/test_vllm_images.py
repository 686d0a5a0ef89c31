"""Which vLLM an image reference serves: the one table the settings and the sandbox ask."""

from __future__ import annotations

import pytest

from infra.vllm_images import DEFAULT_IMAGE, DEFAULT_VLLM_VERSION, served_vllm_version, unusable_reason

DIGEST = "sha256:" + "d" * 64


@pytest.mark.parametrize("image, version", [
    ("vllm/vllm-tpu:v0.32.0", "0.32.0"),
    ("vllm/vllm-tpu:v0.33.0", "0.33.0"),
    ("vllm/vllm-tpu:0.24", "0.24.0"),
    ("vllm/vllm-tpu:v0.26.1rc1", "0.26.1rc1"),
    ("us-west4-docker.pkg.dev/p/r/vllm-tpu:v0.32.0", "0.32.0"),
    (f"vllm/vllm-tpu:v0.33.0@{DIGEST}", "0.33.0"),  # the tag says which digest was pinned
    ("localhost:5000/vllm-tpu:v0.19.0", "0.19.0"),  # a registry's port is not a tag
    (f"vllm/vllm-tpu@{DIGEST}", DEFAULT_VLLM_VERSION),  # digest only: taken as the default's
    ("localhost:5000/vllm-tpu", None),
    ("vllm/vllm-tpu:nightly-20261020-abc1234-def5678", None),
    ("registry.example/vllm-tpu:pinned", None),
])
def test_the_served_version_is_read_from_the_release_tag(image, version):
    assert served_vllm_version(image) == version


def test_versions_that_cannot_serve_e2b_on_a_tpu_say_why():
    assert "shared-KV" in unusable_reason("vllm/vllm-tpu:v0.21.9")
    assert "predates the rewrite" in unusable_reason("vllm/vllm-tpu:v0.22.1")
    assert "predates the rewrite" in unusable_reason("vllm/vllm-tpu:v0.23.0")
    for usable in (DEFAULT_IMAGE, "vllm/vllm-tpu:v0.24.0", f"vllm/vllm-tpu@{DIGEST}", "x/vllm-tpu:pinned"):
        assert unusable_reason(usable) is None, usable
