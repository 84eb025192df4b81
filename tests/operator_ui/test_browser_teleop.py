"""Teleoperation and `pde record` from the operator page, in headless Chromium against `pde ui` and
the sim robot server as processes (issue 24): the page's keys and a gamepad (a stub of
navigator.getGamepads, named as a fake device) move the measured arm through the record session's
recorder; letting go holds it; a closed page holds it after the watchdog; a take kept on the page
is an episode file the SFT reader loads, with its video and counts shown."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Page, Route, expect

from learner.loop.takeover import StorePageCommands
from learner.sft import action_windows, select_demo_files
from pde_contract.client import RobotClient
from pde_contract.episodes import read_episode
from pde_contract.messages import ActionSpace
from teleop.base import TeleopCommand, TeleopSource
from teleop.page import PageSource
from teleop.takes import LOG_NAME
from tests.learner.loop.doubles import PersonActorFake
from tests.operator_ui.browser import SHOTS, TASK, choose, sim_robot_server, ui_process
from tests.operator_ui.conftest import TOKEN
from tests.operator_ui.test_browser_takeover import LONG_EPISODE_CHUNKS, loop_and_page

pytestmark = [pytest.mark.browser]
# A gamepad for the page: the browser's Gamepad API answered by a stub (no device here).
FAKE_GAMEPAD = """
window.fakePad = { id: "FakeGamepad (test stub, no device)", index: 0, connected: true, mapping: "standard",
  axes: [0, 0, 0, 0], buttons: Array.from({ length: 16 }, () => ({ pressed: false, value: 0 })) };
navigator.getGamepads = () => [window.fakePad];
"""
MOVED_M = 0.02  # a motion the test asks for: well past the sim's noise, well inside the box
STILL_M = 0.002  # the arm holds: it moved less than this over several ticks
WAIT_S = 60.0  # generous: the machine is shared and loaded; never a timing assertion


def wait_for(done: Callable[[], bool], what: str) -> None:
    """Each wait gets its own WAIT_S (a loaded machine slows every step; none is a timing check)."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)


class Arm:
    """The measured arm, seen by a client of its own (as the page's server sees it)."""

    def __init__(self, client: RobotClient) -> None:
        self.client = client

    def position_m(self) -> np.ndarray:
        st = self.client.status()
        assert st.state is not None
        return np.asarray(st.state.ee_position_m, dtype=np.float64)

    def gripper_m(self) -> float:
        st = self.client.status()
        assert st.state is not None
        return float(st.state.gripper_width_m)

    def steps(self) -> int:
        return self.client.status().counters.steps_executed

    def wait(self, done: Callable[[], bool], what: str) -> None:
        wait_for(done, what)

    def wait_ticks(self, ticks: int) -> None:
        first = self.steps()
        self.wait(lambda: self.steps() >= first + ticks, f"{ticks} rows executed")

    def wait_moved(self, start: np.ndarray, axis: int, sign: float) -> None:
        self.wait(
            lambda: sign * (self.position_m()[axis] - start[axis]) > MOVED_M, f"axis {axis} moved {sign:+}"
        )

    def assert_holds(self, ticks: int) -> None:
        """After ``ticks`` more executed rows, the arm stays where it is for ``ticks`` more (counted
        on the server's step counter, not timed): every row the recorder sends is still."""
        self.wait_ticks(ticks)
        held = self.position_m()
        self.wait_ticks(ticks)
        moved = np.abs(self.position_m() - held).max()
        assert moved < STILL_M, f"the arm moved {moved * 1000:.1f} mm while nothing was commanded"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Arm]]:
    """The sim robot server and `pde ui` for the module: (page URL, data dir, the measured arm)."""
    tmp = tmp_path_factory.mktemp("teleop")
    with (
        sim_robot_server(tmp) as endpoint,
        ui_process(f"sqlite:///{tmp}/pde.db", tmp, TOKEN, endpoint) as base,
        RobotClient(endpoint, name="test-observer", timeout_s=2.0) as observer,
    ):
        observer.connect()
        yield base, tmp, Arm(observer)


def _open(page: Page, base: str) -> None:
    page.add_init_script(FAKE_GAMEPAD)
    page.goto(f"{base}/#token={TOKEN}")
    expect(page.locator("#rec-task option")).not_to_have_count(0, timeout=20_000)


def _record_a_take(page: Page) -> None:
    """Reset the arm for TASK, then record: the page holds control."""
    choose(page, "#rec-task", TASK)
    page.locator("#rec-reset").click()
    expect(page.locator("#rec-phase")).to_have_text("ready", timeout=WAIT_S * 1000)
    page.locator("#rec-start").click()
    expect(page.locator("#rec-phase")).to_have_text("recording", timeout=10_000)
    expect(page.locator("#teleop-status")).to_contain_text("you hold control", timeout=10_000)


def _stop(page: Page) -> None:
    page.locator("#rec-stop").click()
    expect(page.locator("#rec-phase")).to_have_text("recorded", timeout=WAIT_S * 1000)


def _all_still_sent(page: Page) -> None:
    """The page's last answered command is all zeros: none with motion can arrive after it (one
    command in flight at a time)."""
    page.wait_for_function(
        "() => document.querySelector('#teleop-status').dataset.axes === '0,0,0,0,0,0'", timeout=10_000
    )


def test_keys_and_a_gamepad_move_the_arm_and_letting_go_or_closing_the_page_holds_it(
    page: Page, servers: tuple[str, Path, Arm]
) -> None:
    base, _, arm = servers
    _open(page, base)
    _record_a_take(page)
    arm.assert_holds(3)  # nothing pressed yet

    # a held arrow key: +x; let go: the next rows are still
    start = arm.position_m()
    page.keyboard.down("ArrowUp")
    arm.wait_moved(start, 0, +1)
    page.keyboard.up("ArrowUp")
    _all_still_sent(page)
    arm.assert_holds(3)

    # the keys stay off while typing in a field: the note's text is text
    page.locator("#operator").focus()
    before = arm.position_m()
    page.keyboard.down("ArrowLeft")
    arm.assert_holds(3)
    page.keyboard.up("ArrowLeft")
    assert np.abs(arm.position_m() - before).max() < STILL_M
    page.locator("#rec-info").click()  # the focus leaves the field

    # the gamepad: left stick right is -y; back to the middle holds; A toggles the gripper
    start = arm.position_m()
    page.evaluate("() => { window.fakePad.axes = [1, 0, 0, 0]; }")
    arm.wait_moved(start, 1, -1)
    expect(page.locator("#teleop-status")).to_have_attribute(
        "data-device", "gamepad: FakeGamepad (test stub, no device)"
    )
    page.evaluate("() => { window.fakePad.axes = [0, 0, 0, 0]; }")
    _all_still_sent(page)
    arm.assert_holds(3)
    opened = arm.gripper_m()
    page.evaluate("() => { window.fakePad.buttons[0] = { pressed: true, value: 1 }; }")
    arm.wait(lambda: arm.gripper_m() < opened - 0.02, "the gripper closed on the A button")
    page.evaluate("() => { window.fakePad.buttons[0] = { pressed: false, value: 0 }; }")

    # a key held as the page goes away: nothing more comes; the watchdog holds the arm
    start = arm.position_m()
    page.keyboard.down("PageUp")
    arm.wait_moved(start, 2, +1)
    page.goto("about:blank")  # the keyup never arrives
    arm.assert_holds(5)  # 5 ticks: past the 300 ms watchdog at 10 Hz

    _open(page, base)
    expect(page.locator("#rec-phase")).to_have_text("recording")  # the take went on, still
    _stop(page)
    expect(page.locator("#rec-last-meta")).to_contain_text("keep or discard it")
    assert page.request.get(f"{base}/api/record").json()["last"]["watchdog_stops"] > 0
    page.fill("#rec-note", "teleop test: moves, not a demonstration")
    page.locator("#rec-discard").click()
    expect(page.locator("#rec-phase")).to_have_text("idle", timeout=10_000)
    expect(page.locator(f'#rec-counts tr[data-task="{TASK}"] .discarded')).to_have_text("1")
    page.goto("about:blank")  # stop the page's polling before the servers go


def test_a_take_kept_on_the_page_is_an_episode_the_sft_reader_loads(
    page: Page, servers: tuple[str, Path, Arm]
) -> None:
    base, data_dir, arm = servers
    demos = data_dir / "demos"  # <PDE_UI_DATA_DIR>/demos: where `pde learner sft` reads
    kept_before = len(list((demos / TASK).glob("*.episode"))) if (demos / TASK).is_dir() else 0
    _open(page, base)
    _record_a_take(page)
    start = arm.position_m()
    page.keyboard.down("ArrowUp")
    arm.wait_moved(start, 0, +1)
    page.keyboard.up("ArrowUp")
    width = arm.gripper_m()
    page.keyboard.press("g")  # the gripper toggles
    arm.wait(lambda: abs(arm.gripper_m() - width) > 0.02, "the gripper toggled on G")
    _stop(page)
    video = page.locator("#rec-video video")
    expect(video).to_have_attribute("data-camera", "external")
    page.wait_for_function("() => document.querySelector('#rec-video video').readyState >= 1", timeout=20_000)
    page.fill("#rec-note", "a page take")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#record-section").screenshot(path=str(SHOTS / "operator_record_take.png"))
    page.locator("#rec-keep").click()
    expect(page.locator(f'#rec-counts tr[data-task="{TASK}"] .kept')).to_have_text(str(kept_before + 1))
    expect(page.locator("#rec-last-meta")).to_contain_text("kept")
    page.goto("about:blank")

    [kept] = [p for p in select_demo_files(demos, 100, [TASK]) if "__" in p.name][-1:]
    episode = read_episode(kept)
    assert episode.success is True and episode.action_space is ActionSpace.EE_DELTA
    assert episode.source == "teleop:page" and episode.task == TASK
    rows = np.concatenate([c.actions for c in episode.chunks])
    assert rows[:, 0].sum() > MOVED_M * 0.9  # the arrow key's +x is in the rows
    assert abs(rows[-1, 6] - rows[0, 6]) > 0.05  # and the gripper's toggle
    windows = action_windows(episode, 4)
    assert len(windows) == len(episode.chunks) and windows[0].shape == (4, 7)
    log = [json.loads(line) for line in (demos / LOG_NAME).read_text().splitlines()]
    assert log[-1]["kept"] is True and log[-1]["note"] == "a page take" and log[-1]["source"] == "teleop:page"


class _PacedPagePerson(TeleopSource):
    """The loop's page person (``PDE_TELEOP_PERSON=page``), read once per control tick as the
    actor does (the actor fake reads as fast as it can), keeping what it read."""

    name = "page"

    def __init__(self, inner: PageSource) -> None:
        self.inner = inner
        self.read_rows: list[np.ndarray] = []

    def _open(self) -> None:
        self.inner.connect()

    def start_take(self, gripper_width_m: float) -> None:
        self.inner.start_take(gripper_width_m)

    def read(self, period_s: float) -> TeleopCommand:
        time.sleep(period_s)
        cmd = self.inner.read(period_s)
        self.read_rows.append(cmd.ee_delta_row())
        return cmd


@contextmanager
def _page_person_took_over(page: Page, tmp_path: Path) -> Iterator[tuple[_PacedPagePerson, PersonActorFake]]:
    """A loop episode running, and the page holding control of it (PDE_TELEOP_PERSON=page)."""
    feed: list[StorePageCommands] = []
    person = _PacedPagePerson(PageSource(lambda: feed[0]() if feed else None))
    actor = PersonActorFake(n_chunks=LONG_EPISODE_CHUNKS, chunk_time_s=0.1)
    with person, loop_and_page(tmp_path, actor, person) as (store, base):
        feed.append(StorePageCommands(store))
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
        page.locator("#start").click()
        expect(page.locator("#phase")).to_have_text("running", timeout=15_000)
        page.locator("#take-control").click()
        expect(page.locator("#hand-back")).to_be_visible(timeout=10_000)
        expect(page.locator("#teleop-status")).to_contain_text("took over the episode")
        yield person, actor
        page.goto("about:blank")


def test_take_control_with_the_page_person_drives_with_the_pages_keys_until_hand_back(
    page: Page, tmp_path: Path
) -> None:
    """Through the database: the page's server writes its commands into the `teleop_page` row, the
    loop's page source reads them (learner/loop/takeover.py: StorePageCommands)."""
    with _page_person_took_over(page, tmp_path) as (person, actor):
        page.keyboard.down("ArrowUp")
        wait_for(lambda: any(r[0] > 0 for r in person.read_rows), "the loop's page person read the held key")
        page.keyboard.up("ArrowUp")
        _all_still_sent(page)
        n = len(person.read_rows)
        wait_for(lambda: len(person.read_rows) >= n + 2, "rows read after the zeros were sent")
        page.keyboard.press("h")  # hand back
        expect(page.locator("#hand-back")).to_be_hidden(timeout=10_000)
        wait_for(lambda: bool(actor.takes), "the take ended at the hand back")
        [take] = actor.takes
        assert any(r[0] > 0 for r in take) and not np.any(take[-1][:6])  # moved, then still
        page.locator("#end-failure").click()
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=30_000)


def test_a_hand_back_pressed_while_a_command_is_in_flight_still_ends_the_take(
    page: Page, tmp_path: Path
) -> None:
    """The page sends one command at a time. A hand-back pressed while one was in flight was
    dropped, and a page that has handed back sends no more: the take never ended while the page
    said "handed back" (found as a CI flake). Now the press goes in a final send after the one in
    flight."""
    with _page_person_took_over(page, tmp_path) as (_, actor):
        held: list[Route] = []
        holding = [True]

        def hold(route: Route) -> None:  # leaves the page's command unanswered: in flight
            if holding[0]:
                held.append(route)
            else:
                route.continue_()

        page.route("**/api/teleop/command", hold)
        deadline = time.monotonic() + WAIT_S
        while not held:  # the page's periodic send is on its way, unanswered
            assert time.monotonic() < deadline, "the page sent no command while holding control"
            page.wait_for_timeout(20)
        page.keyboard.press("h")  # hand back, with that send in flight
        holding[0] = False
        for route in held:
            route.continue_()
        # Later sends go straight through (a route handler runs only inside a Playwright call).
        page.unroute("**/api/teleop/command")
        expect(page.locator("#hand-back")).to_be_hidden(timeout=10_000)
        wait_for(lambda: bool(actor.takes), "the take ended at the hand back")
        expect(page.locator("#toast")).to_contain_text("handed back")


def test_space_still_stops_the_arm_while_the_page_holds_control(
    page: Page, servers: tuple[str, Path, Arm]
) -> None:
    """The E-STOP keys come first: Space during a take latches the E-STOP, the take stops with the
    reason, and the page no longer holds control."""
    base, _, arm = servers
    _open(page, base)
    _record_a_take(page)
    page.keyboard.down("ArrowDown")
    page.keyboard.press("Space")
    page.keyboard.up("ArrowDown")
    expect(page.locator("#estop")).to_have_class("latched", timeout=10_000)
    assert arm.client.status().estopped
    expect(page.locator("#rec-phase")).to_have_text("idle", timeout=WAIT_S * 1000)
    expect(page.locator("#rec-error")).to_contain_text("e-stop", timeout=10_000)
    expect(page.locator("#teleop-status")).to_be_hidden()
    r = page.request.post(
        f"{base}/api/record/reset", headers={"Authorization": f"Bearer {TOKEN}"}, data={"task": TASK}
    )
    assert r.status == 409 and "E-STOP is latched" in r.text()
    arm.client.release_estop()
    page.goto("about:blank")
