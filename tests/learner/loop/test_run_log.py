"""Runs a lab can read: the loop's curves (success per prompt and per prompt source, α, pool and
admissions, episode time, PPO's statistics and update time) land in TensorBoard event files read
back with TensorBoard's own reader, each labelled episode in the run's episodes.jsonl, and
``pde report`` turns the folder into one HTML page. In process with the loop's doubles (a real
store, a real RunLog); tests/learner/loop/test_service_sim.py runs `pde loop` in the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.loop.core import EpisodeLoop
from learner.loop.training import BackgroundTrainer, TrainedVersion
from learner.run_log import RunLog, RunLogError
from pde.report import read_curves, read_episodes, write_report
from pde_contract.records import PromptSource
from pde_contract.run_metrics import (
    PPO_UPDATE_WALL_S,
    TaskCurve,
    ppo_metric,
    prompt_success_metric,
    source_success_metric,
    task_metric,
)
from pde_storage import Store
from tests.learner.loop.doubles import FakeActor, FakeRobot, FakeTrainer
from tests.learner.loop.test_loop import _settings

TASK = "put_green_container_in_bowl"
CANON = "put the green container in the bowl"


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the folder's event files, through TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_the_loop_writes_its_curves_to_tensorboard_and_report_reads_them(
    store: Store, tmp_path: Path
) -> None:
    store.ensure_task(TASK, CANON)
    store.set_task_state(TASK, stage="rl", alpha=0.5, ema_success=0.25)
    pool = store.add_prompt(TASK, "drop the green box into the bowl", source="vlm")
    store.set_prompt_status(pool.id, "pool")
    store.set_prompt_status(store.add_prompt(TASK, "throw it", source="vlm").id, "rejected")

    def save(new: TrainedVersion) -> str:
        store.add_checkpoint(new.version, f"/ck/{new.version}", new.metrics, new.trained_through_episode_id)
        return f"/ck/{new.version}"

    settings = _settings(batch_size=3, max_episodes=6, synchronous_updates=True)
    with RunLog.start(tmp_path / "runs", "loop") as run_log:
        loop = EpisodeLoop(
            store,
            FakeRobot(),
            FakeActor(outcomes=lambda i: i % 2 == 0),
            settings,
            trainer=BackgroundTrainer(FakeTrainer(), save),
            run_log=run_log,
        )
        loop.run()
        run_dir = run_log.directory
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.startswith("loop-")
    scalars = read_scalars(run_dir)
    canon = store.prompts(TASK, "canonical")[0]
    labelled = store.episodes(status="labelled")
    assert len(labelled) == 6
    for curve in (TaskCurve.ALPHA, TaskCurve.POOL_SIZE, TaskCurve.EPISODE_S, TaskCurve.REJECTED):
        assert len(scalars[task_metric(TASK, curve)]) == 6, curve
    assert scalars[task_metric(TASK, TaskCurve.POOL_SIZE)][-1] == (6, 1.0)
    assert scalars[task_metric(TASK, TaskCurve.ADMISSION_RATE)][-1] == (6, 0.5)  # 1 pool, 1 rejected
    # Per prompt and per source: the last point of each is the store's own count.
    for p in (canon, store.prompt(pool.id)):
        rate = store.prompt(p.id).success_rate
        if rate is not None:
            assert scalars[prompt_success_metric(TASK, p.id)][-1][1] == pytest.approx(rate)
    sources = {PromptSource(p.source) for p in store.prompts(TASK) if p.n_episodes}
    assert {s for s in PromptSource if source_success_metric(TASK, s) in scalars} == sources
    # PPO: two synchronous updates, a point per version.
    assert [s for s, _ in scalars[ppo_metric("pg_loss")]] == [1, 2]
    assert scalars[ppo_metric("approx_kl")][0][1] == pytest.approx(0.01)
    assert [s for s, _ in scalars[PPO_UPDATE_WALL_S]] == [1, 2]
    assert ppo_metric("explained_variance") not in scalars  # NaN is not a point
    # The same names as the store's metrics (one home).
    assert set(scalars) == set(store.metric_names())

    episodes = read_episodes(run_dir)
    assert [e.id for e in episodes] == [e.id for e in labelled]
    assert [e.success for e in episodes] == [bool(e.success) for e in labelled]
    assert len(read_curves(run_dir)) == len(scalars)
    page = write_report(run_dir).read_text()
    assert page.count("<svg") == len(scalars)
    assert f"<td>{CANON}</td><td>canonical</td>" in page
    assert "http" not in page  # self-contained: nothing fetched


def test_report_says_what_is_wrong_with_a_folder_that_is_no_run(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no TensorBoard event file"):
        write_report(tmp_path)


def test_a_named_wandb_project_without_wandb_installed_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch.utils.tensorboard")
    try:
        import wandb  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        pytest.skip("wandb is installed here")
    with pytest.raises(RunLogError, match="pip install wandb"):
        RunLog(tmp_path / "run", wandb_project="pde")
