"""The page's "end episode now" through the actor wrapper (learner/loop/takeover.py), with the
real store and the loop's FakeActor: the episode stops early and is kept; an end meant for an
earlier episode is dropped."""

from __future__ import annotations

from pathlib import Path

from learner.loop.takeover import TakeoverActor
from pde_storage import Store, intents
from tests.learner.loop.doubles import FakeActor

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
        store.add_intent(intents.END_EPISODE, {"episode_id": 6, "success": True})  # too late for #6
        assert _run(actor, 7) == 50
        assert store.pending_intents(intents.END_EPISODE) == []
        store.add_intent(intents.END_EPISODE, {"episode_id": 8, "success": True})
        assert _run(actor, 8) == 1  # stopped before the first chunk; the file keeps what ran
