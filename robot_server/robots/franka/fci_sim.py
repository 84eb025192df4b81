"""franky-sim on loopback: a MuJoCo FR3 that speaks the FCI network protocol, so the real franka
backend (franky -> libfranka) runs against it unchanged. For tests, benchmarks and lab dry runs;
the backend itself never imports this module.

    python -m robot_server.robots.franka.fci_sim            # prints the address to connect to

franky-sim binds TCP 1337 (robot) and 1338 (gripper) on one loopback address. Several engineers or
CI jobs may run simulators at once, so the address is drawn at random from 127.0.0.0/8 and the next
candidate is tried when one is taken.
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

logger = logging.getLogger(__name__)


def _patch_pinocchio() -> None:
    """franky-sim 1.0.4 reads ``Frame.parentJoint`` (pinocchio 3); pinocchio 2.x (the one that fits
    numpy < 2, which openpi-client requires) calls the same field ``parent``."""
    import pinocchio

    if not hasattr(pinocchio.Frame, "parentJoint"):
        pinocchio.Frame.parentJoint = property(lambda frame: frame.parent)


def loopback_candidates(rng: random.Random | None = None, count: int = 64) -> Iterator[str]:
    """Random 127.a.b.c addresses (never 127.0.0.1, which the services' own ports use)."""
    rng = rng or random.Random()
    for _ in range(count):
        yield f"127.{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


class FciSim:
    """One simulated FR3 + Franka Hand served on a loopback address.

    ``realtime``: True paces the simulator at 1 kHz of wall-clock time, a float is a speed
    multiplier, False runs as fast as the CPU allows.
    """

    def __init__(
        self,
        host: str | None = None,
        realtime: bool | float = True,
        initial_q: tuple[float, ...] | None = None,
    ) -> None:
        self._host_request = host
        self._realtime = realtime
        self._initial_q = initial_q
        self._sim: Any = None
        self._server: Any = None
        self._robot: Any = None
        self.host = ""

    def start(self) -> FciSim:
        if self._server is not None:
            # A second start would orphan the first simulator's thread, stepping forever.
            raise RuntimeError(f"FciSim on {self.host} is already running: stop() it first")
        _patch_pinocchio()
        from franky_sim import SimulationServer
        from franky_sim.mujoco_simulator import MujocoSimulator

        try:
            self._sim = MujocoSimulator(enable_visualization=False)
            self._sim.init()
            kwargs = {} if self._initial_q is None else {"initial_q": self._initial_q}
            self._robot = self._sim.add_robot(**kwargs)
            candidates = [self._host_request] if self._host_request else list(loopback_candidates())
            self._server = SimulationServer(self._sim, hostname_candidates=candidates)
            self._server.init()
            self.host = str(self._robot.hostname)
            self._server.run_async(realtime=self._pacing)
        except BaseException:
            self.stop()  # half started: nothing left running, and a retry may start again
            raise
        logger.info("franky-sim serving an FR3 on %s (TCP 1337/1338)", self.host)
        return self

    @property
    def model(self) -> Any:
        return self._sim.model

    @property
    def data(self) -> Any:
        return self._sim.data

    @property
    def hand_width_m(self) -> float:
        """The simulated hand's finger width, read from the simulator itself (not through FCI):
        what the fingers do, whatever a client is told."""
        return float(self._robot.hand_width)

    @property
    def running(self) -> bool:
        return bool(self._server is not None and self._server.running)

    def freeze(self) -> None:
        """Stop stepping and answering, keeping the sockets open: what a hung controller looks like
        from the client (UDP state stops; TCP still accepts)."""
        thread = self._server.async_thread
        self._server.running = False
        if thread is not None:
            thread.join(timeout=5.0)

    @property
    def _pacing(self) -> bool | float:
        # franky-sim's own ``realtime`` float stretches its 1 ms step (2.0: half speed)
        return self._realtime if isinstance(self._realtime, bool) else 1.0 / float(self._realtime)

    def resume(self) -> None:
        if not self._server.running:
            self._server.run_async(realtime=self._pacing)

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
        if self._sim is not None:
            self._sim.cleanup()
            self._sim = None

    def __enter__(self) -> FciSim:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m robot_server.robots.franka.fci_sim",
        description="Serve a simulated FR3 (franky-sim, MuJoCo) on a loopback address.",
    )
    parser.add_argument("--host", default=None, help="loopback address to bind (default: a free random one)")
    parser.add_argument("--speed", type=float, default=1.0, help="simulation speed, 1.0 = real time")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    with FciSim(host=args.host, realtime=args.speed) as sim:
        print(
            f"franky-sim ready: connect with PDE_FRANKA_HOST={sim.host} PDE_FRANKA_REALTIME=ignore",
            flush=True,
        )
        try:
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
