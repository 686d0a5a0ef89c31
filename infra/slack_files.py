"""Download a file attached in Slack (a log the user dropped into the thread).

`files.info` (slack_sdk WebClient) gives the metadata and `url_private`; the bytes come from a GET
of that URL with `Authorization: Bearer <bot token>`. Two Slack habits shape this module:

* without the `files:read` scope (or when the header is missing) Slack answers 200 with its HTML
  sign-in page instead of the file, so `text/html` is treated as an error that names the scope;
* `size` in files.info can be absent or wrong for snippets, so the cap is checked both before
  the download and while streaming, and again while gunzipping (a small .gz can expand hugely).

`open_slack_file` streams: the content reaches its reader in pieces of at most 64 KiB, so a log
is read in bounded memory whatever its size (handlers/mention_job.py spools its lines to disk).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from infra.gzip_stream import gunzip_chunks, sniff_gzip

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# The cap for a log handed to the digest, as a Slack attachment or a local file (infra/local_files.py).
MAX_LOG_FILE_BYTES = 16 * 1024 * 1024
CHUNK_BYTES = 64 * 1024
SCOPE_HINT = "the bot token needs the files:read scope (reinstall the app after adding it)"


class SlackFileError(Exception):
    """A file could not be fetched; the message is fit to show to the user."""


@dataclass(frozen=True)
class SlackFile:
    id: str
    name: str
    mimetype: str
    data: bytes  # decompressed content
    compressed: bool  # the download was gzip


@dataclass(frozen=True)
class SlackDownload:
    """A file being downloaded: `chunks` is its content, decompressed, in pieces of at most 64 KiB,
    read from the connection as they are consumed; it raises SlackFileError past the cap."""

    id: str
    name: str
    mimetype: str
    compressed: bool  # the download is gzip
    chunks: Iterator[bytes]


def download_slack_file(
    client: WebClient,
    file_id: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = 30.0,
    session: requests.Session | None = None,
) -> SlackFile:
    """Fetch one file by id, whole, into memory; gzip is recognised by its magic bytes and
    decompressed. For a log, `open_slack_file` reads it in bounded memory instead."""
    with open_slack_file(client, file_id, max_bytes=max_bytes, timeout=timeout, session=session) as download:
        data = b"".join(download.chunks)
    return SlackFile(id=download.id, name=download.name, mimetype=download.mimetype, data=data,
                     compressed=download.compressed)


@contextmanager
def open_slack_file(
    client: WebClient,
    file_id: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = 30.0,
    session: requests.Session | None = None,
) -> Iterator[SlackDownload]:
    """One file by id, streamed: the refusals that need no body (scope, size, sign-in page) are
    raised on entry, the caps while `chunks` is read; the connection closes on exit."""
    info = _file_info(client, file_id)
    name = info.get("name") or file_id
    size = info.get("size")
    if isinstance(size, int) and size > max_bytes:
        raise SlackFileError(f"{name} is {size:,} bytes; the limit is {max_bytes:,}")
    url = info.get("url_private_download") or info.get("url_private")
    if not url:
        raise SlackFileError(f"{name} has no url_private (external or tombstoned file)")

    http = session or requests.Session()
    headers = {"Authorization": f"Bearer {client.token}"}
    try:
        with http.get(url, headers=headers, stream=True, timeout=timeout) as response:
            _check_response(response, info, name, max_bytes)
            compressed, chunks = sniff_gzip(_body(response, name, max_bytes))
            if compressed:
                chunks = gunzip_chunks(chunks, max_bytes, name, SlackFileError)
            yield SlackDownload(id=file_id, name=name, mimetype=info.get("mimetype", ""), compressed=compressed,
                                chunks=chunks)
    finally:
        if session is None:
            http.close()


def _file_info(client: WebClient, file_id: str) -> dict[str, Any]:
    try:
        return client.files_info(file=file_id)["file"]
    except SlackApiError as exc:
        error = exc.response.get("error", "unknown_error") if exc.response is not None else "unknown_error"
        if error in ("missing_scope", "not_allowed_token_type"):
            raise SlackFileError(f"files.info refused ({error}): {SCOPE_HINT}") from exc
        if error == "file_not_found":
            raise SlackFileError(f"file {file_id} not found (deleted, or not shared where the bot can see it)") from exc
        raise SlackFileError(f"files.info failed for {file_id}: {error}") from exc


def _check_response(response: requests.Response, info: dict[str, Any], name: str, max_bytes: int) -> None:
    if response.status_code in (401, 403):
        raise SlackFileError(f"Slack refused the download of {name} (HTTP {response.status_code}): {SCOPE_HINT}")
    if response.status_code >= 400:
        raise SlackFileError(f"download of {name} failed: HTTP {response.status_code}")
    content_type = response.headers.get("Content-Type", "")
    if content_type.lower().startswith("text/html") and not _expects_html(info):
        raise SlackFileError(f"Slack sent a sign-in page instead of {name}: {SCOPE_HINT}")
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise SlackFileError(f"{name} is {int(declared):,} bytes; the limit is {max_bytes:,}")


def _body(response: requests.Response, name: str, max_bytes: int) -> Iterator[bytes]:
    """The body as it arrives; `size` in files.info can be absent or wrong, so the cap holds here too."""
    received = 0
    for chunk in response.iter_content(CHUNK_BYTES):
        received += len(chunk)
        if received > max_bytes:
            raise SlackFileError(f"{name} is larger than the {max_bytes:,}-byte limit")
        yield chunk


def _expects_html(info: dict[str, Any]) -> bool:
    return info.get("filetype") == "html" or info.get("mimetype") == "text/html"
