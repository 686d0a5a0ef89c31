"""agent.redact.redact: secrets out, surrounding text kept."""

from __future__ import annotations

import pytest

from agent.redact import redact

CASES = [
    ("bot token xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx in config", "xoxb-1234"),
    ("user token xoxp-1111-2222-3333-abcdef0123456789", "xoxp-1111"),
    ("app token xapp-1-A0123456789-1234567890123-abcdef0123456789abcdef", "xapp-1-A01"),
    ("refresh xoxr-abcdefgh-12345678", "xoxr-abcd"),
    ("Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxIn0.sig-nature_x", "eyJhbGci"),
    ("curl -H 'authorization: bearer ya29.a0AfH6SMBxyzxyzxyz'", "ya29.a0Af"),
    ("OPENAI_API_KEY=sk-proj-AbCdEf0123456789AbCdEf0123456789", "sk-proj-AbCdEf"),
    ("key AIzaSyA1234567890abcdefghijklmnopqrstuv used", "AIzaSyA123"),
    ("HF_TOKEN hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "hf_AbCdEf"),
    ("redis://default:s3cr3tPass@10.0.0.5:6379/0", "s3cr3tPass"),
    ("postgresql://app:p%40ss@db/app", "p%40ss"),
    ("login failed password=hunter2 for admin", "hunter2"),
    ('{"password": "correct horse battery"}', "correct"),
]


@pytest.mark.parametrize(("text", "secret"), CASES)
def test_secret_is_removed(text, secret):
    cleaned = redact(text)
    assert secret not in cleaned
    assert "[REDACTED:" in cleaned


def test_private_key_block_is_removed_whole():
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\nabcDEF==\n-----END RSA PRIVATE KEY-----"
    cleaned = redact(f"key:\n{pem}\nafter")
    assert "MIIEow" not in cleaned and "abcDEF" not in cleaned
    assert cleaned == "key:\n[REDACTED:private-key]\nafter"


def test_url_user_and_host_are_kept():
    assert redact("https://admin:hunter2@db.internal:5432/x") == "https://admin:[REDACTED:password]@db.internal:5432/x"


def test_ordinary_log_text_is_untouched():
    text = "081109 203615 148 INFO dfs.DataNode: Received block blk_-1608999687919862906 of size 91178 from /10.250.10.6"
    assert redact(text) == text
    assert redact("see https://example.com/a:b and sk-short") == "see https://example.com/a:b and sk-short"


def test_redaction_is_idempotent_and_keeps_a_closing_backtick():
    line = "`Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig` sent"
    once = redact(line)
    assert once == "`Authorization: Bearer [REDACTED:token]` sent"
    assert redact(once) == once
