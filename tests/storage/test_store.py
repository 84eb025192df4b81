"""The Store API on SQLite and on a real PostgreSQL server (see conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text

from pde_contract.intents import AbortEpisode, EndEpisode, StartEpisode, TakeControl
from pde_contract.records import EpisodeStatus, LabelSource, PromptSource, PromptStatus, Stage
from pde_storage import ConflictError, InvalidArgumentError, NotFoundError, Store, StoredValueError
from pde_storage.db import head_revision, normalise_url
from pde_storage.models import Base, Intent
from tests.storage.factories import finish_with_videos, make_episode_file

TASK = "put_green_container_in_bowl"
CANON = "put the green container in the bowl"


def _finished_episode(store: Store, prompt_text: str | None = None, n_chunks: int = 4) -> int:
    store.ensure_task(TASK, CANON)
    pid = store.prompts(TASK, "canonical")[0].id
    if prompt_text is not None:
        pid = store.add_prompt(TASK, prompt_text).id
    ep = store.create_episode(TASK, pid, policy_version=0, stage="bootstrap")
    finish_with_videos(store, ep.id, make_episode_file(ep.id, TASK, n_chunks=n_chunks))
    return ep.id


def test_migrations_reach_head_and_match_the_models(store: Store, db_url: str) -> None:
    engine = create_engine(normalise_url(db_url))
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        assert ctx.get_current_revision() == head_revision()
        assert compare_metadata(ctx, Base.metadata) == []
    engine.dispose()
    # Opening again (a second service) is a no-op, not an error.
    Store.open(db_url, store.media_dir).close()


def test_sqlite_uses_wal(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path}/w.db", tmp_path / "m") as s, s.backend.read_engine.connect() as c:
        assert c.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_tasks_and_task_state(store: Store) -> None:
    row = store.ensure_task(TASK, CANON)
    assert store.ensure_task(TASK, CANON).id == row.id
    with pytest.raises(ConflictError, match="canonical prompt never changes"):
        store.ensure_task(TASK, "something else")
    [canon] = store.prompts(TASK)
    assert (canon.text, canon.status, canon.source) == (CANON, "canonical", "canonical")
    st = store.task_state(TASK)
    assert (st.stage, st.iteration, st.alpha, st.ema_success) == ("bootstrap", 0, 1.0, None)
    st = store.set_task_state(TASK, stage="rl", iteration=3, alpha=0.4, ema_success=0.2)
    assert (st.stage, st.iteration, st.alpha, st.ema_success) == ("rl", 3, 0.4, 0.2)
    with pytest.raises(InvalidArgumentError, match="unknown task-state field"):
        store.set_task_state(TASK, beta=0.3)
    with pytest.raises(InvalidArgumentError, match="stage 'warmup' is not one of"):
        store.set_task_state(TASK, stage="warmup")
    with pytest.raises(NotFoundError, match="unknown task 'nope'"):
        store.task_state("nope")
    assert store.task_state(TASK).stage == "rl"
    # N, written by the episode loop for the supervisor
    assert store.task_state(TASK).rollouts_per_prompt is None
    assert store.set_task_state(TASK, rollouts_per_prompt=4).rollouts_per_prompt == 4
    with pytest.raises(InvalidArgumentError, match="rollouts_per_prompt must be an integer >= 1, got 0"):
        store.set_task_state(TASK, rollouts_per_prompt=0)
    assert store.task_state(TASK).rollouts_per_prompt == 4


def test_rows_carry_their_words_as_enum_members(store: Store) -> None:
    """Rows hold pde_contract.records members; a member is its word, so the store takes either
    and JSON holds the word."""
    eid = _finished_episode(store, "place the green box in the bowl")
    store.add_label(eid, True, source=LabelSource.SIMULATOR)
    ep = store.episode(eid)
    assert ep.stage is Stage.BOOTSTRAP and ep.status is EpisodeStatus.LABELLED
    assert ep.status == "labelled"
    [label] = store.labels(eid)
    assert label.source is LabelSource.SIMULATOR and label.authoritative
    p = store.prompt(ep.prompt_id)
    assert p.status is PromptStatus.CANDIDATE and p.source is PromptSource.VLM
    [canon] = store.prompts(TASK, PromptStatus.CANONICAL)
    assert canon.status is PromptStatus.CANONICAL and canon.source is PromptSource.CANONICAL
    assert store.task_state(TASK).stage is Stage.BOOTSTRAP
    assert store.set_task_state(TASK, stage="rl").stage is Stage.RL
    assert store.episodes(status=EpisodeStatus.LABELLED) == store.episodes(status="labelled") == [ep]
    assert json.loads(json.dumps(dataclasses.asdict(ep), default=str))["status"] == "labelled"
    assert store.count_episodes(status=EpisodeStatus.LABELLED) == 1
    with pytest.raises(
        InvalidArgumentError, match="episode status 'done' is not one of running, awaiting_label"
    ):
        store.count_episodes(status="done")


def test_a_stored_word_the_enum_does_not_know_is_refused_naming_its_column(store: Store) -> None:
    """A row written by a newer version (or by hand) with a word this version does not know fails
    where it is read, saying which column of which row holds what."""
    eid = _finished_episode(store)
    store.add_label(eid, True)
    reads: list[tuple[str, str, Callable[[], object]]] = [
        ("tasks", "stage", lambda: store.task_state(TASK)),
        ("prompts", "status", lambda: store.prompts(TASK)),
        ("prompts", "source", lambda: store.prompt(store.episode(eid).prompt_id)),
        ("episodes", "stage", lambda: store.episode(eid)),
        ("episodes", "status", lambda: store.episodes(task=TASK)),
        ("labels", "source", lambda: store.labels(eid)),
    ]
    for table, column, read in reads:
        with store.backend.write_engine.begin() as c:
            [(row_id, word)] = c.execute(text(f"SELECT id, {column} FROM {table}")).all()
            c.execute(text(f"UPDATE {table} SET {column} = 'warmup'"))
        with pytest.raises(StoredValueError) as err:
            read()
        assert str(err.value).startswith(
            f"{table}.{column} of row {row_id} holds 'warmup', not a value of "
        ), err
        with store.backend.write_engine.begin() as c:
            c.execute(text(f"UPDATE {table} SET {column} = :word"), {"word": word})
        read()  # the row reads again once corrected
    with store.backend.write_engine.begin() as c:
        c.execute(text("UPDATE episodes SET status = 'done'"))
    with pytest.raises(StoredValueError) as err:
        store.episode(eid)
    assert str(err.value) == (
        f"episodes.status of row {eid} holds 'done', not a value of EpisodeStatus (running, "
        "awaiting_label, labelled, aborted, discarded): a newer version of PDE wrote it, or someone "
        "edited the row; run the newer version, or correct the row"
    )


def test_prompts_status_and_dedup(store: Store) -> None:
    store.ensure_task(TASK, CANON)
    p = store.add_prompt(TASK, "grab the  green box and drop it in the bowl", iteration=2)
    assert p.text == "grab the green box and drop it in the bowl"  # whitespace normalised
    assert (p.status, p.source, p.iteration, p.success_rate) == ("candidate", "vlm", 2, None)
    assert store.add_prompt(TASK, p.text).id == p.id
    p2 = store.set_prompt_status(p.id, "pool", summary="grasps the box, drops it beside the bowl")
    assert (p2.status, p2.summary) == ("pool", "grasps the box, drops it beside the bowl")
    assert [x.id for x in store.prompts(TASK, "pool")] == [p.id]
    assert len(store.prompts(TASK, ["pool", "canonical"])) == 2
    canon = store.prompts(TASK, "canonical")[0]
    with pytest.raises(ConflictError, match="canonical prompt"):
        store.set_prompt_status(canon.id, "rejected")
    with pytest.raises(InvalidArgumentError):
        store.set_prompt_status(p.id, "great")
    with pytest.raises(NotFoundError):
        store.set_prompt_status(9999, "pool")
    with pytest.raises(InvalidArgumentError, match="empty"):
        store.add_prompt(TASK, "   ")


def test_episode_lifecycle_files_videos_chunks(store: Store) -> None:
    store.ensure_task(TASK, CANON)
    pid = store.add_prompt(TASK, "lift the green container into the bowl").id
    ep = store.create_episode(TASK, pid, policy_version=7, stage="bootstrap", seed=11)
    assert (ep.status, ep.rollout_prompt, ep.canonical_prompt, ep.policy_version) == (
        "running",
        "lift the green container into the bowl",
        CANON,
        7,
    )
    assert store.episodes(status="running")[0].id == ep.id
    ef = make_episode_file(ep.id, TASK, n_chunks=5)
    done = finish_with_videos(store, ep.id, ef)
    assert done.status == "awaiting_label" and done.finished_at is not None and done.n_chunks == 5
    assert Path(done.file_path).is_file()
    assert sorted(done.video_paths) == ["external", "wrist"]
    back = store.load_episode_file(ep.id)
    assert len(back.chunks) == 5 and back.task == TASK
    np.testing.assert_array_equal(back.chunks[3].actions, ef.chunks[3].actions)
    chunks = store.chunks(ep.id)
    assert [c.index for c in chunks] == list(range(5))
    assert chunks[2].n_steps == 10 and chunks[2].inference_s == pytest.approx(0.022)
    for path in done.video_paths.values():
        with av.open(path) as f:
            s = f.streams.video[0]
            assert s.codec_context.name == "h264" and s.codec_context.pix_fmt == "yuv420p"
            assert sum(1 for _ in f.decode(s)) == 5
    with pytest.raises(ConflictError, match="not running"):
        store.finish_episode(ep.id, ef)
    with pytest.raises(ConflictError, match="not running"):
        store.encode_episode_videos(ep.id, ef)


def test_finishing_records_and_encoding_is_its_own_step(store: Store) -> None:
    store.ensure_task(TASK, CANON)
    pid = store.prompts(TASK)[0].id
    ep = store.create_episode(TASK, pid, policy_version=0, stage="bootstrap")
    ef = make_episode_file(ep.id, TASK, n_chunks=3)
    with pytest.raises(InvalidArgumentError, match="is for task"):
        store.encode_episode_videos(ep.id, make_episode_file(ep.id, "other_task"))
    videos = store.encode_episode_videos(ep.id, ef)
    assert sorted(videos) == ["external", "wrist"] and all(p.is_file() for p in videos.values())
    assert store.episode(ep.id).status == "running" and store.episode(ep.id).video_paths == {}
    with pytest.raises(InvalidArgumentError, match="not under the media folder"):
        store.finish_episode(ep.id, ef, videos={"wrist": Path("/elsewhere/0000001_wrist.mp4")})
    done = store.finish_episode(ep.id, ef, videos=videos)
    assert done.video_paths == {cam: str(p) for cam, p in videos.items()}
    # a caller that needs no videos records the episode without encoding any
    bare = store.create_episode(TASK, pid, policy_version=0, stage="bootstrap")
    done = store.finish_episode(bare.id, make_episode_file(bare.id, TASK, n_chunks=3))
    assert done.status == "awaiting_label" and done.video_paths == {} and Path(done.file_path).is_file()
    assert not list((store.media_dir / "videos").glob(f"{bare.id:07d}_*"))


def test_labels_relabel_history_and_prompt_stats(store: Store) -> None:
    eid = _finished_episode(store, "place the green box in the bowl")
    pid = store.episode(eid).prompt_id
    assert store.prompt(pid).n_finished == 1 and store.prompt(pid).n_episodes == 0
    store.add_label(eid, True, source="vlm", reason="container ends inside the bowl")
    e = store.episode(eid)
    assert (e.status, e.success, e.vlm_proposal) == ("awaiting_label", None, True)
    store.add_label(eid, False, source="operator")
    assert (store.episode(eid).status, store.episode(eid).success) == ("labelled", False)
    p = store.prompt(pid)
    assert (p.n_episodes, p.n_success, p.success_rate) == (1, 0, 0.0)
    with pytest.raises(ConflictError, match="already labelled failure"):
        store.add_label(eid, True, source="operator")
    assert store.episode(eid).success is False  # nothing changed
    store.add_label(eid, True, source="operator", reason="misclick", relabel=True)
    assert store.episode(eid).success is True
    assert store.prompt(pid).success_rate == 1.0
    hist = store.labels(eid)
    assert [(lab.source, lab.success) for lab in hist] == [
        ("vlm", True),
        ("operator", False),
        ("operator", True),
    ]
    assert [lab.authoritative for lab in hist] == [False, True, True]


def test_bad_labels_are_refused_and_change_nothing(store: Store) -> None:
    store.ensure_task(TASK, CANON)
    pid = store.prompts(TASK)[0].id
    running = store.create_episode(TASK, pid, 0, "bootstrap")
    with pytest.raises(ConflictError, match="still running"):
        store.add_label(running.id, True)
    with pytest.raises(NotFoundError, match="unknown episode id 424242"):
        store.add_label(424242, True)
    with pytest.raises(InvalidArgumentError, match="label source"):
        store.add_label(running.id, True, source="intern")
    store.abort_episode(running.id, "operator pressed e-stop")
    with pytest.raises(ConflictError, match="aborted"):
        store.add_label(running.id, True)
    assert store.labels(running.id) == []
    assert store.episode(running.id).status == "aborted"


def test_prompt_statistics_of_one_stage(store: Store) -> None:
    """A prompt's counts over one stage's episodes (the pool rule's, over the bootstrap) and over
    every stage (the page's): authoritative labels only, discarded episodes never."""
    store.ensure_task(TASK, CANON)
    pid = store.add_prompt(TASK, "place the green box in the bowl").id
    other = store.add_prompt(TASK, "drop the green box into the bowl").id

    def ended(prompt_id: int, stage: str, label: bool | None) -> int:
        ep = store.create_episode(TASK, prompt_id, policy_version=0, stage=stage)
        store.finish_episode(ep.id, make_episode_file(ep.id, TASK, n_chunks=2))
        if label is not None:
            store.add_label(ep.id, label, source="simulator")
        return ep.id

    ended(pid, "bootstrap", True)
    ended(pid, "bootstrap", False)
    ended(pid, "bootstrap", None)  # awaiting its label: finished, not counted
    store.discard_episode(ended(pid, "bootstrap", True), "someone reached into the scene")
    ended(pid, "rl", True)
    ended(other, "bootstrap", True)
    store.add_label(ended(pid, "bootstrap", None), True, source="vlm")  # a proposal, not a label

    def counts(stage: str | None) -> tuple[int, int, int]:
        p = next(p for p in store.prompts(TASK, stage=stage) if p.id == pid)
        return p.n_episodes, p.n_success, p.n_finished

    assert counts("bootstrap") == (2, 1, 4)
    assert counts(None) == (3, 2, 5)
    whole = store.prompt(pid)
    assert (whole.n_episodes, whole.n_success, whole.n_finished) == (3, 2, 5)
    assert counts("rl") == (1, 1, 1)
    with pytest.raises(InvalidArgumentError, match="stage"):
        store.prompts(TASK, stage="warmup")


def test_discard_restore_and_note(store: Store) -> None:
    eid = _finished_episode(store)
    store.add_label(eid, True, source="operator")
    pid = store.episode(eid).prompt_id
    assert store.prompt(pid).n_episodes == 1
    e = store.discard_episode(eid, "someone reached into the scene")
    assert (e.status, e.discard_reason, e.success) == ("discarded", "someone reached into the scene", True)
    assert e.discarded_at is not None
    # Out of every statistic and of training (which reads labelled episodes), labels kept.
    assert (store.prompt(pid).n_episodes, store.prompt(pid).n_finished) == (0, 0)
    assert store.episodes(status="labelled") == [] and len(store.labels(eid)) == 1
    with pytest.raises(ConflictError, match="restore it before labelling"):
        store.add_label(eid, False, source="operator", relabel=True)
    with pytest.raises(ConflictError, match="only an ended episode"):
        store.discard_episode(eid, "twice")
    with pytest.raises(InvalidArgumentError, match="needs a reason"):
        store.discard_episode(eid, " ")
    e = store.restore_episode(eid)
    assert (e.status, e.success, e.discard_reason, e.discarded_at) == ("labelled", True, "", None)
    assert store.prompt(pid).n_episodes == 1
    with pytest.raises(ConflictError, match="not discarded"):
        store.restore_episode(eid)
    assert store.set_episode_note(eid, "gripper slipped on the rim").note == "gripper slipped on the rim"
    running = store.create_episode(TASK, pid, 0, "bootstrap")
    with pytest.raises(ConflictError, match="abort it first"):
        store.discard_episode(running.id, "bad reset")


def test_abort_running_after_crash(store: Store) -> None:
    eid = _finished_episode(store)
    pid = store.episode(eid).prompt_id
    store.add_label(eid, True, source="simulator")
    r1 = store.create_episode(TASK, pid, 0, "rl").id
    ids = store.abort_running_episodes("loop restarted mid-episode")
    assert ids == [r1]
    e = store.episode(r1)
    assert (e.status, e.abort_reason) == ("aborted", "loop restarted mid-episode")
    assert store.episode(eid).status == "labelled"
    with pytest.raises(ConflictError):
        store.finish_episode(r1, make_episode_file(r1, TASK))
    with pytest.raises(InvalidArgumentError, match="needs a reason"):
        store.abort_episode(r1, "")


def test_episodes_query(store: Store) -> None:
    ids = [_finished_episode(store) for _ in range(3)]
    store.add_label(ids[0], True, source="operator")
    assert [e.id for e in store.episodes()] == ids
    assert [e.id for e in store.episodes(since_id=ids[0])] == ids[1:]
    assert [e.id for e in store.episodes(newest_first=True, limit=2)] == ids[::-1][:2]
    assert [e.id for e in store.episodes(task=TASK, status="awaiting_label")] == ids[1:]
    assert store.count_episodes(TASK, "labelled") == 1
    with pytest.raises(InvalidArgumentError):
        store.episodes(status="done")


def test_concurrent_double_label_only_one_wins(store: Store) -> None:
    eid = _finished_episode(store, n_chunks=2)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def label(ok: bool) -> None:
        barrier.wait()
        try:
            store.add_label(eid, ok, source="operator")
            outcomes.append("ok")
        except ConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=label, args=(i % 2 == 0,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 3 + ["ok"]
    assert len(store.labels(eid)) == 1


def test_checkpoints_calls_metrics(store: Store) -> None:
    assert store.latest_checkpoint() is None
    store.add_checkpoint(0, "/ck/v0.pt", {"sft_loss": 0.5})
    store.add_checkpoint(1, "/ck/v1.pt", {"pg_loss": 0.1})
    c = store.latest_checkpoint()
    assert c is not None and (c.version, c.path, c.metrics) == (1, "/ck/v1.pt", {"pg_loss": 0.1})
    with pytest.raises(ConflictError):
        store.add_checkpoint(1, "/ck/again.pt", {})
    call = store.record_supervisor_call("candidates", "gpt-x", 1200, 300, 0.004, 2.5, True)
    store.record_supervisor_call("summary", "gpt-x", 800, 40, 0.001, 1.1, False, error="timeout")
    calls = store.supervisor_calls()
    assert [x.kind for x in calls] == ["summary", "candidates"] and calls[1].id == call.id
    assert calls[0].error == "timeout" and not calls[0].ok
    for step, v in [(2, 0.3), (1, 0.1), (3, 0.5)]:
        store.add_metric("alpha/t", v, step)
    assert [(s, v) for s, v, _ in store.metrics("alpha/t")] == [(1, 0.1), (2, 0.3), (3, 0.5)]
    assert store.metric_names() == ["alpha/t"]
    with pytest.raises(InvalidArgumentError, match="not finite"):
        store.add_metric("alpha/t", float("nan"), 4)


def test_pruned_checkpoints_keep_their_row_marked(store: Store) -> None:
    store.add_checkpoint(0, "/ck/v0.pt", {"sft_loss": 0.5})
    store.add_checkpoint(1, "/ck/v1.pt", {"pg_loss": 0.1})
    assert [c.pruned_at for c in store.checkpoints()] == [None, None]
    first = store.mark_checkpoint_pruned(1)
    assert first.pruned_at is not None and first.pruned_at.tzinfo is not None
    assert store.mark_checkpoint_pruned(1).pruned_at == first.pruned_at  # marking again keeps the time
    [v0, v1] = store.checkpoints()
    assert v0.pruned_at is None and (v1.version, v1.metrics, v1.pruned_at) == (
        1,
        {"pg_loss": 0.1},
        first.pruned_at,
    )
    with pytest.raises(NotFoundError, match="no checkpoint version 7"):
        store.mark_checkpoint_pruned(7)


def test_policy_versions_in_use_are_those_of_episodes_in_play(store: Store) -> None:
    store.ensure_task(TASK, CANON)
    pid = store.prompts(TASK, "canonical")[0].id
    assert store.policy_versions_in_use() == set()
    labelled = store.create_episode(TASK, pid, policy_version=1, stage="rl")
    finish_with_videos(store, labelled.id, make_episode_file(labelled.id, TASK, n_chunks=2))
    store.add_label(labelled.id, True, source="operator")
    aborted = store.create_episode(TASK, pid, policy_version=2, stage="rl")
    store.abort_episode(aborted.id, "e-stop")
    waiting = store.create_episode(TASK, pid, policy_version=3, stage="rl")
    finish_with_videos(store, waiting.id, make_episode_file(waiting.id, TASK, n_chunks=2))
    store.create_episode(TASK, pid, policy_version=4, stage="rl")  # running
    assert store.policy_versions_in_use() == {3, 4}


def test_intents_are_consumed_once(store: Store) -> None:
    assert store.take_intent(StartEpisode) is None
    a = store.add_intent(StartEpisode(by="operator", task=TASK))
    store.add_intent(StartEpisode())
    store.add_intent(AbortEpisode(episode_id=3))
    assert len(store.pending_intents(StartEpisode)) == 2
    got = store.take_intent(StartEpisode)
    assert got is not None and got.id == a.id and got.intent == StartEpisode(by="operator", task=TASK)
    assert got.consumed_at is not None
    assert store.discard_intents(StartEpisode) == 1
    assert store.take_intent(StartEpisode) is None
    [abort] = store.pending_intents(AbortEpisode)  # another kind: untouched
    assert abort.intent.episode_id == 3


def _raw_intent(store: Store, kind: str, payload: dict[str, Any]) -> int:
    """A row as another version (or a person with SQL) might have written it."""
    with store.backend.write() as s:
        row = Intent(kind=kind, payload=payload, created_at=datetime.now(UTC), consumed_at=None)
        s.add(row)
        s.flush()
        return row.id


def test_a_malformed_or_unknown_intent_is_failed_with_why_not_lost(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    bad_end = _raw_intent(store, "end_episode", {"success": True})  # no episode_id
    good_end = store.add_intent(EndEpisode(episode_id=5, success=False)).id
    bad_take = _raw_intent(store, "take_control", {"episode_id": "seven"})
    unknown = _raw_intent(store, "open_gripper", {"width_m": 0.08})
    with caplog.at_level(logging.ERROR, logger="pde.storage"):
        got = store.take_intent(EndEpisode)  # the malformed one on the way is failed, not handed out
        assert store.pending_intents(TakeControl) == []  # a read finds it: failed, not left pending
        [gone] = store.fail_unknown_intents()
    assert got is not None and got.id == good_end and got.intent.success is False
    assert gone.id == unknown and "unknown intent kind 'open_gripper'" in gone.error
    failed = {f.id: f for f in store.failed_intents()}
    assert set(failed) == {bad_end, bad_take, unknown}
    assert "Object missing required field `episode_id`" in failed[bad_end].error
    assert "Expected `int`, got `str` - at `$.episode_id`" in failed[bad_take].error
    assert failed[bad_take].payload == {"episode_id": "seven"}  # kept as it was written
    assert [r.getMessage() for r in caplog.records if f"#{bad_take} " in r.getMessage()], caplog.text
    assert len(caplog.records) == 3  # once each
    assert store.take_intent(EndEpisode) is None and store.fail_unknown_intents() == []


def test_service_states(store: Store) -> None:
    store.set_service_state("loop", {"phase": "awaiting_reset"})
    store.set_service_state("loop", {"phase": "running", "episode_id": 3})
    states = store.service_states()
    assert states["loop"].state == {"phase": "running", "episode_id": 3}


def test_state_survives_reopen(db_url: str, tmp_path: Path) -> None:
    s1 = Store.open(db_url, tmp_path / "media")
    eid = _finished_episode(s1)
    s1.add_label(eid, True, source="operator")
    s1.close()
    with Store.open(db_url, tmp_path / "media") as s2:
        e = s2.episode(eid)
        assert (e.status, e.success) == ("labelled", True)
        assert Path(e.video_paths["wrist"]).is_file()


def test_json_columns_take_nan_and_numpy(store: Store) -> None:
    store.add_checkpoint(3, "/ck/3", {"ev": float("nan"), "kl": np.float32(0.5), "n": np.int64(4)})
    c = store.latest_checkpoint()
    assert c is not None and c.metrics == {"ev": None, "kl": 0.5, "n": 4}
    store.set_service_state("x", {"v": float("inf"), "l": [np.float64(1.5)]})
    assert store.service_states()["x"].state == {"v": None, "l": [1.5]}


def test_a_retired_intent_left_pending_is_failed_with_why(store: Store) -> None:
    """A "prompt rollouts done" row an earlier loop wrote: the supervisor reads that fact from the
    store now, so the row is closed saying so, not left pending nor called unknown."""
    old = _raw_intent(store, "prompt_rollouts_done", {"task": TASK, "prompt_id": 1, "n_episodes": 2})
    [gone] = store.fail_unknown_intents()
    assert gone.id == old and "'prompt_rollouts_done' is retired: the supervisor reads" in gone.error
