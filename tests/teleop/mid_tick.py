"""A hand on the fake SpaceMouse that changes it halfway through a control tick of a slow server,
for the tests that assert a change runs at the server's very next tick (in ticks, never timed):
the recorder's (tests/teleop/test_record_sim.py) and a takeover's
(tests/learner/test_actor_takeover_sim.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pde_contract.client import RobotClient
from teleop.base import TeleopSource
from teleop.settings import TeleopSettings
from teleop.spacemouse import SpaceMouseSource
from tests.learner.test_actor_sim import running_sim_server
from tests.teleop.fakes import FakeSpaceMouseHID

# A tick a second: a change halfway through a tick leaves the client half a second to send it
# before the next tick (the tests assert ticks, and must hold on a loaded machine).
SLOW_RATE_HZ = 1.0
SMALL_PUSH = 50  # raw SpaceMouse axis value, just past the deadband (35 of 350): about 5 mm a tick


@contextmanager
def slow_server_and_spacemouse(
    tmp_path: Path,
) -> Iterator[tuple[str, RobotClient, FakeSpaceMouseHID, TeleopSource]]:
    """A `pde robot-server --backend sim` process at ``SLOW_RATE_HZ`` (realtime pacing), a client
    of it for the hand to watch its ticks with, the fake HID device and a ``SpaceMouseSource`` on
    it: (endpoint, watcher, device, source)."""
    hid = FakeSpaceMouseHID()
    with (
        running_sim_server(
            tmp_path,
            pacing="realtime",
            PDE_ROBOT_HEARTBEAT_TIMEOUT_S="2.0",
            PDE_ROBOT_CONTROL_RATE_HZ=str(SLOW_RATE_HZ),
        ) as (endpoint, _),
        RobotClient(endpoint, name="hand", timeout_s=5.0) as watcher,
        SpaceMouseSource(TeleopSettings(), lambda: hid) as source,
    ):
        yield endpoint, watcher, hid, source


@dataclass(frozen=True)
class Change:
    """The device's x axis set to ``x`` (raw) between the server's tick counter reads ``before``
    and ``after`` (the index of the next tick to run: the tick that should run the change)."""

    before: int
    after: int
    x: int


def change_mid_tick(hid: FakeSpaceMouseHID, watcher: RobotClient, xs: Sequence[int]) -> list[Change]:
    """Per value in ``xs``: wait for the next tick, then half a tick, and set the device's x axis
    to it. Then, two ticks on (the row after the last change's is sent too), press the end
    button."""

    def next_tick() -> None:
        tick = watcher.status().tick
        while watcher.status().tick == tick:
            time.sleep(0.005)

    changes = []
    for x in xs:
        next_tick()
        time.sleep(0.5 / SLOW_RATE_HZ)  # halfway to the next tick
        before = watcher.status().tick
        hid.push_translation(x, 0, 0)
        changes.append(Change(before, watcher.status().tick, x))
    next_tick()
    next_tick()
    hid.push_buttons(1 << TeleopSettings().spacemouse_end_button)
    return changes


def assert_each_within_a_tick(changes: Sequence[Change]) -> None:
    """Else the test says nothing of which tick a change should have run at."""
    for c in changes:
        assert c.before == c.after, "the hand changed the device across a tick boundary: the test is void"
