"""Image content parts as vLLM's OpenAI server takes them (chat utils and the multimodal processor).

What is followed, as read in vllm-project/vllm (renderers/chat_utils/item_tracker.py,
multimodal/processing `validate_num_items`, the media connector's `load_from_url` /
`_load_data_url`, `ImageMediaIO.load_bytes`, model_executor/models/gemma4_mm.py):
- every `image_url` part of every message counts toward `--limit-mm-per-prompt`; one past it is
  "At most N image(s) may be provided in one prompt." (a ValueError: HTTP 400 BadRequestError).
  Gemma 4's processor declares no limit of its own, so the "Set `--limit-mm-per-prompt`" hint that
  other models get is not added. The count is checked as parts are added, before any is loaded;
- the URL: `data:` (only `;base64`: "Only base64 data URLs are supported for now."), `http(s):`
  (fetched by vLLM; the sandbox has no network and says so), `file:` (refused without
  `--allowed-local-media-path`, which the startup script never sets); anything else is "The URL
  must be either a HTTP, data or file URL.";
- the bytes are base64-decoded and opened with Pillow (any format Pillow reads), decoded whole;
- each image costs <boi> + soft tokens + <eoi> in the prompt, the soft tokens from the image's
  size (`Gemma4ProcessingInfo._compute_num_soft_tokens`, at most 280).
Read from the code index, which serves vLLM's newer history rather than the 0.32.0 tag itself;
copies from several points of that history agree on the limit message and the data-URL rules. Not
verified: the status of a file Pillow cannot identify (vLLM lets Pillow's OSError through; the
sandbox answers 400 "Failed to load image: …", as later vLLM's ValueError wrapper does).
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from PIL import Image, UnidentifiedImageError

from infra.images import gemma4_soft_tokens


class ImagePartError(ValueError):
    """A request vLLM refuses for its images: 400, this message."""


@dataclass(frozen=True)
class SeenImage:
    width: int
    height: int
    media_type: str  # as the data URI declared it

    @property
    def prompt_tokens(self) -> int:
        return gemma4_soft_tokens(self.width, self.height) + 2


def image_parts(body: dict[str, Any]) -> list[Any]:
    """The `image_url` objects of every message's content parts, in order."""
    found: list[Any] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            found.extend(part.get("image_url") for part in content
                         if isinstance(part, dict) and part.get("type") == "image_url")
    return found


def check_images(body: dict[str, Any], limit: int) -> list[SeenImage]:
    """The request's images, loaded as vLLM loads them; raises ImagePartError as vLLM refuses them."""
    parts = image_parts(body)
    for count, part in enumerate(parts, 1):  # the tracker validates each add, before any load
        if not isinstance(part, dict) or not isinstance(part.get("url"), str):
            raise ImagePartError("1 validation error: image_url.url Field required")
        if count > limit:
            raise ImagePartError(f"At most {limit} image(s) may be provided in one prompt.")
    return [_load(part["url"]) for part in parts]


def _load(url: str) -> SeenImage:
    spec = urlparse(url)
    if spec.scheme.startswith("http"):
        raise ImagePartError("sandbox vLLM: http(s) image URLs would be fetched by vLLM; the sandbox has no "
                             "network, send a data URI")
    if spec.scheme == "file":
        raise ImagePartError("Cannot load local files without `--allowed-local-media-path`.")
    if spec.scheme != "data":
        raise ImagePartError("The URL must be either a HTTP, data or file URL.")
    try:
        data_spec, data = spec.path.split(",", 1)
        media_type, data_type = data_spec.split(";", 1)
    except ValueError as error:  # the unpacking vLLM does, and its message
        raise ImagePartError(str(error)) from None
    if data_type != "base64":
        raise ImagePartError("Only base64 data URLs are supported for now.")
    try:
        raw = base64.b64decode(data)
    except binascii.Error as error:
        raise ImagePartError(str(error)) from None
    try:
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
            width, height = image.size
    except (UnidentifiedImageError, OSError) as error:
        raise ImagePartError(f"Failed to load image: {error}") from None
    return SeenImage(width=width, height=height, media_type=media_type)
