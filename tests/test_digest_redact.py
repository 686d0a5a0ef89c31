"""agent.redact.redact: secrets out, surrounding text kept."""

from __future__ import annotations

import pytest

from agent.redact import Redactor, redact

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
    ('{"password": "correct horse battery"}', "battery"),  # a quoted value is removed whole
    # Forms the key-name rule (below) covers and the older rule already caught:
    ("vllm serve m --api-key=Zq3f9HkLmN0pQ", "Zq3f9HkLmN0pQ"),
    ('{"api_key": "json-snake-value"}', "json-snake"),
    ('{"apiKey": "json-camel-value", "x": 1}', "json-camel"),
    # Signed URLs: the signature is the credential (Cloud Storage V4, S3 presigned, Azure SAS).
    ("https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Date=20261103T100000Z"
     "&X-Goog-Expires=900&X-Goog-SignedHeaders=host&X-Goog-Signature=5b1e2f0a9c8d7e6f", "5b1e2f0a9c8d7e6f"),
    ("GET https://b.s3.amazonaws.com/o?X-Amz-Expires=900&X-Amz-Signature=aa0b1c2d3e4f5a6b&x=1", "aa0b1c2d3e4f5a6b"),
    ("https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2026-11-04&sp=r&sig=AbC%2Bd0123EfG%3D", "AbC%2Bd0123"),
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


def test_a_signed_url_keeps_its_object_and_expiry_readable():
    cleaned = redact("export at https://storage.googleapis.com/b/run.tar.gz?X-Goog-Expires=900&X-Goog-Signature=ab12cd34ef")
    assert cleaned == ("export at https://storage.googleapis.com/b/run.tar.gz?X-Goog-Expires=900"
                       "&X-Goog-Signature=[REDACTED:signature]")
    assert redact(cleaned) == cleaned


def test_url_user_and_host_are_kept():
    assert redact("https://admin:hunter2@db.internal:5432/x") == "https://admin:[REDACTED:password]@db.internal:5432/x"


def test_ordinary_log_text_is_untouched():
    text = "081109 203615 148 INFO dfs.DataNode: Received block blk_-1608999687919862906 of size 91178 from /10.250.10.6"
    assert redact(text) == text
    assert redact("see https://example.com/a:b and sk-short") == "see https://example.com/a:b and sk-short"
    # Names that only look like a secret's (the key-name rule must leave them be).
    named = ("max_tokens=1024 --max-num-batched-tokens 4096 monkey=banana key=tpubot:lease:T1:C1 "
             "tokens/s=812 --tokenizer google/gemma --enable-prefix-caching token_count: 12")
    assert redact(named) == named


def test_redaction_is_idempotent_and_keeps_a_closing_backtick():
    line = "`Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig` sent"
    once = redact(line)
    assert once == "`Authorization: Bearer [REDACTED:token]` sent"
    assert redact(once) == once


# --- by the name a value is given (issue 34) ---------------------------------------------------

VLLM_KEY = "Zq3f9HkL_x-9aB0cD1eF2gH3iJ4kL5mN6oP7qR8sT9u"  # secrets.token_urlsafe(32): no shape of its own

NAMED = [
    ("VLLM_API_KEY=Zq3f9HkLmN0pQ", "Zq3f9HkLmN0pQ"),
    ("DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("SLACK_SIGNING_SECRET=8f742231b10e8888abcd99yyyzzz", "8f742231b10e"),
    ('export X_TOKEN="a quoted token with spaces"', "quoted token"),
    ("export GITLAB_TOKEN='single-quoted-0123'", "single-quoted"),
    ("  db_password: yaml-plain-value", "yaml-plain"),
    ("vllm serve google/gemma-4-E2B-it --api-key Zq3f9HkLmN0pQ --port 8000", "Zq3f9HkLmN0pQ"),
    ("mysql --password pw-0123456789 -h db", "pw-0123456789"),
    ("client --token tok-0123456789", "tok-0123456789"),
    ('{"clientSecret":"no-space-value"}', "no-space"),
    ('payload "{\\"api_key\\": \\"escaped-json-value\\"}"', "escaped-json"),
    ("(APIServer pid=1) INFO 12-02 10:00:00 [utils.py:253] non-default args: {'model_tag': 'google/gemma-4-E2B-it', "
     f"'host': '0.0.0.0', 'api_key': ['{VLLM_KEY}'], 'model': 'google/gemma-4-E2B-it', 'max_model_len': 16384}}",
     VLLM_KEY[:12]),
    ("non-default args: {'api_key': ['first-key-0123', 'second-key-4567']}", "second-key"),
    ("hf_token: hf-but-not-hf-shaped", "hf-but-not"),
    ("session eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
     "SflKxwRJSMeKKF2QT4fw"),
    ("unsigned eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiJ9.", "eyJzdWIiOiJhZG1pbiJ9"),
]


@pytest.mark.parametrize(("text", "secret"), NAMED, ids=[t[:28] for t, _ in NAMED])
def test_a_value_named_as_a_secret_is_removed_and_the_name_kept(text, secret):
    cleaned = redact(text)
    assert secret not in cleaned and "[REDACTED:" in cleaned
    assert redact(cleaned) == cleaned  # intake and output both redact: a second pass changes nothing


def test_the_shape_around_a_named_secret_is_kept():
    line = f"non-default args: {{'model_tag': 'google/gemma-4-E2B-it', 'api_key': ['{VLLM_KEY}'], 'port': 8000}}"
    assert redact(line) == ("non-default args: {'model_tag': 'google/gemma-4-E2B-it', 'api_key': [REDACTED:api-key], "
                            "'port': 8000}")
    assert redact('export X_TOKEN="a b c" next') == 'export X_TOKEN="[REDACTED:token]" next'
    assert redact("--api-key K0123456789 --port 8000") == "--api-key [REDACTED:api-key] --port 8000"


def test_a_redactor_also_removes_the_literal_values_it_knows():
    signing = "9f3a0c1d2e4b5a6978877665544332211"
    redactor = Redactor([signing]).with_secrets([VLLM_KEY])
    text = f"signature base {signing} and the key {VLLM_KEY} in prose"
    assert redactor(text) == "signature base [REDACTED:secret] and the key [REDACTED:secret] in prose"
    assert redactor.lines([text, "plain"]) == [redactor(text), "plain"]
    assert signing in redact(text)  # a shapeless secret: only the redactor that knows it can find it


# Each rule's regex runs only on text holding one of the pieces any of its matches contains (a
# substring test first: most log lines hold none). Written in letters re's IGNORECASE takes for
# ASCII ones (İ ı for i, ſ for s, K for k), a secret is still found: the look-up text maps them.
@pytest.mark.parametrize("text, secret", [
    ("AUTHORıZATION: Bearer zq3f9hklmn0pq", "zq3f9hklmn0pq"),
    ("AUTHORİZATION: basic zq3f9hklmn0pq", "zq3f9hklmn0pq"),
    ("https://b.example/o?a=1&ſig=zq3f9hklmn0pq", "zq3f9hklmn0pq"),
    ("https://b.example/o?SİG=zq3f9hklmn0pq", "zq3f9hklmn0pq"),
    ("see github_pat_" + "A1" * 16 + " in the runner", "github_pat_A1A1"),
    ("ghs_" + "B2" * 16 + " expired", "ghs_B2B2"),
    ("-----BEGIN EC PRIVATE KEY-----MHcCAQEEIB", "MHcCAQEEIB"),
])
def test_a_secret_in_letters_regex_folds_to_ascii_is_found(text, secret):
    assert secret not in redact(text) and "[REDACTED:" in redact(text)


def test_the_look_up_never_skips_a_rule_that_would_have_matched():
    """On text mixing every rule's secrets, case-swapped and with the look-alike letters, `redact`
    equals each rule's regex run on every text (the redaction before the look-up existed)."""
    import random

    from agent import redact as module

    def every_rule(text: str) -> str:
        for _, pattern, replacement, _pieces in module._RULES:
            text = pattern.sub(replacement, text)
        lowered = text.lower()
        if not any(word in lowered for word in ("key", "secret", "token", "pwd", "passw")):  # its first look
            return text
        return module._redact_named(module._FLAG, module._redact_named(module._ASSIGNMENT, text))

    parts = ["Authorization: Bearer abcdefghijkl", "authorization=token q1w2e3r4", "BEARER 12345678abc",
             "xoxb-1234567890-abc", "xapp-1-A0-123456789", "sk-" + "a" * 20, "AIza" + "b" * 35, "hf_" + "c" * 25,
             "ghp_" + "d" * 31, "github_pat_" + "e" * 31, "AKIAABCDEFGHIJKLMNOP", "ASIA0123456789ABCDEF",
             "https://u:pw@h/x", "?X-Goog-Signature=abc&x=1", "&sig=abc", "eyJabcd.efgh.ij",
             "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----xyz",
             "api_key=12345", "password: hunter22", "--token abcdefgh", "İ", "ı", "ſ", "\u212a", " ", "=", ":", "&",
             "\n", "x", "é", "ß", "tokens/s", "api_key_ = v1", "DB_PWD:", "--api-key  v2", "password_file=", "tokenCount=",
             "KEY2=", '"apiKey": "v3"', '\\"token\\": "v4"', "secret", "key", "-", "_", ".", "'", '"', "\t"]
    rng = random.Random(20261207)
    for _ in range(20_000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(1, 6)))
        text = "".join(c.swapcase() if rng.random() < 0.3 else c for c in text)
        text = text.replace("i", rng.choice("iİı")).replace("s", rng.choice("sſ")).replace("k", rng.choice("k\u212a"))
        assert redact(text) == every_rule(text), text
