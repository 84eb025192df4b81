"""The loop's waits: a read per look until there is something to take, a bounded backoff, and
stop() honoured at once however long the pause."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from learner.loop.core import POLL_BACKOFF_FACTOR, EpisodeLoop, next_poll_period_s
from learner.loop.settings import LoopSettings
from pde_contract.intents import StartEpisode
from pde_storage import Store
from tests.learner.loop.doubles import FakeActor, FakeRobot
from tests.learner.loop.test_loop import TASK, _phase, _until


def _settings(**kw: Any) -> LoopSettings:
    return LoopSettings(tasks=[TASK], auto_start=False, auto_label=True, max_chunks=2, max_episodes=1, **kw)


def test_the_pause_between_looks_doubles_up_to_ten_times_the_poll_period() -> None:
    periods = [0.01]
    while len(periods) < 7:
        periods.append(next_poll_period_s(periods[-1], first_s=0.01))
    assert periods == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.1, 0.1, 0.1])
    assert POLL_BACKOFF_FACTOR == 10
    assert next_poll_period_s(0.0, first_s=0.0) == 0.0  # no pause stays no pause


def test_waiting_for_start_reads_and_takes_the_row_only_once_there_is_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: Counter[str] = Counter()
    takes: Counter[str] = Counter()
    pending, take = store.pending_intents, store.take_intent

    def counted_pending(kind: Any) -> Any:
        looks[kind.__name__] += 1
        return pending(kind)

    def counted_take(kind: Any) -> Any:
        takes[kind.__name__] += 1
        return take(kind)

    monkeypatch.setattr(store, "pending_intents", counted_pending)
    monkeypatch.setattr(store, "take_intent", counted_take)
    loop = EpisodeLoop(store, FakeRobot(), FakeActor(), _settings(poll_period_s=0.005))
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    _until(lambda: _phase(store) == "awaiting_start" and looks["StartEpisode"] >= 5)
    assert takes["StartEpisode"] == 0, "no write transaction (FOR UPDATE) while nothing waits"
    store.add_intent(StartEpisode())
    t.join(30)
    assert not t.is_alive() and [e.status for e in store.episodes()] == ["labelled"]
    assert takes["StartEpisode"] == 1


def test_stop_ends_a_wait_for_start_without_sitting_out_the_pause(store: Store) -> None:
    # a 60 s pause between looks: only a wait that wakes on stop() ends before the join gives up
    loop = EpisodeLoop(
        store, FakeRobot(), FakeActor(), _settings(poll_period_s=60.0, heartbeat_period_s=0.05)
    )
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    _until(lambda: _phase(store) == "awaiting_start")
    loop.stop()
    t.join(20)
    assert not t.is_alive() and _phase(store) == "stopped" and store.episodes() == []
