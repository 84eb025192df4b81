"""Start services as child processes, wait for their health, stop them all cleanly.

Used by ``pde demo`` and by tests that run the compose services as plain processes. Each child gets
its own process group so a Ctrl-C or a failure tears down everything it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class ServiceError(RuntimeError):
    pass


@dataclass
class Service:
    name: str
    argv: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class ProcessGroup:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.services: dict[str, Service] = {}

    def start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> Service:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        full_env = dict(os.environ)
        full_env.update(env or {})
        log = log_path.open("ab")
        proc = subprocess.Popen(
            list(argv), env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()  # the child keeps its own descriptor
        svc = Service(name, argv, env or {}, log_path, proc)
        self.services[name] = svc
        return svc

    def wait_healthy(self, name: str, check: Callable[[], bool], timeout_s: float) -> None:
        svc = self.services[name]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not svc.alive:
                raise ServiceError(
                    f"{name} exited with code {self._rc(svc)}; last log lines:\n{self.tail(name)}"
                )
            try:
                if check():
                    return
            except Exception:  # not up yet: keep polling until the deadline
                pass
            time.sleep(0.2)
        raise ServiceError(f"{name} not healthy after {timeout_s:.0f} s; last log lines:\n{self.tail(name)}")

    def restart(self, name: str, argv: Sequence[str] | None = None) -> Service:
        """Start ``name`` again (after a crash) with its environment, and ``argv`` if given (else its
        own); its log continues in the same file."""
        svc = self.services[name]
        self.stop(name)
        return self.start(name, svc.argv if argv is None else argv, svc.env)

    def tail(self, name: str, lines: int = 20) -> str:
        path = self.services[name].log_path
        if path is None or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def first_dead(self) -> Service | None:
        return next((s for s in self.services.values() if not s.alive), None)

    def stop(self, name: str, timeout_s: float = 10.0) -> int | None:
        svc = self.services[name]
        if svc.process is None:
            return None
        if svc.alive:
            self._signal(svc, signal.SIGTERM)
            try:
                svc.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                print(f"{name}: no exit {timeout_s:.0f} s after SIGTERM, killing", file=sys.stderr)
                self._signal(svc, signal.SIGKILL)
                svc.process.wait()
        return svc.process.returncode

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash would (fault tests)."""
        svc = self.services[name]
        if svc.alive:
            self._signal(svc, signal.SIGKILL)
            assert svc.process is not None
            svc.process.wait()

    def stop_all(self) -> None:
        # reverse start order: clients go before the servers they talk to
        for name in reversed(list(self.services)):
            self.stop(name)

    @staticmethod
    def _rc(svc: Service) -> int | None:
        return None if svc.process is None else svc.process.poll()

    @staticmethod
    def _signal(svc: Service, sig: int) -> None:
        assert svc.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(svc.process.pid, sig)
