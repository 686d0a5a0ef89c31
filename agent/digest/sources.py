"""Turn the digest's inputs into lines: downloaded file bytes, a byte stream (file,
stdin, gzip or not), content arriving in chunks (a download), Cloud Logging entries."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import IO, Any, cast

GZIP_MAGIC = b"\x1f\x8b"


def lines_from_bytes(data: bytes) -> list[str]:
    """Lines of a downloaded file: gzip recognised by its magic bytes, undecodable bytes replaced."""
    if data[:2] == GZIP_MAGIC:
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace").splitlines()


def lines_from_stream(stream: IO[bytes]) -> Iterator[str]:
    """Lines of a byte stream, read once in bounded memory (a file of any size, stdin): gzip
    recognised by its magic bytes, undecodable bytes replaced, `\n`, `\r\n` and `\r` ends."""
    buffered = None
    if not hasattr(stream, "peek"):
        # BufferedReader needs only readinto, which any binary stream has (typing's IO does not say so)
        stream = buffered = io.BufferedReader(cast(io.RawIOBase, stream))
    source: IO[bytes] | gzip.GzipFile = stream
    if stream.peek(2)[:2] == GZIP_MAGIC:
        source = gzip.GzipFile(fileobj=stream, mode="rb")
    try:
        yield from _text_lines(source)
    finally:
        # the caller's stream stays open: closing it is the caller's business
        if buffered is not None:
            buffered.detach()


def lines_from_chunks(chunks: Iterable[bytes]) -> Iterator[str]:
    """Lines of content that arrives in pieces (a download, already gunzipped), decoded as it
    comes, in memory bounded by a piece and the longest line: undecodable bytes replaced, `\n`,
    `\r\n` and `\r` ends, also where a piece ends between `\r` and `\n` or inside a character."""
    yield from _text_lines(io.BufferedReader(_ChunkReader(chunks)))


def _text_lines(stream: IO[bytes] | gzip.GzipFile) -> Iterator[str]:
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None)
    try:
        for line in text:
            yield line[:-1] if line[-1:] == "\n" else line
    finally:
        text.detach()


class _ChunkReader(io.RawIOBase):
    """Chunks as a raw binary stream, so the io stack (buffer, incremental decoder, universal
    newlines) does the decoding exactly as it does for a file."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._current = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._current:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._current = memoryview(chunk)
        size = min(len(buffer), len(self._current))
        buffer[:size] = self._current[:size]
        self._current = self._current[size:]
        return size


def lines_from_entries(entries: Iterable[Any]) -> Iterator[str]:
    """One line per Cloud Logging entry (google.cloud.logging entry objects or LogEntry dicts):
    `<timestamp> <SEVERITY> [<resource.type>] <payload>`, a shape the header stripper knows."""
    for entry in entries:
        if isinstance(entry, dict):
            timestamp = entry.get("timestamp")
            severity = entry.get("severity") or "DEFAULT"
            resource = (entry.get("resource") or {}).get("type") or "-"
            payload = entry.get("textPayload")
            if payload is None:
                payload = entry.get("jsonPayload", entry.get("protoPayload"))
        else:
            timestamp = entry.timestamp
            severity = entry.severity or "DEFAULT"
            resource = getattr(entry.resource, "type", None) or "-"
            payload = entry.payload
        if isinstance(timestamp, datetime):
            timestamp = timestamp.isoformat()
        yield f"{timestamp or '-'} {severity} [{resource}] {_payload_text(payload)}"


def _payload_text(payload: Any) -> str:
    if payload is None:
        return ""
    if isinstance(payload, dict):
        for key in ("message", "msg", "textPayload"):
            if isinstance(payload.get(key), str):
                return payload[key].replace("\n", " ")
        return json.dumps(payload, separators=(",", ":"), sort_keys=True, default=str)
    return str(payload).replace("\n", " ")
