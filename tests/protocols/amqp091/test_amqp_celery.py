"""A celery task round trip through mainstem's AMQP listener (py-amqp transport, RPC results
over AMQP too), with a real in-process worker. The worker takes ~10 s to stop, against
RabbitMQ too."""

from __future__ import annotations

import logging

from celery import Celery
from celery.contrib.testing.worker import start_worker

from mainstem.testing import ThreadedBroker


def test_celery_task_round_trip(mainstem_server: ThreadedBroker) -> None:
    app = Celery("mainstem_test", broker=mainstem_server.urls["amqp"], backend="rpc://")
    app.conf.update(broker_connection_retry_on_startup=False, worker_hijack_root_logger=False,
                    worker_redirect_stdouts=False)  # leave the test run's streams alone

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    root_level = logging.getLogger().level  # the worker sets the root logger to ERROR
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
            assert add.delay(2, 3).get(timeout=20) == 5
            assert add.apply_async((40, 2), priority=3).get(timeout=20) == 42
    finally:
        logging.getLogger().setLevel(root_level)
