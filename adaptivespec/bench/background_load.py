"""A steady CPU load beside a benchmark: a machine doing other work, on purpose.

Each worker is a separate Python process that multiplies small matrices on one thread until
it is stopped, so it takes one core's compute and some of its cache, as another tenant's job
would. Contenders are measured in interleaved segments, so the load falls on each of them
alike. Workers are plain subprocesses (not multiprocessing's), so the load works however the
benchmark was launched (`python -c`, an embedding), and dies with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import TracebackType

SIZE = 192  # float64 matrices of this side: 288 KiB each, a core's L2 and some of the shared L3

# The worker stops when its parent does (its stdin closes) as well as when it is terminated.
_BURN = f"""
import sys, threading
import numpy as np
threading.Thread(target=lambda: (sys.stdin.read(), __import__("os")._exit(0)), daemon=True).start()
rng = np.random.default_rng(0)
a, b = rng.standard_normal(({SIZE}, {SIZE})), rng.standard_normal(({SIZE}, {SIZE}))
while True:
    a = np.tanh(a @ b)
"""


class BackgroundLoad:
    """`with BackgroundLoad(n):` runs n busy single-threaded processes (n = 0: none)."""

    def __init__(self, workers: int) -> None:
        if workers < 0:
            raise ValueError(f"background load must be >= 0 workers, got {workers}")
        self.workers = workers
        self._processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> BackgroundLoad:
        one_thread = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
        env = os.environ | one_thread
        for _ in range(self.workers):
            process = subprocess.Popen([sys.executable, "-c", _BURN], stdin=subprocess.PIPE, env=env)
            self._processes.append(process)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for process in self._processes:
            process.terminate()
        for process in self._processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdin is not None:
                process.stdin.close()
        self._processes.clear()

    @property
    def running(self) -> int:
        return sum(p.poll() is None for p in self._processes)
