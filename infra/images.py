"""An image someone attached (a dashboard screenshot), made into what Gemma 4's vision input takes.

Checked by content, never by name or Slack's mimetype: Pillow identifies the bytes (PNG, JPEG, WebP,
GIF or BMP, by their signatures) and reads only the header before anything is decoded, so
- a file whose content is no image, an animated image, and a file over MAX_IMAGE_BYTES are refused
  with a line that says which;
- a header claiming more than MAX_IMAGE_PIXELS (a decompression bomb: a few KiB that would decode
  to gigabytes) is refused before decoding; Pillow's own bomb check is set to the same figure.

The size is the one Gemma 4's image processor would resize to anyway (transformers
`models/gemma4/image_processing_pil_gemma4.py`, `get_aspect_ratio_preserving_size`; vLLM
`model_executor/models/gemma4_mm.py`, `_compute_num_soft_tokens`): the aspect ratio kept, at most
`max_soft_tokens` (280, `vision_config.default_output_length`) × pooling² (3×3) patches of 16×16
pixels, both sides a multiple of 48. Resizing here sends a few hundred KiB instead of the original
megabytes and makes the server's own resize a no-op; an image already within that budget keeps its
size (the processor would only scale it up). The copy sent is new pixels in a new file: EXIF, text
chunks and colour profiles are not carried over (the EXIF orientation is applied first).
"""

from __future__ import annotations

import base64
import io
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

from PIL import Image, UnidentifiedImageError

# Gemma 4's image processor defaults (transformers Gemma4ImageProcessorPil; vision_config of E2B).
PATCH_SIZE = 16
POOLING_KERNEL = 3
MAX_SOFT_TOKENS = 280
SIDE_MULTIPLE = PATCH_SIZE * POOLING_KERNEL  # 48
MAX_PATCHES = MAX_SOFT_TOKENS * POOLING_KERNEL**2  # 2,520 patches = 645,120 pixels
# What one image costs in the prompt at most: <boi> + the soft tokens + <eoi> (gemma4_mm.get_image_repl).
MAX_IMAGE_PROMPT_TOKENS = MAX_SOFT_TOKENS + 2

MAX_IMAGE_BYTES = 20 * 1024 * 1024  # a 12-megapixel PNG screenshot fits; the download is capped at this
MAX_IMAGE_PIXELS = 50_000_000  # 50 megapixels: e.g. 8,660 × 5,773; a header claiming more is a bomb
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
_FORMAT_NAMES = "PNG, JPEG, WebP, GIF or BMP"
# Signatures of FORMATS, to tell an image from a log by its first bytes before it is downloaded whole.
_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")

# Pillow warns above MAX_IMAGE_PIXELS and raises DecompressionBombError above twice it; the explicit
# check below refuses at the limit itself, and this keeps Pillow's own guard at the same figure.
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS


class ImageError(Exception):
    """An image that is not sent; the message names it and says why, fit to show to the person."""


@dataclass(frozen=True)
class PreparedImage:
    name: str
    original_size: tuple[int, int]  # (width, height) as attached
    size: tuple[int, int]  # (width, height) as sent
    mime: str  # image/png or image/jpeg
    data: bytes  # the re-encoded file, without metadata

    @property
    def data_uri(self) -> str:
        """The image_url of an OpenAI content part; never log it."""
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    @property
    def prompt_tokens(self) -> int:
        """What vLLM counts for it: <boi>, one soft token per 3×3 patches of 16 px, <eoi>."""
        return gemma4_soft_tokens(*self.size) + 2

    def describe(self) -> str:
        """`dash.png (1920×1080, sent as 1056×576)`: sizes only, never bytes."""
        (w0, h0), (w, h) = self.original_size, self.size
        sent = "" if (w, h) == (w0, h0) else f", sent as {w}×{h}"
        return f"{self.name} ({w0}×{h0}{sent})"

    def __repr__(self) -> str:  # a dataclass repr would print the bytes
        return f"PreparedImage({self.describe()}, {len(self.data):,} bytes {self.mime})"


def image_content_parts(images: Sequence[PreparedImage], names: Sequence[str]) -> list[dict]:
    """OpenAI chat content parts: for each image a short text label (`Image 1: dash.png`), then the
    image as an `image_url` data URI."""
    parts: list[dict] = []
    for i, (image, name) in enumerate(zip(images, names, strict=True), 1):
        parts.append({"type": "text", "text": f"\nImage {i}: {name}\n"})
        parts.append({"type": "image_url", "image_url": {"url": image.data_uri}})
    return parts


def looks_like_image(head: bytes) -> bool:
    """The first bytes of a file are those of an image format we read (WebP: RIFF....WEBP)."""
    return head.startswith(_SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def gemma4_target_size(width: int, height: int) -> tuple[int, int]:
    """(width, height) Gemma 4's image processor resizes an image of this size to: the largest with
    the same aspect ratio that is at most MAX_PATCHES patches, both sides multiples of 48 (as
    transformers' get_aspect_ratio_preserving_size computes it, including its thin-image rule)."""
    target_px = MAX_PATCHES * PATCH_SIZE**2
    factor = math.sqrt(target_px / (width * height))
    target_h = int(math.floor(factor * height / SIDE_MULTIPLE)) * SIDE_MULTIPLE
    target_w = int(math.floor(factor * width / SIDE_MULTIPLE)) * SIDE_MULTIPLE
    max_side = (MAX_PATCHES // POOLING_KERNEL**2) * SIDE_MULTIPLE
    if target_h == 0:
        target_h, target_w = SIDE_MULTIPLE, min(int(width // height) * SIDE_MULTIPLE, max_side)
    elif target_w == 0:
        target_w, target_h = SIDE_MULTIPLE, min(int(height // width) * SIDE_MULTIPLE, max_side)
    return target_w, target_h


def gemma4_soft_tokens(width: int, height: int) -> int:
    """Soft tokens vLLM's Gemma 4 processor plans for an image of this size (`_compute_num_soft_tokens`)."""
    unit = SIDE_MULTIPLE
    scale = math.sqrt(MAX_PATCHES / ((height / PATCH_SIZE) * (width / PATCH_SIZE)))
    target_h = max(unit, int(math.floor(height * scale / unit)) * unit)
    target_w = max(unit, int(math.floor(width * scale / unit)) * unit)
    patches = (target_h // PATCH_SIZE) * (target_w // PATCH_SIZE)
    return min(patches // POOLING_KERNEL**2, MAX_SOFT_TOKENS)


def sent_size(width: int, height: int) -> tuple[int, int]:
    """The size an image is sent at: Gemma 4's own target when that is smaller, else unchanged."""
    target = gemma4_target_size(width, height)
    return target if target[0] * target[1] < width * height else (width, height)


def prepare_image(name: str, source: bytes | BinaryIO) -> PreparedImage:
    """Identify, check, resize and re-encode one image, given as bytes or a seekable binary file
    (a download spooled to disk: Pillow then reads it in pieces); raises ImageError with the reason."""
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    size = stream.seek(0, io.SEEK_END)
    stream.seek(0)
    if size > MAX_IMAGE_BYTES:
        raise ImageError(f"{name} is {size:,} bytes; the limit for an image is {MAX_IMAGE_BYTES:,}")
    with warnings.catch_warnings():
        # Between the limit and twice it Pillow only warns; the check below refuses those, by name and size.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(stream, formats=FORMATS)  # the header only
        except UnidentifiedImageError:
            raise ImageError(f"{name} is not an image: its content is not {_FORMAT_NAMES}") from None
        except Image.DecompressionBombError:
            raise ImageError(_bomb(name, None)) from None
        with image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise ImageError(_bomb(name, (width, height)))
            frames = getattr(image, "n_frames", 1)
            if frames > 1:
                raise ImageError(f"{name} is animated ({frames} frames); attach a still screenshot instead")
            try:
                return _convert(name, image, (width, height))
            except (OSError, SyntaxError, ValueError) as error:  # truncated or corrupt pixel data
                raise ImageError(f"{name} could not be decoded ({type(error).__name__}: {str(error)[:120]})") from None


def _bomb(name: str, size: tuple[int, int] | None) -> str:
    claimed = f"{size[0]:,}×{size[1]:,} pixels" if size else f"more than {2 * MAX_IMAGE_PIXELS / 1e6:.0f} megapixels"
    return (f"{name} claims {claimed}; the limit is {MAX_IMAGE_PIXELS / 1e6:.0f} megapixels, so it was not "
            "decoded (a decompression bomb looks like this)")


def _convert(name: str, image: Image.Image, size: tuple[int, int]) -> PreparedImage:
    orientation = _orientation(image)
    turned = orientation in (5, 6, 7, 8)  # width and height swap
    original = (size[1], size[0]) if turned else size  # as a person sees it
    target = sent_size(*original)
    stored_target = (target[1], target[0]) if turned else target  # the same, in the file's own orientation
    if image.format == "JPEG":
        # Decode at a reduced DCT scale (1/2, 1/4, 1/8) when that still covers the target: a 12 MP
        # photo then never exists at full size in memory.
        image.draft("RGB", stored_target)
    image.load()
    rgb = _flatten(image)
    if rgb.size != stored_target:
        rgb = rgb.resize(stored_target, Image.Resampling.BICUBIC)
    if orientation in _TRANSPOSE:  # turned upright after the resize: the copy it makes is small
        rgb = rgb.transpose(_TRANSPOSE[orientation])
    clean = Image.new("RGB", rgb.size)  # new pixels, an empty info dict: no EXIF, text or ICC
    clean.paste(rgb)
    out = io.BytesIO()
    if image.format in ("JPEG", "WEBP"):  # photos: JPEG stays small
        clean.save(out, format="JPEG", quality=90, optimize=True)
        mime = "image/jpeg"
    else:  # screenshots: PNG keeps text sharp
        clean.save(out, format="PNG", optimize=True)
        mime = "image/png"
    return PreparedImage(name=name, original_size=original, size=clean.size, mime=mime, data=out.getvalue())


# EXIF orientation → the transpose that makes the picture upright (as ImageOps.exif_transpose maps them).
_TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
              5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
              8: Image.Transpose.ROTATE_90}


def _orientation(image: Image.Image) -> int:
    """The EXIF orientation tag (1: upright)."""
    try:
        return int(image.getexif().get(0x0112, 1))
    except Exception:  # a broken EXIF block is no reason to refuse the pixels
        return 1


def _flatten(image: Image.Image) -> Image.Image:
    """RGB; transparency laid over white (a transparent screenshot would turn black otherwise)."""
    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB") if image.mode != "RGB" else image
