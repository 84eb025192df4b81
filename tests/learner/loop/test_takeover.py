"""The page's "end episode now" through the actor wrapper (learner/loop/takeover.py), with the
real store and the loop's FakeActor: the episode stops early and is kept; an end meant for an
earlier episode is dropped. "Take control": the person source and the page's request reach the
actor."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from learner.loop.takeover import TakeoverActor
from pde_contract.intents import EndEpisode, TakeControl
from pde_contract.service_state import TAKEOVER_ROW
from pde_storage import Store
from teleop.scripted import ScriptedSource
from tests.learner.loop.doubles import FakeActor, PersonActorFake

TASK = "put_green_container_in_bowl"


def _run(actor: TakeoverActor, episode_id: int) -> int:
    ef = actor.run_episode(
        episode_id=str(episode_id), task=TASK, canonical_prompt="p", rollout_prompt="p", max_chunks=50
    )
    return len(ef.chunks)


def test_an_end_for_this_episode_stops_it_and_one_for_another_is_dropped(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path}/pde.db", tmp_path / "media") as store:
        actor = TakeoverActor(FakeActor(n_chunks=50), store)
        assert _run(actor, 7) == 50  # nobody ends it
        store.add_intent(EndEpisode(episode_id=6, success=True))  # too late for #6
        assert _run(actor, 7) == 50
        assert store.pending_intents(EndEpisode) == []
        store.add_intent(EndEpisode(episode_id=8, success=True))
        assert _run(actor, 8) == 1  # stopped before the first chunk; the file keeps what ran


def test_take_control_reaches_the_actor_for_this_episode_only(tmp_path: Path) -> None:
    row = np.array([0.01, 0, 0, 0, 0, 0, 0.08])
    person = ScriptedSource([row, row])
    with Store.open(f"sqlite:///{tmp_path}/pde.db", tmp_path / "media") as store, person:
        store.add_intent(TakeControl(episode_id=1))  # from before this loop: dropped
        fake = PersonActorFake(n_chunks=4)
        actor = TakeoverActor(fake, store, person)
        published = store.service_states()[TAKEOVER_ROW].state
        assert published == {"person": "scripted", "pid": os.getpid()}
        assert _run(actor, 1) == 4 and fake.people == [person] and fake.takes == []
        store.add_intent(TakeControl(episode_id=6))  # too late
        assert _run(actor, 7) == 4 and fake.takes == []
        store.add_intent(TakeControl(episode_id=7))
        assert _run(actor, 7) == 4
        assert len(fake.takes) == 1 and np.array_equal(np.stack(fake.takes[0]), np.stack([row, row]))
        assert store.pending_intents(TakeControl) == []


def test_without_a_person_nothing_is_offered(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path}/pde.db", tmp_path / "media") as store:
        inner = FakeActor(n_chunks=2)  # no person= keyword at all: the actor is called as before
        actor = TakeoverActor(inner, store)
        assert store.service_states()[TAKEOVER_ROW].state["person"] is None
        assert _run(actor, 3) == 2


def test_the_page_person_reads_the_pages_commands_from_the_database_on_its_own_clock(tmp_path: Path) -> None:
    """PDE_TELEOP_PERSON=page: the page's server writes its newest command into a row, the loop's
    page source reads it each tick, stamped when its number changes (the watchdog's clock)."""
    from learner.loop.takeover import StorePageCommands
    from pde_contract.service_state import PAGE_TELEOP_ROW
    from teleop.main import person_source
    from teleop.page import PageSource
    from teleop.settings import TeleopSettings

    now = [100.0]

    def row_of(seq: str, axes: list[float], end: int = 0) -> dict[str, object]:
        return {"seq": seq, "axes": axes, "gripper_presses": 0, "end_presses": end, "device": "keyboard"}

    def write(seq: str, axes: list[float], end: int = 0) -> None:
        store.set_service_state(PAGE_TELEOP_ROW, row_of(seq, axes, end))

    with Store.open(f"sqlite:///{tmp_path}/pde.db", tmp_path / "media") as store:
        write("a:1", [1, 0, 0, 0, 0, 0])  # left from an earlier takeover: of unknown age
        settings = TeleopSettings(person="page", page_watchdog_ms=300)
        commands = StorePageCommands(store, lambda: now[0])
        configured = person_source(settings, commands)
        assert isinstance(configured, PageSource) and configured.is_connected
        person = PageSource(commands, settings, lambda: now[0])  # the same, on the test's clock
        person.connect()
        person.start_take(0.08)
        assert not person.read(0.1).translation_m.any()  # the old command never moves the arm
        write("a:2", [0, 1, 0, 0, 0, 0])
        assert person.read(0.1).translation_m[1] > 0
        now[0] += 0.5  # the page went silent: the same number for 500 ms
        assert not person.read(0.1).translation_m.any()
        write("a:3", [0, 0, 0, 0, 0, 0], end=1)
        assert person.read(0.1).end
        store.set_service_state(PAGE_TELEOP_ROW, {"seq": "a:4", "axes": "bad"})
        assert commands() is None  # a row it cannot read: no command
        store.set_service_state(PAGE_TELEOP_ROW, {**row_of("a:5", [0, 0, 9, 0, 0, 0])})
        assert commands() is None  # out of range: no command, logged
