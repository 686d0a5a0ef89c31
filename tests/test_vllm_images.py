"""The sandbox vLLM takes image parts as vLLM's OpenAI server does, through the real `openai` client:
the per-prompt limit and its error, base64-only data URLs, the URL schemes, and what an image
costs in prompt tokens (<boi> + Gemma 4's soft tokens for its size + <eoi>)."""

from __future__ import annotations

import base64
import io

import openai
import pytest
from PIL import Image

from infra.sandbox.vllm import LatencyModel, VllmEmulator

MODEL = "google/gemma-4-E2B-it"


def png_uri(width: int, height: int) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (20, 120, 200)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def ask(client: openai.OpenAI, *urls: str):
    content = [{"type": "text", "text": "What does the dashboard show?"}]
    content += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                          max_tokens=256)


@pytest.fixture(scope="module")
def emu():
    with VllmEmulator(latency=LatencyModel.instant()) as emulator:
        yield emulator


@pytest.fixture
def client(emu):
    with openai.OpenAI(base_url=emu.base_url, api_key="x", max_retries=0) as c:
        yield c


def refusal(client, *urls: str) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, *urls)
    assert caught.value.status_code == 400
    return caught.value


def test_five_images_against_the_default_limit_of_four_are_refused_with_vllms_message(emu, client):
    before = len(emu.requests)
    error = refusal(client, *[png_uri(96, 96)] * 5)
    assert error.body["message"] == "At most 4 image(s) may be provided in one prompt."
    assert error.body["type"] == "BadRequestError" and len(emu.requests) == before  # nothing was run
    assert ask(client, *[png_uri(96, 96)] * 4).choices[0].message.content


def test_the_limit_follows_limit_mm_per_prompt():
    with VllmEmulator(latency=LatencyModel.instant(), limit_mm_per_prompt='{"image":0,"audio":1}') as emu:
        with openai.OpenAI(base_url=emu.base_url, api_key="x", max_retries=0) as client:
            assert refusal(client, png_uri(96, 96)).body["message"] == \
                "At most 0 image(s) may be provided in one prompt."


@pytest.mark.parametrize("url, message", [
    ("data:image/png,iVBORw0KGgo=", "not enough values to unpack (expected 2, got 1)"),
    ("data:image/png;charset=utf-8,abc", "Only base64 data URLs are supported for now."),
    ("ftp://example.invalid/a.png", "The URL must be either a HTTP, data or file URL."),
    ("file:///etc/passwd", "Cannot load local files without `--allowed-local-media-path`."),
    ("data:image/png;base64," + base64.b64encode(b"not a picture").decode(), "Failed to load image: cannot identify"),
])
def test_image_urls_vllm_cannot_load_are_refused(client, url, message):
    assert refusal(client, url).body["message"].startswith(message)


def test_an_image_costs_its_soft_tokens_in_the_prompt_and_the_heuristic_says_what_it_got(client):
    text_only = ask(client).usage.prompt_tokens
    answered = ask(client, png_uri(1056, 576), png_uri(48, 48))
    # 1056×576: 22 × 12 groups of 3×3 patches = 264 soft tokens; 48×48 is scaled up to 768×768 by
    # the processor, 16 × 16 = 256; each with <boi> and <eoi>.
    assert answered.usage.prompt_tokens - text_only == (264 + 2) + (256 + 2)
    assert "It received 2 images (1056×576, 48×48) and cannot see them." in answered.choices[0].message.content
    assert "heuristic stand-in, not Gemma" in answered.choices[0].message.content


def test_one_image_is_one_image():
    """Issue 44: the sandbox model said "1 image … and cannot see them"."""
    from types import SimpleNamespace

    from infra.plurals import counted
    from infra.sandbox.vllm.heuristic import received_images

    assert received_images([SimpleNamespace(width=48, height=48)]) == " It received 1 image (48×48) and cannot see it."
    assert (counted(1, "line"), counted(2000, "line")) == ("1 line", "2,000 lines")
