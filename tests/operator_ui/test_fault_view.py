"""How the page reads a robot server's fault report (pde_contract RobotFault) into its banner text
and the robot_server pill."""

from __future__ import annotations

from operator_ui.robot_link import fault_blocks_motion, fault_text, limits_text
from pde_contract.messages import Counters, RobotFault, Status


def _status(fault: RobotFault, detail: str = "", action: str = "") -> Status:
    return Status(
        backend="franka",
        connected=True,
        estopped=False,
        estop_reason="",
        executing_chunk_seq=0,
        episode_id="",
        steps_remaining=0,
        holding=True,
        counters=Counters(),
        fault=fault,
        fault_detail=detail,
        fault_action=action,
    )


def test_no_fault_is_no_banner_and_no_red_pill() -> None:
    st = _status(RobotFault.NONE)
    assert fault_text(st) == "" and not fault_blocks_motion(st)


def test_a_latched_fault_shows_what_happened_and_what_to_do_and_blocks() -> None:
    st = _status(RobotFault.USER_STOP, "the user stop is engaged", "Release the user stop, then Reset.")
    assert fault_text(st) == "user_stop: the user stop is engaged — Release the user stop, then Reset."
    assert fault_blocks_motion(st)


def test_a_recovered_communication_error_is_shown_but_does_not_block() -> None:
    st = _status(RobotFault.COMMUNICATION, "communication_constraints_violation (recovered)")
    assert fault_text(st).startswith("communication: ") and not fault_blocks_motion(st)


def test_the_limits_in_force_read_as_the_box_and_the_dynamics_factor() -> None:
    st = _status(RobotFault.NONE)
    assert limits_text(st) == ""  # a server that does not report them
    st.workspace_min_m, st.workspace_max_m = [0.2, -0.3, 0.05], [0.6, 0.35, 0.4]
    assert limits_text(st) == "box x 0.200…0.600 y -0.300…0.350 z 0.050…0.400 m"
    st.relative_dynamics_factor = 0.1
    assert limits_text(st).endswith(" m · dynamics factor 0.1")
