"""The TeleopSource contract, for every source, and what each one makes of its input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pde_contract.messages import ACTION_DIMS, ActionSpace
from teleop.base import TeleopCommand, TeleopNotConnectedError, TeleopSource
from teleop.guiding import HandGuidingSource
from teleop.keyboard import KeyboardSource, ScriptedKeys
from teleop.page import PageCommand, PageCommandBox, PageSource
from teleop.scripted import ScriptedSource
from teleop.settings import TeleopSettings
from teleop.spacemouse import SpaceMouseSource
from tests.teleop.fakes import FakeSpaceMouseHID

PERIOD_S = 0.1
SETTINGS = TeleopSettings()
OPEN_M, CLOSED_M = SETTINGS.gripper_open_m, SETTINGS.gripper_closed_m

SOURCES: dict[str, Callable[[], TeleopSource]] = {
    "spacemouse": lambda: SpaceMouseSource(SETTINGS, FakeSpaceMouseHID),
    "keyboard": lambda: KeyboardSource(lambda: ScriptedKeys([["w"], ["w"]]), SETTINGS),
    "guiding": lambda: HandGuidingSource(max_ticks=5),
    "scripted": lambda: ScriptedSource([np.zeros(7)] * 3),
    "page": lambda: PageSource(PageCommandBox().latest, SETTINGS),
}


# --- the contract ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SOURCES)
def test_a_source_refuses_to_read_before_connect(name: str) -> None:
    source = SOURCES[name]()
    assert not source.is_connected
    with pytest.raises(TeleopNotConnectedError, match="connect"):
        source.start_take(OPEN_M)
    with pytest.raises(TeleopNotConnectedError, match="connect"):
        source.read(PERIOD_S)


@pytest.mark.parametrize("name", SOURCES)
def test_a_source_gives_one_ee_delta_row_per_tick_and_disconnects(name: str) -> None:
    source = SOURCES[name]()
    with source:
        assert source.is_connected
        source.start_take(OPEN_M)
        for _ in range(2):
            cmd = source.read(PERIOD_S)
            assert isinstance(cmd, TeleopCommand) and not cmd.end
            row = cmd.ee_delta_row()
            assert row.shape == (ACTION_DIMS[ActionSpace.EE_DELTA],) and np.isfinite(row).all()
            assert 0.0 <= row[6] <= OPEN_M
            if source.guided:  # the hand moves the arm: the source commands no motion
                assert not row[:6].any()
    assert not source.is_connected
    source.disconnect()  # twice is fine


@pytest.mark.parametrize("name", SOURCES)
def test_a_take_starts_with_the_measured_gripper(name: str) -> None:
    source = SOURCES[name]()
    with source:
        source.start_take(CLOSED_M)
        assert source.read(PERIOD_S).gripper_width_m == CLOSED_M


@pytest.mark.parametrize("name", SOURCES)
def test_an_idle_source_does_not_ask_to_take_over(name: str) -> None:
    with SOURCES[name]() as source:
        assert not source.wants_control()


# --- SpaceMouse --------------------------------------------------------------------------------


def _spacemouse(**settings: object) -> tuple[SpaceMouseSource, FakeSpaceMouseHID]:
    hid = FakeSpaceMouseHID()
    source = SpaceMouseSource(TeleopSettings(**settings), lambda: hid)  # type: ignore[arg-type]
    source.connect()
    source.start_take(OPEN_M)
    return source, hid


def test_spacemouse_deflection_is_speed_with_a_deadband_and_the_settings_signs() -> None:
    source, hid = _spacemouse(deadband=0.1, max_speed_m_s=0.1, max_rotation_rad_s=0.5)
    hid.push_translation(350, 0, 0)  # full push along the device's x
    hid.push_rotation(0, 0, 175)  # half a twist about its z
    cmd = source.read(PERIOD_S)
    np.testing.assert_allclose(cmd.translation_m, [0.1 * PERIOD_S, 0.0, 0.0])
    np.testing.assert_allclose(cmd.rotation_rad, [0.0, 0.0, (0.5 - 0.1) / 0.9 * 0.5 * PERIOD_S])
    hid.push_translation(0, 30, -30)  # inside the 10 % deadband: no motion at all
    hid.push_rotation(0, 0, 0)
    cmd = source.read(PERIOD_S)
    assert not cmd.translation_m.any() and not cmd.rotation_rad.any()


def test_spacemouse_axes_hold_between_reports_and_map_through_order_and_signs() -> None:
    source, hid = _spacemouse(
        deadband=0.0, spacemouse_axis_order=(1, 0, 2, 3, 4, 5), spacemouse_axis_signs=(1, -1, 1, 1, 1, 1)
    )
    hid.push_all_axes(350, 175, 0, 0, 0, 0)  # a 13-byte report with all six axes
    first = source.read(PERIOD_S)
    second = source.read(PERIOD_S)  # no new report: the cap is still deflected
    for cmd in (first, second):
        np.testing.assert_allclose(cmd.translation_m, [0.5 * 0.1 * PERIOD_S, -0.1 * PERIOD_S, 0.0])


def test_spacemouse_buttons_toggle_the_gripper_and_end_the_take() -> None:
    source, hid = _spacemouse()
    hid.push_buttons(0b01)
    hid.push_buttons(0b00)
    assert source.read(PERIOD_S).gripper_width_m == CLOSED_M  # press and release: one toggle
    assert source.read(PERIOD_S).gripper_width_m == CLOSED_M  # stays closed
    hid.push_buttons(0b01)  # held across reads: one toggle only
    assert source.read(PERIOD_S).gripper_width_m == OPEN_M
    assert source.read(PERIOD_S).gripper_width_m == OPEN_M
    hid.push_buttons(0b10)
    assert source.read(PERIOD_S).end


def test_spacemouse_past_its_deadband_asks_to_take_over_and_that_push_drives() -> None:
    source, hid = _spacemouse(deadband=0.1)
    hid.push_translation(0, 30, -30)  # a hand resting on the cap: inside the deadband
    assert not source.wants_control()
    hid.push_translation(0, 0, 200)
    assert source.wants_control()
    source.start_take(OPEN_M)  # the takeover's take: the cap is still pushed
    assert source.read(PERIOD_S).translation_m[2] != 0.0


def test_spacemouse_start_take_forgets_presses_from_before() -> None:
    source, hid = _spacemouse()
    hid.push_buttons(0b10)
    hid.push_buttons(0)
    source.start_take(OPEN_M)
    assert not source.read(PERIOD_S).end


def test_spacemouse_settings_refuse_an_axis_order_that_is_no_permutation() -> None:
    with pytest.raises(ValueError, match="spacemouse_axis_order"):
        TeleopSettings(spacemouse_axis_order=(0, 0, 2, 3, 4, 5))


# --- the operator page's keys and gamepad -------------------------------------------------------


class _PageClock:
    """The page source's wall clock, moved by hand."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _page(**settings: object) -> tuple[PageSource, PageCommandBox, _PageClock]:
    box, clock = PageCommandBox(), _PageClock()
    source = PageSource(box.latest, TeleopSettings(**settings), clock)  # type: ignore[arg-type]
    source.connect()
    source.start_take(OPEN_M)
    return source, box, clock


def _send(box: PageCommandBox, clock: _PageClock, axes: list[float], gripper: int = 0, end: int = 0) -> None:
    box.put(PageCommand.checked(axes, gripper, end, "keyboard", clock.now_s))


def test_page_deflection_is_speed_with_the_one_deadband() -> None:
    source, box, clock = _page(deadband=0.1, max_speed_m_s=0.1, max_rotation_rad_s=0.5)
    _send(box, clock, [1, -1, 0, 0, 0, 0.55])  # two held keys, a stick half way round
    cmd = source.read(PERIOD_S)
    np.testing.assert_allclose(cmd.translation_m, [0.1 * PERIOD_S, -0.1 * PERIOD_S, 0.0])
    np.testing.assert_allclose(cmd.rotation_rad, [0.0, 0.0, 0.5 * 0.5 * PERIOD_S])
    _send(box, clock, [0.05, 0, -0.08, 0, 0, 0])  # a resting stick: inside the deadband
    assert not source.read(PERIOD_S).ee_delta_row()[:6].any()


def test_page_watchdog_gives_zero_motion_when_the_page_goes_silent() -> None:
    source, box, clock = _page(page_watchdog_ms=300)
    _send(box, clock, [1, 0, 0, 0, 0, 0])
    clock.now_s += 0.25
    assert source.read(PERIOD_S).translation_m[0] > 0  # within the watchdog: the key still held
    clock.now_s += 0.1  # 350 ms without a command
    cmd = source.read(PERIOD_S)
    assert not cmd.ee_delta_row()[:6].any() and not cmd.end and source.watchdog_stops == 1
    _send(box, clock, [0, 1, 0, 0, 0, 0])  # the page is back: its command drives again
    assert source.read(PERIOD_S).translation_m[1] > 0


def test_page_counters_toggle_the_gripper_once_per_press_and_end_the_take() -> None:
    source, box, clock = _page()
    _send(box, clock, [0] * 6, gripper=1)
    assert source.read(PERIOD_S).gripper_width_m == CLOSED_M
    assert source.read(PERIOD_S).gripper_width_m == CLOSED_M  # the same command again: no toggle
    _send(box, clock, [0] * 6, gripper=3)  # two presses between ticks: closed, open, closed
    assert source.read(PERIOD_S).gripper_width_m == CLOSED_M
    _send(box, clock, [0] * 6, gripper=3, end=1)
    assert source.read(PERIOD_S).end


def test_page_stop_ends_the_take_whatever_the_page_sends_after_it() -> None:
    source, box, clock = _page()
    source.request_end()  # the stop button, through the page's server
    _send(box, clock, [1, 0, 0, 0, 0, 0])  # the page's next command, sent meanwhile
    cmd = source.read(PERIOD_S)
    assert cmd.end and not cmd.ee_delta_row()[:6].any()
    source.start_take(OPEN_M)  # the next take is not stopped
    assert not source.read(PERIOD_S).end


def test_page_start_take_forgets_presses_from_before() -> None:
    source, box, clock = _page()
    _send(box, clock, [0] * 6, gripper=5, end=2)  # a previous take's presses
    source.start_take(OPEN_M)
    cmd = source.read(PERIOD_S)
    assert not cmd.end and cmd.gripper_width_m == OPEN_M


def test_page_commands_refuse_what_the_page_never_sends() -> None:
    from teleop.base import TeleopError

    with pytest.raises(TeleopError, match=r"\[-1, 1\]"):
        PageCommand.checked([2, 0, 0, 0, 0, 0], 0, 0, "keyboard")
    with pytest.raises(TeleopError, match="6 numbers"):
        PageCommand.checked([0, 0, 0], 0, 0, "keyboard")
    with pytest.raises(TeleopError, match="negative"):
        PageCommand.checked([0] * 6, -1, 0, "keyboard")


def test_page_settings_refuse_a_watchdog_one_late_command_would_trip() -> None:
    with pytest.raises(ValueError, match="page_watchdog_ms"):
        TeleopSettings(page_send_period_ms=100, page_watchdog_ms=150)


# --- keyboard, guiding, scripted ---------------------------------------------------------------


def test_keyboard_presses_are_steps_and_space_toggles_the_gripper() -> None:
    settings = TeleopSettings(keyboard_step_m=0.01, keyboard_step_rad=0.05)
    ticks = [["w", "w", "a"], ["u", " "], [], ["\n"]]
    with KeyboardSource(lambda: ScriptedKeys([[], *ticks]), settings) as source:
        source.start_take(OPEN_M)  # takes the first (empty) tick: presses before the take
        cmds = [source.read(PERIOD_S) for _ in ticks]
    np.testing.assert_allclose(cmds[0].translation_m, [0.02, 0.01, 0.0])
    np.testing.assert_allclose(cmds[1].rotation_rad, [0.0, 0.0, 0.05])
    assert cmds[1].gripper_width_m == settings.gripper_closed_m
    assert not cmds[2].ee_delta_row()[:6].any()
    assert [c.end for c in cmds] == [False, False, False, True]


def test_hand_guiding_ends_after_its_ticks_or_at_enter() -> None:
    with HandGuidingSource(max_ticks=3) as source:
        source.start_take(OPEN_M)
        assert [source.read(PERIOD_S).end for _ in range(4)] == [False, False, False, True]
    with HandGuidingSource(lambda: ScriptedKeys([[], ["x"], ["\r"]])) as source:
        source.start_take(OPEN_M)
        assert [source.read(PERIOD_S).end for _ in range(2)] == [False, True]


def test_scripted_rows_come_back_as_given_then_the_take_ends() -> None:
    rows = [np.array([0.01, 0, 0, 0, 0, 0.1, 0.0]), np.array([0, -0.01, 0, 0, 0, 0, 0.04])]
    with ScriptedSource(rows) as source:
        source.start_take(OPEN_M)
        got = [source.read(PERIOD_S) for _ in range(3)]
    np.testing.assert_allclose([g.ee_delta_row() for g in got[:2]], rows)
    assert got[2].end and got[2].gripper_width_m == 0.04


def test_a_scripted_person_takes_over_when_told_and_replays_its_rows_each_take() -> None:
    urge = [False, True]
    row = np.array([0, 0, 0.01, 0, 0, 0, 0.08])
    with ScriptedSource([row], wants_control=lambda: urge.pop(0)) as source:
        assert [source.wants_control(), source.wants_control()] == [False, True]
        for _take in range(2):
            source.start_take(OPEN_M)
            got = [source.read(PERIOD_S) for _ in range(2)]
            np.testing.assert_allclose(got[0].ee_delta_row(), row)
            assert got[1].end


def test_pde_record_without_a_spacemouse_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    from teleop.main import main as record_main

    # no robot server is needed: the device is opened before the first reset
    assert record_main(["put_bowl_on_top_rack", "--source", "spacemouse", "--cmd", "tcp://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    # hidapi is installed with the project (the teleop extra): it is asked, and finds no device here
    assert err.startswith("pde record: ") and "no 3Dconnexion device found" in err, err


def test_pde_record_refuses_an_unknown_task_listing_the_known(capsys: pytest.CaptureFixture[str]) -> None:
    from teleop.main import main as record_main

    assert record_main(["wipe_the_table", "--source", "keyboard"]) == 2
    assert "put_bowl_on_top_rack" in capsys.readouterr().err


def test_takes_go_where_sft_reads_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from pde_contract.settings import DataLayout

    monkeypatch.setenv("PDE_DATA_DIR", "/srv/pde")
    assert TeleopSettings().demos == DataLayout(Path("/srv/pde")).demos
    assert TeleopSettings(demos_dir="/tmp/x").demos == Path("/tmp/x")


def test_a_scripted_function_is_asked_once_per_read_until_it_says_none() -> None:
    rows = [np.array([0.01, 0, 0, 0, 0, 0, 0.08]), np.array([0, 0.01, 0, 0, 0, 0, 0.04])]
    asked = iter(rows)
    with ScriptedSource(lambda: next(asked, None)) as source:
        source.start_take(OPEN_M)
        got = [source.read(PERIOD_S) for _ in range(3)]
    np.testing.assert_allclose([g.ee_delta_row() for g in got[:2]], rows)
    assert got[2].end and got[2].gripper_width_m == 0.04
