"""A hand that jitters on the SpaceMouse while the recorder follows it, on the sim robot server in
this process (realtime pacing, 10 Hz). Counted in rows, never timed."""

from __future__ import annotations

import threading
import time

from pde_contract.client import RobotClient
from pde_contract.tasks import load_tasks
from robot_server.server import RobotServer
from teleop.recorder import Recorder
from teleop.settings import TeleopSettings
from teleop.spacemouse import SpaceMouseSource
from tests.learner.test_actor_overlap_sim import sim_server  # noqa: F401  (a fixture)
from tests.teleop.fakes import JitteryHand
from tests.teleop.mid_tick import SMALL_PUSH

TASK = load_tasks(None).get("put_bowl_on_top_rack")


def test_a_jittering_hand_on_the_spacemouse_is_recorded_a_row_per_tick(
    sim_server: tuple[str, RobotServer],  # noqa: F811
) -> None:
    """A SpaceMouse whose row changes at every read (a hand's jitter) is followed without being
    chased: the recorder waits for each row's tick, not for every newer row (it chased them, and
    failed the take after observation_timeout_s: "row 0 was accepted but did not run"). The take
    keeps one row per tick until the end button."""
    endpoint, server = sim_server
    hid = JitteryHand(SMALL_PUSH)
    with (
        SpaceMouseSource(TeleopSettings(), lambda: hid) as source,
        RobotClient(endpoint, name="pde-record", timeout_s=5.0) as client,
    ):
        recorder = Recorder(client, TeleopSettings(observation_timeout_s=2.0))
        recorder.reset(TASK, seed=0)

        def hand() -> None:
            hid.holding = True
            # past observation_timeout_s (2 s at 10 Hz), so a chased row fails the take
            until = server.executor.snapshot().tick + 30
            while server.executor.snapshot().tick < until:
                time.sleep(0.005)
            hid.push_buttons(1 << TeleopSettings().spacemouse_end_button)

        thread = threading.Thread(target=hand, daemon=True)
        thread.start()
        try:
            take = recorder.record(source, TASK, seed=0)
        finally:
            thread.join(10.0)
    st = take.stats
    assert st.rows_dropped == 0 and st.rows_executed is not None
    assert st.rows_recorded == st.rows_executed >= 10
