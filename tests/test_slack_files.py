"""download_slack_file against a local server speaking Slack's files.info JSON and url_private."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from slack_sdk import WebClient

from agent.digest import build_digest, lines_from_bytes
from infra.slack_files import SlackFileError, download_slack_file

BOT_TOKEN = "xoxb-1111-2222-testtoken"
SIGN_IN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"


class FakeSlack:
    """files.info + url_private, the way Slack answers them (including the HTML sign-in page
    that a token without files:read gets)."""

    def __init__(self) -> None:
        self.files: dict[str, dict] = {}
        self.downloads: list[dict[str, str]] = []  # headers seen on url_private
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, file_id: str, name: str, content: bytes, *, size: int | None = None, scoped: bool = True, **extra) -> None:
        self.files[file_id] = {"name": name, "content": content, "size": len(content) if size is None else size, "scoped": scoped, **extra}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: bytes, content_type: str, with_length: bool = True) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                if with_length:  # without it the body runs to connection close (HTTP/1.0)
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _files_info(self, params: dict) -> None:
                if self.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
                    return self._send(200, json.dumps({"ok": False, "error": "invalid_auth"}).encode(), "application/json")
                file_id = (params.get("file") or [""])[0]
                meta = fake.files.get(file_id)
                if meta is None:
                    return self._send(200, json.dumps({"ok": False, "error": "file_not_found"}).encode(), "application/json")
                file_json = {
                    "id": file_id,
                    "name": meta["name"],
                    "title": meta["name"],
                    "mimetype": meta.get("mimetype", "text/plain"),
                    "filetype": meta.get("filetype", "text"),
                    "size": meta["size"],
                    "url_private": f"{fake.base}/files-pri/T0001-{file_id}/{meta['name']}",
                    "url_private_download": f"{fake.base}/files-pri/T0001-{file_id}/download/{meta['name']}",
                }
                body = {"ok": True, "file": file_json, "comments": [], "response_metadata": {"next_cursor": ""}}
                self._send(200, json.dumps(body).encode(), "application/json; charset=utf-8")

            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                if url.path == "/api/files.info":
                    return self._files_info(parse_qs(url.query))
                if url.path.startswith("/files-pri/"):
                    file_id = url.path.split("/")[2].split("-", 1)[1]
                    meta = fake.files[file_id]
                    fake.downloads.append(dict(self.headers))
                    if not meta["scoped"] or self.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
                        return self._send(200, SIGN_IN_PAGE, "text/html; charset=utf-8")
                    return self._send(200, meta["content"], meta.get("mimetype", "text/plain"), not meta.get("stream"))
                self._send(404, b"not found", "text/plain")

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode()
                url = urlparse(self.path)
                if url.path == "/api/files.info":
                    params = parse_qs(body) if "json" not in (self.headers.get("Content-Type") or "") else {
                        k: [v] for k, v in json.loads(body).items()
                    }
                    return self._files_info({**parse_qs(url.query), **params})
                self._send(404, b"not found", "text/plain")

            def log_message(self, *args) -> None:
                return

        return Handler

    def __enter__(self) -> FakeSlack:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(fake_slack: FakeSlack) -> WebClient:
    return WebClient(token=BOT_TOKEN, base_url=f"{fake_slack.base}/api/")


LOG = b"".join(
    f"2024-03-01 12:00:{i % 60:02d},000 {'ERROR' if i == 70 else 'INFO'} [main] svc.Worker: step {i} done\n".encode()
    for i in range(200)
)


def test_plain_file_is_downloaded_with_the_bot_token(fake_slack, client):
    fake_slack.add("F001", "worker.log", LOG)
    file = download_slack_file(client, "F001")
    assert file.data == LOG and not file.compressed
    assert file.name == "worker.log"
    assert fake_slack.downloads[0]["Authorization"] == f"Bearer {BOT_TOKEN}"
    digest = build_digest(lines_from_bytes(file.data))
    assert digest.templates[0].exemplars[0].line == 71


def test_gzip_is_recognised_by_magic_bytes(fake_slack, client):
    fake_slack.add("F002", "worker.log.gz", gzip.compress(LOG), mimetype="application/gzip", filetype="gzip")
    file = download_slack_file(client, "F002")
    assert file.compressed
    assert file.data == LOG


def test_html_sign_in_page_is_an_error_naming_the_scope(fake_slack, client):
    fake_slack.add("F003", "worker.log", LOG, scoped=False)
    with pytest.raises(SlackFileError, match="files:read"):
        download_slack_file(client, "F003")


def test_size_cap_is_checked_before_downloading(fake_slack, client):
    fake_slack.add("F004", "huge.log", LOG, size=10_000_000_000)
    with pytest.raises(SlackFileError, match="limit"):
        download_slack_file(client, "F004", max_bytes=1_000_000)
    assert fake_slack.downloads == []  # refused from files.info alone


def test_size_cap_is_checked_while_streaming_when_files_info_understates(fake_slack, client):
    big = LOG * 50
    fake_slack.add("F005", "big.log", big, size=10, stream=True)  # no Content-Length either
    with pytest.raises(SlackFileError, match="limit"):
        download_slack_file(client, "F005", max_bytes=len(big) // 2)


def test_gzip_bomb_is_capped(fake_slack, client):
    bomb = gzip.compress(b"A" * 5_000_000)
    fake_slack.add("F006", "bomb.log.gz", bomb)
    with pytest.raises(SlackFileError, match="expands"):
        download_slack_file(client, "F006", max_bytes=1_000_000)


def test_missing_file_is_a_clear_error(fake_slack, client):
    with pytest.raises(SlackFileError, match="not found"):
        download_slack_file(client, "F404")
