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
