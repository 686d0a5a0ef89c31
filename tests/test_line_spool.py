"""The streaming pieces of the digest's intake: chunks → capped gunzip → lines → redaction → spool.

Each piece is checked against the whole-input function it replaces (same lines, same errors)
at every chunk boundary, since a stream can be cut anywhere: inside a UTF-8 character, between
`\\r` and `\\n`, inside the gzip magic or between two gzip members.
"""

from __future__ import annotations

import gzip
import io
import random
import tempfile

import pytest

from agent.digest import LineSpool, lines_from_chunks, lines_from_stream
from agent.digest.spool import SpoolClosed
from agent.redact import redact_lines, redact_stream
from infra.gzip_stream import OUT_BYTES, gunzip_chunks, sniff_gzip
from open_files import needs_proc, open_files_under


class Refused(Exception):
    pass


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


# --- chunks → lines ----------------------------------------------------------------------------


TRICKY = "first\r\nsecond é\rthird € ok\n\n".encode() + b"fifth \xff\xfe bytes\r\n\rlast no newline"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64 * 1024])
def test_lines_from_chunks_match_the_stream_reader_at_every_cut(size):
    expected = list(lines_from_stream(io.BytesIO(TRICKY)))
    assert expected == ["first", "second é", "third € ok", "", "fifth \ufffd\ufffd bytes", "", "last no newline"]
    assert list(lines_from_chunks(pieces(TRICKY, size))) == expected


def test_lines_from_chunks_pass_a_reader_error_through_unchanged():
    def failing():
        yield b"one\ntwo\n"
        raise Refused("cap reached")

    lines = lines_from_chunks(failing())
    assert next(lines) == "one"
    with pytest.raises(Refused, match="cap reached"):
        list(lines)


def test_redact_stream_is_redact_lines_one_line_at_a_time():
    lines = ["a password=abc123", "-----BEGIN RSA PRIVATE KEY-----", "MIIEsecret", "-----END RSA PRIVATE KEY-----",
             "after xoxb-1234567890-abcdefgh"]
    taken: list[str] = []

    def source():
        for line in lines:
            taken.append(line)
            yield line

    streamed = redact_stream(source())
    assert next(streamed) == "a password=[REDACTED:password]" and len(taken) == 1  # nothing read ahead
    assert ["a password=[REDACTED:password]", *streamed] == redact_lines(lines)


# --- capped gunzip -----------------------------------------------------------------------------


LOG = b"".join(b"2026-01-01 12:00:%02d INFO step %d done\n" % (i % 60, i) for i in range(5_000))


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_gunzip_chunks_inflate_what_gzip_inflates_in_bounded_pieces(size):
    packed = gzip.compress(LOG) + gzip.compress(b"second member\n")  # `cat a.gz b.gz`
    out = list(gunzip_chunks(pieces(packed, size), 10 * len(LOG), "x.gz", Refused))
    assert b"".join(out) == gzip.decompress(packed)
    assert max(map(len, out)) <= OUT_BYTES


def test_gunzip_chunks_refuse_a_bomb_before_inflating_it():
    bomb = gzip.compress(b"A" * 50_000_000)  # 50 MB of output from ~50 kB
    out = gunzip_chunks(pieces(bomb, 8192), 1_000_000, "bomb.gz", Refused)
    inflated = 0
    with pytest.raises(Refused, match=r"bomb.gz expands beyond the 1,000,000-byte limit"):
        for piece in out:
            inflated += len(piece)
    assert inflated <= 1_000_000  # refused as the output passed the cap, not after all of it


def test_gunzip_chunks_name_a_corrupt_stream_and_ignore_trailing_bytes():
    with pytest.raises(Refused, match=r"x.gz looks like gzip but does not decompress: Error -3"):
        list(gunzip_chunks([b"\x1f\x8b\x08\x00" + b"\xff" * 40], 1_000, "x.gz", Refused))
    padded = gzip.compress(b"kept\n") + b"\x00" * 512  # tape-style zero padding after the member
    assert b"".join(gunzip_chunks(pieces(padded, 3), 1_000, "x.gz", Refused)) == b"kept\n"
    exact = gzip.compress(LOG)
    assert b"".join(gunzip_chunks([exact], len(LOG), "x.gz", Refused)) == LOG  # the cap itself is allowed
    with pytest.raises(Refused, match="expands beyond"):
        list(gunzip_chunks([exact], len(LOG) - 1, "x.gz", Refused))


def test_sniff_gzip_keeps_every_byte_even_when_the_magic_is_split():
    packed = gzip.compress(b"hello\n")
    compressed, chunks = sniff_gzip(iter(pieces(packed, 1)))
    assert compressed and b"".join(chunks) == packed
    compressed, chunks = sniff_gzip([b"\x1f", b"not gzip"])
    assert not compressed and b"".join(chunks) == b"\x1fnot gzip"
    assert sniff_gzip([])[0] is False


# --- the spool ---------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [1, 2, 5, 64 * 1024])
def test_spool_reads_back_forward_and_backward_at_any_block_size(block):
    rng = random.Random(block)
    for _ in range(50):
        lines = ["".join(rng.choice("ab \r\té€\ud83d") for _ in range(rng.randrange(0, 9)))
                 for _ in range(rng.randrange(0, 12))]
        with LineSpool.filled(lines, block_bytes=block) as spool:
            assert len(spool) == len(lines) and bool(spool) == bool(lines)
            assert list(spool) == lines  # a lone surrogate, a bare \r: every str comes back as it went in
            assert list(reversed(spool)) == lines[::-1]
            assert list(spool) == lines  # and again: iterating reads the file, it does not drain it


def test_spool_keeps_the_numbering_when_a_line_holds_a_newline():
    with LineSpool.filled(["one", "two\nhalves", "three"]) as spool:
        assert list(spool) == ["one", "two halves", "three"]


def test_spool_iterations_run_side_by_side_and_stop_once_it_is_closed():
    spool = LineSpool.filled((f"line {i}" for i in range(1_000)), block_bytes=64)
    forward, backward = iter(spool), reversed(spool)
    assert [next(forward), next(backward), next(forward)] == ["line 0", "line 999", "line 1"]
    spool.close()
    with pytest.raises(SpoolClosed):
        list(forward)
    with pytest.raises(SpoolClosed):
        list(spool)
    assert spool.closed and len(spool) == 1_000


@needs_proc
def test_spool_has_no_name_and_is_gone_when_closed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spool = LineSpool.filled(["a", "b"])
    assert list(tmp_path.iterdir()) == []  # never a directory entry, so a killed process leaves nothing
    assert len(open_files_under(tmp_path)) == 1
    spool.close()
    assert open_files_under(tmp_path) == []


@needs_proc
def test_a_spool_being_filled_is_closed_when_its_source_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def failing():
        yield "one"
        assert len(open_files_under(tmp_path)) == 1  # the spool is open while it fills
        raise Refused("the download broke")

    with pytest.raises(Refused):
        LineSpool.filled(failing())
    assert open_files_under(tmp_path) == []
