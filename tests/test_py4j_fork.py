"""A child process forked from the driver must not break the driver's Spark (py4j) connections."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading


def test_a_forked_child_leaves_the_drivers_spark_connections_alone(spark, caplog):
    """Ray starts its head processes with ``subprocess`` and a ``preexec_fn``, so Python runs in the forked
    child before ``exec``; there Python's thread clean-up finalises the other threads' py4j connections, and
    py4j's close shuts each socket down, which resets the driver's connection too (py4j then logs "Exception
    while sending command" with a traceback and resends)."""
    ready, done = threading.Event(), threading.Event()

    def worker():  # a live thread with its own py4j connection, as the driver's evaluation threads have
        spark.range(2).count()
        ready.set()
        done.wait(30)
        spark.range(3).count()

    thread = threading.Thread(target=worker)
    thread.start()
    assert ready.wait(60)
    with caplog.at_level(logging.INFO):
        subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=True)
        assert spark.range(4).count() == 4
        done.set()
        thread.join(60)
    noise = [r.getMessage() for r in caplog.records if "sending" in r.getMessage()]
    assert noise == []
