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
