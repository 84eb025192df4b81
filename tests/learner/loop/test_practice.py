"""Practice mode (the page's switch): the loop runs whole episodes (reset, Start, the policy, a
person taking over) and records none of them: no episode row, no file or video under the media
folder, no label, no PPO sample. Ending practice goes back to recorded episodes."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from learner.loop.core import EpisodeLoop
from learner.loop.takeover import TakeoverActor
from learner.loop.training import BackgroundTrainer
from pde_contract.intents import StartEpisode, TakeControl
from pde_contract.service_state import LOOP_ROW, RUN_CONTROL_ROW, LoopState, RunControl
from pde_storage import Store
from pde_storage.service_states import read_state, write_state
from teleop.scripted import ScriptedSource
from tests.learner.loop.doubles import FakeRobot, FakeTrainer, PersonActorFake
from tests.learner.loop.test_loop import CANON, TASK, _settings, _until


def _loop_state(store: Store) -> LoopState | None:
    return read_state(store, LOOP_ROW, LoopState)[0]


def _awaiting_start(store: Store, practice: bool) -> bool:
    s = _loop_state(store)
    return s is not None and s.phase == "awaiting_start" and s.practice is practice


def test_a_practice_episode_records_nothing_and_never_reaches_ppo(store: Store, tmp_path: Path) -> None:
    store.ensure_task(TASK, CANON)
    store.set_task_state(TASK, stage="rl", alpha=1.0, ema_success=0.5)
    write_state(store, RUN_CONTROL_ROW, RunControl(practice=True, by="test"))
    row = np.array([0.01, 0, 0, 0, 0, 0, 0.08])
    fake = PersonActorFake(n_chunks=3)
    trainer = FakeTrainer()
    with ScriptedSource([row, row]) as person:
        loop = EpisodeLoop(
            store,
            FakeRobot(),
            TakeoverActor(fake, store, person),
            _settings(auto_start=False, batch_size=1, max_episodes=1),
            trainer=BackgroundTrainer(trainer, lambda *_: "/ck/1"),
        )
        t = threading.Thread(target=loop.run, daemon=True)
        t.start()
        _until(lambda: _awaiting_start(store, practice=True))
        store.add_intent(TakeControl(episode_id=-1, by="test"))  # taken at its first check
        start = store.add_intent(StartEpisode())
        _until(lambda: _awaiting_start(store, practice=True) and loop.practice_runs == 2)
        # It ran, with the person's take, and left nothing behind.
        assert [c["episode_id"] for c in fake.inner.calls] == ["-1"]
        assert fake.inner.calls[0]["practice"] is True and fake.inner.calls[0]["rollout_prompt"] == CANON
        assert len(fake.takes) == 1 and len(fake.takes[0]) == 2
        state = _loop_state(store)
        last = state.last_start if state is not None else None
        assert last is not None and (last.intent_id, last.episode_id) == (start.id, -1)
        assert store.episodes() == [] and store.count_episodes() == 0
        assert [p for p in (tmp_path / "media").rglob("*") if p.is_file()] == []  # no file, no video
        assert loop.episodes_run == 0 and trainer.batches == []
        # Practice over: the loop resets for a recorded episode, which is stored and trained on.
        write_state(store, RUN_CONTROL_ROW, RunControl(by="test"))
        _until(lambda: _awaiting_start(store, practice=False))
        store.add_intent(StartEpisode())
        t.join(10)
        assert not t.is_alive()
        loop.finish_training(10)
    [ep] = store.episodes()
    assert ep.id > 0 and ep.status == "labelled" and ep.file_path
    assert [[int(ef.episode_id) for ef, _ in b] for b in trainer.batches] == [[ep.id]]
