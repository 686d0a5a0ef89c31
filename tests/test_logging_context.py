"""A job's log context survives its coroutine being closed outside the context it ran in."""

from __future__ import annotations

import asyncio
import contextvars

from bot.logging_setup import job_context, request_id


def test_a_job_closed_by_the_garbage_collector_in_another_context_raises_nothing():
    # A worker's loop stopped with a job pending; the collector later closes the job's coroutine
    # from whatever context is current (seen as a ValueError from job_context in test runs).
    async def job():
        with job_context("job-1", "lease-1"):
            assert request_id.get() == "job-1"
            await asyncio.sleep(0)  # a bare yield: no loop needed to suspend here

    coroutine = job()
    contextvars.copy_context().run(coroutine.send, None)  # runs up to its first await, in one context
    coroutine.close()  # the finally runs here, in this (another) context
    assert request_id.get() == "-"


def test_job_context_is_undone_on_a_normal_exit():
    with job_context("job-2"):
        assert request_id.get() == "job-2"
    assert request_id.get() == "-"


def test_request_urls_logged_by_httpx_are_silenced_with_their_tokens():
    """httpx logs each request's URL at INFO; a URL's credentials or signed query must not reach the log."""
    import io
    import logging

    import httpx

    from bot.logging_setup import configure_logging

    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("httpx").level, logging.getLogger("httpcore").level)
    try:
        configure_logging(logging.INFO, log_format="json", stream=stream)
        transport = httpx.MockTransport(lambda request: httpx.Response(200, text="# Runbook"))
        with httpx.Client(transport=transport) as client:
            assert client.get("https://ci:hunter2@runbooks.example/payments.md?sig=ghp_s3cr3tvalue").status_code == 200
        logging.getLogger("tpubot.test").info("still logging")
    finally:
        root.handlers[:], level, httpx_level, httpcore_level = saved
        root.setLevel(level)
        logging.getLogger("httpx").setLevel(httpx_level)
        logging.getLogger("httpcore").setLevel(httpcore_level)
    assert "still logging" in stream.getvalue()
    assert "ghp_s3cr3tvalue" not in stream.getvalue() and "hunter2" not in stream.getvalue()
