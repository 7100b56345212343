from __future__ import annotations

import asyncio
import socket
import uuid

import pytest

from adaptivespec.server.systemd import Notifier


def test_notify_reaches_an_abstract_socket_and_does_nothing_without_one() -> None:
    name = f"adaptivespec-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        listener.settimeout(2)
        Notifier({"NOTIFY_SOCKET": "@" + name}).notify("READY=1")
        assert listener.recv(64) == b"READY=1"
    silent = Notifier({})
    assert not silent.enabled
    silent.notify("READY=1")  # no socket, no error


def test_watchdog_interval_is_half_of_watchdog_usec_and_respects_the_pid() -> None:
    assert Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "4000000"}).watchdog_interval == 2.0
    assert Notifier({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}).watchdog_interval is None
    assert asyncio.run(Notifier({}).watchdog(lambda: True)) is None  # returns at once without a watchdog


def test_the_watchdog_stops_when_the_engine_is_unhealthy() -> None:
    """systemd restarts a service whose watchdog goes quiet: a dead engine must make it quiet."""
    name = f"adaptivespec-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        listener.settimeout(2)
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "20000"})
        health = iter([True, True, True, False])
        asyncio.run(asyncio.wait_for(notifier.watchdog(lambda: next(health)), timeout=5))  # returns
        pings = [listener.recv(64) for _ in range(3)]
        assert pings == [b"WATCHDOG=1"] * 3
        listener.settimeout(0.1)
        with pytest.raises(TimeoutError):
            listener.recv(64)


def test_notify_never_blocks_when_the_reader_falls_behind() -> None:
    """The watchdog pets from the event loop: a notify socket whose queue is full must not
    stall it (a unix datagram queue holds a few messages only)."""
    import time

    name = f"adaptivespec-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)  # never read
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        began = time.monotonic()
        for _ in range(200):
            notifier.notify("WATCHDOG=1")
        assert time.monotonic() - began < 5
