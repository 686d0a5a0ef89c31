"""Byte content in bounded pieces, gzip or not, with a size cap that holds after decompression.

A log reaches the digest as chunks (an HTTP body, a file read block by block). Gzip is recognised
by its magic bytes, whatever the name, and inflated piece by piece: no piece is larger than
`OUT_BYTES`, and the cap is checked as the output grows, so a small .gz that expands hugely is
refused after `max_bytes` of output instead of after it has filled memory.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Iterator

GZIP_MAGIC = b"\x1f\x8b"
GZIP_WBITS = 16 + zlib.MAX_WBITS  # the gzip container around deflate
OUT_BYTES = 64 * 1024  # the largest piece of inflated output handed on


def sniff_gzip(chunks: Iterable[bytes]) -> tuple[bool, Iterator[bytes]]:
    """(whether the content starts with the gzip magic, the same chunks from the start)."""
    chunks = iter(chunks)
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= len(GZIP_MAGIC):
            break
    return head[: len(GZIP_MAGIC)] == GZIP_MAGIC, itertools.chain((head,) if head else (), chunks)


def gunzip_chunks(chunks: Iterable[bytes], max_bytes: int, name: str, error: type[Exception]) -> Iterator[bytes]:
    """The inflated content of gzip `chunks`, refusing (with `error`) more than `max_bytes` of it.

    Members written one after another (`cat a.gz b.gz`, pigz) are read like `gzip -d` reads them;
    bytes after the last member that do not start another one are ignored."""
    inflater: zlib._Decompress | None = zlib.decompressobj(GZIP_WBITS)  # None between members
    produced = 0
    between = b""  # the start of what follows a finished member, until it shows whether it is one

    def inflate(data: bytes) -> Iterator[bytes]:
        nonlocal produced
        assert inflater is not None, "called inside a member only"
        try:
            out = inflater.decompress(data, OUT_BYTES)
        except zlib.error as exc:
            raise error(f"{name} looks like gzip but does not decompress: {exc}") from exc
        produced += len(out)
        if produced > max_bytes:
            raise error(f"{name} expands beyond the {max_bytes:,}-byte limit")
        if out:
            yield out

    for chunk in chunks:
        data = between + chunk if between else chunk
        between = b""
        while data:
            if inflater is None:  # a member ended: does another follow?
                if len(data) < len(GZIP_MAGIC):
                    between = data
                    break
                if data[: len(GZIP_MAGIC)] != GZIP_MAGIC:
                    return  # trailing bytes that are not gzip
                inflater = zlib.decompressobj(GZIP_WBITS)
            yield from inflate(data)
            if inflater.eof:
                data, inflater = inflater.unused_data, None
            else:
                data = inflater.unconsumed_tail
    # The last input can leave output inside the inflater (its output was cut at OUT_BYTES).
    while inflater is not None and not inflater.eof:
        before = produced
        yield from inflate(b"")
        if produced == before:
            break

