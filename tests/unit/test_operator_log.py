"""The operator's log at its default level: kopf's line for each handler that merely queued a
watch event is left out, while failures and the operator's own lines stay."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from lightsout.handlers import lifecycle

pytestmark = pytest.mark.unit


@pytest.fixture
def quiet() -> Iterator[logging.Logger]:
    lifecycle.quiet_handler_successes()
    logger = logging.getLogger("kopf.objects")
    try:
        yield logger
    finally:
        logger.removeFilter(lifecycle._DROP_SUCCESSES)


def test_handler_successes_are_left_out_and_failures_kept(
    quiet: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    quiet.info("Handler 'queue_machine' succeeded.")
    quiet.info("Handler 'cache_listed' succeeded.")
    quiet.error("Handler 'queue_machine' failed with an exception. Will retry.")
    quiet.info("Handler 'queue_machine' succeeded. And more.")
    logging.getLogger("lightsout.handlers.node").info("Handler 'x' succeeded.")
    assert [r.getMessage() for r in caplog.records] == [
        "Handler 'queue_machine' failed with an exception. Will retry.",
        "Handler 'queue_machine' succeeded. And more.",
        "Handler 'x' succeeded.",
    ]


def test_verbose_keeps_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    logging.getLogger("kopf.objects").info("Handler 'queue_machine' succeeded.")
    assert [r.getMessage() for r in caplog.records] == ["Handler 'queue_machine' succeeded."]
