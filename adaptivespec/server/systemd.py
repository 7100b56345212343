"""sd_notify over the NOTIFY_SOCKET datagram socket, without libsystemd.

A path starting with '@' is an abstract socket. Without NOTIFY_SOCKET every call is a no-op,
so the daemon behaves the same outside systemd.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        address = env.get("NOTIFY_SOCKET", "")
        self._address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        mine = pid is None or pid == str(os.getpid())
        self.watchdog_interval = int(usec) / 2e6 if usec and usec.isdigit() and mine else None

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, message: str) -> None:
        if not self._address:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            # Never block the event loop: a reader whose queue is full loses this message
            # (systemd reads at once; the next watchdog ping comes soon).
            sock.setblocking(False)
            sock.connect(self._address)
            try:
                sock.sendall(message.encode())
            except BlockingIOError:
                log.warning("the notify socket's queue is full; %r was dropped", message)

    async def watchdog(self, healthy: Callable[[], bool]) -> None:
        """Pets the watchdog from the event loop itself while `healthy()`: a stalled loop or a
        dead engine stops the petting, and systemd restarts the service."""
        if self.watchdog_interval is None:
            return
        while healthy():
            self.notify("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval)
        log.error("the engine is not healthy; stopped petting the systemd watchdog, so it restarts us")
