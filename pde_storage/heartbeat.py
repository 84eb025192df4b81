"""The heartbeat thread of the services that report through the database (the episode loop, the
supervisor): their ``service_states`` row stays fresh while their main thread is busy with long
work (an episode, a slow poll), so ``pde health`` and the page never call a live service dead."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

log = logging.getLogger(__name__)


class Heartbeat:
    """Calls ``beat`` every ``period_s`` on its own thread between ``start()`` (or entering the
    ``with`` block) and ``stop()``. A beat that raises (a busy database) is logged and the next
    one tries again; the thread never ends on its own."""

    def __init__(
        self, name: str, period_s: float, beat: Callable[[], None], join_timeout_s: float = 5.0
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"heartbeat period must be > 0 s, got {period_s}")
        self.name = name
        self.period_s = period_s
        self.join_timeout_s = join_timeout_s
        self._beat = beat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self._beat()
            except Exception as e:  # the next beat will do; the service itself is not affected
                log.warning("%s not written: %s", self.name, e)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop beating; waits up to ``join_timeout_s`` for a beat in progress."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.join_timeout_s)

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
