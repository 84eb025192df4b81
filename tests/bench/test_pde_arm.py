"""bench/pde_arm.py decides what a lab's loop and supervisor decide.

The same scripted outcomes (a FakeActor whose success is a fixed function of the prompt and the
scene seed: the robot and the policy are the boundary faked here) go to the benchmark's ``drive``
(one thread steps the loop, synchronous PPO updates) and to the lab's wiring (``EpisodeLoop.run``
and ``SupervisorService.run`` in their own threads, PPO in the background). Both must make the same
decisions: which prompts are admitted, alpha after each label, which prompt and scene each episode
gets, and which episodes (with which rewards) form each PPO batch. The store is real (SQLite).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from learner.loop.core import EpisodeLoop
from learner.loop.tasks import canonical_prompt
from learner.loop.training import BackgroundTrainer
from learner.ppo_config import PPOConfig
from pde_storage import Store
from supervisor.proposers import PromptProposer, ProposerOptions, make_proposer
from supervisor.service import SupervisorService
from supervisor.vlm.base import CandidateRequest, CandidateResult
from tests.learner.loop.doubles import FakeActor, FakeRobot, FakeTrainer

ROOT = Path(__file__).resolve().parents[2]
TASK = "put_green_container_in_bowl"
GOAL = canonical_prompt(TASK)
SEED = 3


def _pde_arm() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pde_arm", ROOT / "bench" / "pde_arm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pde_arm"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


pde_arm = _pde_arm()


def succeeds(prompt: str, scene: int | None) -> bool:
    """The scripted policy: a fixed coin per (prompt, scene), likelier under some verbs."""
    coin = zlib.crc32(f"{prompt}|{scene}".encode()) % 100
    return coin < (60 if prompt.startswith(("place", "set", "move")) else 20)


def scripted_actor() -> FakeActor:
    actor: FakeActor
    actor = FakeActor(
        outcomes=lambda i: succeeds(actor.calls[i]["rollout_prompt"], actor.calls[i]["seed"]), n_chunks=1
    )
    return actor


BENCH = pde_arm.BenchSettings(
    task=TASK, budget_episodes=40, eval_at=(0, 16, 40), eval_episodes=3, max_chunks=3,
    rollouts_per_prompt=2, candidates_k=2, iterations_t0=3, eta=0.5, pool_min_m=2, batch_size=4,
    supervisor_poll_s=0.01,
    wordings=("place the green container in the bowl", "set the green tub into the bowl",
              "drop the green box in the bowl"),  # the oracle arm's scripted pool
)  # fmt: skip
# A PPO update takes time in both paths (real ones ~3 s): an update that returned at once hid a
# benchmark that waited for it from a lab loop that did not (issue 32: alpha differed at episode 30
# with 0.5 s updates).
UPDATE_TIME_S = 0.1


def proposer_of(arm: Any) -> PromptProposer | None:
    options = ProposerOptions(seed=SEED, wordings=BENCH.wordings)
    return make_proposer(arm.proposer, options) if arm.prompt_search else None


def _stores(tmp: Path) -> tuple[Store, Store, dict[str, Any]]:
    where: dict[str, Any] = {"database_url": f"sqlite:///{tmp}/pde.db", "data_dir": tmp}
    return (
        Store.open(where["database_url"], tmp / "media"),
        Store.open(where["database_url"], tmp / "media"),
        where,
    )


def decisions(store: Store, trainer: FakeTrainer) -> dict[str, Any]:
    return {
        "prompts": [(p.text, p.status, p.iteration) for p in store.prompts(TASK)],
        "episodes": [(e.stage, e.rollout_prompt, e.seed, e.success) for e in store.episodes(task=TASK)],
        "alpha": [(step, value) for step, value, _ in store.metrics(f"{TASK}/alpha")],
        "batches": [[(int(ef.episode_id), reward) for ef, reward in batch] for batch in trainer.batches],
    }


def bench_path(tmp: Path, arm_name: str) -> tuple[dict[str, Any], Any]:
    arm = pde_arm.parse_arm(arm_name)
    store, supervisor_store, where = _stores(tmp)
    trainer = FakeTrainer(update_time_s=UPDATE_TIME_S)
    evaluated: list[int] = []

    def evaluate(at: int) -> list[bool]:
        evaluated.append(at)
        return [succeeds(GOAL, pde_arm.EVAL_SEED_BASE + i) for i in range(BENCH.eval_episodes)]

    record = pde_arm.drive(
        loop_store=store,
        supervisor_store=supervisor_store,
        robot=FakeRobot(),
        actor=scripted_actor(),
        trainer=trainer,
        save=lambda _new: "",
        settings=pde_arm.loop_settings(arm, BENCH, SEED, poll_period_s=0.002, **where),
        supervisor=pde_arm.supervisor_settings(BENCH, **where),
        proposer=proposer_of(arm),
        embedder=None,
        budget_episodes=BENCH.budget_episodes,
        eval_at=BENCH.eval_at,
        evaluate=evaluate,
    )
    assert evaluated == [0, 16, 40]
    return decisions(store, trainer), record


def lab_path(tmp: Path, arm_name: str) -> dict[str, Any]:
    """`pde loop --auto` and `pde supervisor` as a lab runs them: two threads polling one database,
    PPO through the BackgroundTrainer, at the benchmark's loop settings (its
    ``synchronous_updates`` is the loop's setting PDE_LOOP_SYNCHRONOUS_UPDATES: a lab that leaves it
    off lets episodes go on under the old policy while an update runs, and its decisions differ)."""
    arm = pde_arm.parse_arm(arm_name)
    store, supervisor_store, where = _stores(tmp)
    settings = pde_arm.loop_settings(arm, BENCH, SEED, poll_period_s=0.002, **where).model_copy(
        update={"max_episodes": BENCH.budget_episodes}
    )
    trainer = FakeTrainer(update_time_s=UPDATE_TIME_S)
    loop = EpisodeLoop(
        store, FakeRobot(), scripted_actor(), settings, BackgroundTrainer(trainer, lambda _new: "")
    )
    service = SupervisorService(
        supervisor_store,
        pde_arm.supervisor_settings(BENCH, **where),
        None,
        None,
        seed=SEED,
        proposer=proposer_of(arm),
    )
    stop = threading.Event()
    supervisor = threading.Thread(target=service.run, args=(stop,))
    supervisor.start()
    try:
        loop_thread = threading.Thread(target=loop.run)
        loop_thread.start()
        loop_thread.join(60)
        assert not loop_thread.is_alive(), "the lab loop did not finish its episodes"
        loop.finish_training(10)
    finally:
        stop.set()
        supervisor.join(10)
    return decisions(store, trainer)


@pytest.mark.parametrize("arm_name", sorted(pde_arm.ARM_KINDS))
def test_the_benchmark_decides_what_the_lab_loop_decides(tmp_path: Path, arm_name: str) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "lab").mkdir()
    bench, record = bench_path(tmp_path / "bench", arm_name)
    lab = lab_path(tmp_path / "lab", arm_name)
    for key in ("prompts", "episodes", "alpha", "batches"):
        assert bench[key] == lab[key], key
    episodes = bench["episodes"]
    assert len(episodes) == BENCH.budget_episodes == record.env_episodes
    assert len({scene for _, _, scene, _ in episodes}) == len(episodes)  # a fresh scene per episode
    if arm_name == "noise":
        assert {(stage, prompt) for stage, prompt, _, _ in episodes} == {("rl", GOAL)}
        assert len(bench["batches"]) == BENCH.budget_episodes // BENCH.batch_size
        return
    # The run exercised the rule: admissions (and the paraphraser's rejections), RL entered early
    # (M_min) or at T0, alpha moved, pool prompts in the batches.
    statuses = [status for _, status, _ in bench["prompts"]]
    assert "pool" in statuses and (arm_name == "oracle" or "rejected" in statuses)
    assert any(stage == "bootstrap" for stage, *_ in episodes) and episodes[-1][0] == "rl"
    if arm_name == "relabel":  # alpha pinned at 1: every RL episode acts under the canonical prompt
        assert {prompt for stage, prompt, _, _ in episodes if stage == "rl"} == {GOAL}
        assert {a for _, a in bench["alpha"]} == {1.0}
        return
    assert len({round(a, 6) for _, a in bench["alpha"]}) > 2
    pool = {text for text, status, _ in bench["prompts"] if status == "pool"}
    assert any(prompt in pool for stage, prompt, _, _ in episodes if stage == "rl")
    assert [u["update"] for u in record.updates] == list(range(1, len(bench["batches"]) + 1))


def _bench_pde(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # it imports bench/_common.py, bench_learning.py
    spec = importlib.util.spec_from_file_location("bench_pde", ROOT / "bench" / "bench_pde.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arm", ["pde_mixed", "pde_mixed@standin"])
def test_a_tiny_benchmark_runs_the_real_loop_resumes_and_merges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arm: str
) -> None:
    """The real driver end to end at a tiny size: the sim robot server, the Actor, the Trainer,
    the supervisor with the rule-based proposer or the sim stand-in for the VLM (which reads the
    loop's episodes), a part file, a merge, and a rerun that skips it."""
    from learner.checkpoints import CheckpointStore
    from learner.policies.vla import SmallVLAPolicy, VLAConfig

    bench_pde = _bench_pde(monkeypatch)
    policy = SmallVLAPolicy(
        VLAConfig(text_encoder="fake-hashing", hidden_dim=32, image_size_px=32, chunk_len=4)
    )
    sft = CheckpointStore(tmp_path / "sft").save(policy, 0, {"sft_loss": 1.0})
    parts, out = tmp_path / "parts", tmp_path / "pde_vs_noise.json"
    argv = [
        "--sft-checkpoint", str(sft), "--sft-seed", "1", "--task", TASK, "--arms", arm,
        "--seeds", "0", "--budget-episodes", "5", "--eval-at", "0,5", "--eval-episodes", "2",
        "--max-chunks", "2", "--n-per-prompt", "1", "--k-candidates", "2", "--t0", "1", "--m-min", "1",
        "--batch-size", "2", "--image-px", "32", "--work-dir", str(tmp_path / "work"),
        "--parts-dir", str(parts), "--out", str(out),
    ]  # fmt: skip
    assert bench_pde.main(argv) == 0
    part_file = parts / f"{arm}-sft1-seed0.json"
    part = json.loads(part_file.read_text())
    result = part["result"]
    assert result["env_episodes"] == 5 and [e["env_episodes"] for e in result["evaluations"]] == [0, 5]
    train = [e for e in part["episodes"] if e["kind"] == "train"]
    assert len(train) == 5 and train[0]["stage"] == "bootstrap" and train[0]["prompt"] == GOAL
    assert {"arm", "seed", "sft_seed", "scene", "prompt", "success"} <= set(train[0])
    assert len([e for e in part["episodes"] if e["kind"] == "eval"]) == 4
    assert [p["status"] for p in result["prompts"]][:1] == ["canonical"] and len(result["prompts"]) == 3
    assert part["frozen"]["sft_checkpoint_sha256"]
    merged = json.loads(out.read_text())
    row = merged["arms"][arm]["per_seed"][0]
    assert {"seed", "eval_episodes", "success_start", "success_end", "env_episodes"} <= set(row)
    assert {"premise", "primary_contrast", "frozen"} <= set(merged)
    # Resumable: the finished part is skipped (no robot server, no episode), the merge runs again.
    before = part_file.stat().st_mtime_ns
    out.unlink()
    assert bench_pde.main(argv) == 0
    assert part_file.stat().st_mtime_ns == before and out.is_file()


def _part(arm: str, seed: int, proposer: str = "", **bench: Any) -> dict[str, Any]:
    evaluations = [
        {"env_episodes": at, "successes": k, "n": 10, "rate": k / 10} for at, k in ((0, 1), (320, 3))
    ]
    settings = {"budget_episodes": 320, "batch_size": 32, "wordings": [], **bench}
    return {
        "arm": arm,
        "command": f"python bench/bench_pde.py --arms {arm} --seeds {seed}",
        "settings": {"arm": {"proposer": proposer}, "bench": settings},
        "frozen": {
            "sft_checkpoint_sha256": "a",
            "files_sha256": {"learner/loop/core.py": "b"},
            "commit": f"c{seed}",
        },
        "result": {
            "seed": seed,
            "sft_seed": 0,
            "eval_episodes": 10,
            "success_start": 0.1,
            "success_end": 0.3,
            "env_episodes": 320,
            "evaluations": evaluations,
        },
        "episodes": [],
    }


def test_the_merge_joins_parts_of_one_setting_and_refuses_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench_pde = _bench_pde(monkeypatch)
    parts = tmp_path / "parts"
    parts.mkdir()

    def write(name: str, part: dict[str, Any]) -> None:
        (parts / name).write_text(json.dumps(part))

    write("noise-sft0-seed0.json", _part("noise", 0))
    oracle = _part("oracle", 1, "scripted", wordings=["place it", "set it"])
    write("oracle-sft0-seed1.json", oracle)
    merged = bench_pde.merge(parts, tmp_path / "out.json", "t")
    assert set(merged["arms"]) == {"noise", "oracle"}
    assert merged["budget"]["wordings"] == ["place it", "set it"]  # the oracle's, not a mismatch
    assert merged["frozen"]["commits"] == ["c0", "c1"]  # committed parts move HEAD: recorded, not compared
    # no task in these parts' settings: the premise says why it is empty; one noise run: no contrast
    assert (
        merged["premise"]["canonical_start"] is None and "no training wordings" in merged["premise"]["reason"]
    )
    assert merged["primary_contrast"]["mean"] is None and "needs 2" in merged["primary_contrast"]["reason"]
    assert merged["completeness"]["complete"] is False
    write("noise-sft0-seed2.json", _part("noise", 2, batch_size=64))
    with pytest.raises(SystemExit, match="different settings"):
        bench_pde.merge(parts, tmp_path / "out.json", "t")
    other = _part("noise", 2)
    other["frozen"]["files_sha256"] = {"learner/loop/core.py": "changed"}
    write("noise-sft0-seed2.json", other)
    with pytest.raises(SystemExit, match="algorithm files"):
        bench_pde.merge(parts, tmp_path / "out.json", "t")


class UnstorableProposer(PromptProposer):
    """A proposer whose prompts the store refuses (a source it does not keep): every poll fails."""

    source = "nowhere"

    def propose(self, request: CandidateRequest) -> CandidateResult:
        return CandidateResult(["place the green container in the bowl"], {}, "", self.source)


def test_a_supervisor_that_keeps_failing_stops_the_benchmark_with_the_reason(tmp_path: Path) -> None:
    store, supervisor_store, where = _stores(tmp_path)
    with pytest.raises(RuntimeError, match="supervisor failed"):
        pde_arm.drive(
            loop_store=store,
            supervisor_store=supervisor_store,
            robot=FakeRobot(),
            actor=scripted_actor(),
            trainer=FakeTrainer(),
            save=lambda _new: "",
            settings=pde_arm.loop_settings(
                pde_arm.parse_arm("pde_mixed"), BENCH, SEED, poll_period_s=0.002, **where
            ),
            supervisor=pde_arm.supervisor_settings(BENCH, **where),
            proposer=UnstorableProposer(),
            embedder=None,
            budget_episodes=BENCH.budget_episodes,
            eval_at=(),
            evaluate=lambda at: [],
        )


LENS_TASK = "put_green_container_in_front_of_camera"
GOAL_LENS = canonical_prompt(LENS_TASK)
# Runs (SFT seed, RL seed) and each arm's gain in them: the differences pde_mixed - noise are
# 0.10, 0.25, 0.05, 0.20, 0.15, 0.30 (tests/learner/test_pde_stats.py's hand-computed reference:
# mean 0.175, sd 0.0935414, se 0.0381881, t(0.975, 5) 2.570582, 95% CI [0.0768350, 0.2731650]).
RUNS = [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2)]
NOISE_GAINS = [0.05, 0.00, 0.10, 0.05, 0.00, 0.05]
MIXED_GAINS = [0.15, 0.25, 0.15, 0.25, 0.15, 0.35]


def _lens_part(arm: str, sft_seed: int, seed: int, gain: float, proposals: list[str]) -> dict[str, Any]:
    part = _part(arm, seed, "paraphrase" if arm == "pde_mixed" else "", task=LENS_TASK, eval_episodes=100)
    start = 0.12 if sft_seed == 0 else 0.19
    part["frozen"]["commit"] = "c"
    part["result"].update(
        sft_seed=sft_seed,
        eval_episodes=100,
        success_start=start,
        success_end=round(start + gain, 2),
        prompts=[{"text": GOAL_LENS, "status": "canonical"}]
        + [{"text": t, "status": "pool"} for t in proposals],
    )
    return part


def test_the_merge_joins_premise_contrast_and_completeness_from_synthetic_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve synthetic parts (noise and pde_mixed, SFT seeds 0 and 2, RL seeds 0-2) on the paper's
    regime: the merged file passes the schema, its contrast is the hand-computed one, its premise
    comes from the committed calibration and the proposals the parts recorded."""
    bench_pde = _bench_pde(monkeypatch)
    stats = importlib.import_module("_pde_stats")
    parts = tmp_path / "parts"
    parts.mkdir()
    recorded = {
        (0, 0): ["hold the green box up near the lens"],
        (2, 1): ["move the green container in front of the camera"],
    }
    for (k, s), g_noise, g_mixed in zip(RUNS, NOISE_GAINS, MIXED_GAINS, strict=True):
        for arm, g in (("noise", g_noise), ("pde_mixed", g_mixed)):
            part = _lens_part(arm, k, s, g, recorded.get((k, s), []) if arm == "pde_mixed" else [])
            (parts / f"{arm}-sft{k}-seed{s}.json").write_text(json.dumps(part))
    merged = bench_pde.merge(parts, tmp_path / "out.json", "t")
    assert stats.schema_errors(merged) == []
    pc = merged["primary_contrast"]
    assert pc["paired"] and pc["n_seeds"] == 6 and pc["mean"] == pytest.approx(0.175)
    assert pc["ci95"] == [pytest.approx(0.0768350, abs=1e-6), pytest.approx(0.2731650, abs=1e-6)]
    assert merged["arm_stats"]["noise"]["gain"]["mean"] == pytest.approx(0.25 / 6)
    assert merged["completeness"] == {**merged["completeness"], "complete": True, "missing": []}
    premise = merged["premise"]
    assert premise["decoy"] is False and premise["canonical_prob"] == 0.075
    # bench/results/premise_calibration.json at p 0.075: SFT seed 0 12/100, seed 2 19/100
    assert [(r["sft_seed"], r["successes"], r["n"]) for r in premise["canonical_start"]] == [
        (0, 12, 100),
        (2, 19, 100),
    ]
    rule = premise["overlap"]["paraphrase"]
    # one proposal is a training wording; the other is 6 word edits from "present the green box before
    # the lens" (move/present, container/box, in/before, front and of deleted, camera/lens)
    assert rule["recorded"]["n_proposals"] == 2 and rule["recorded"]["exact_matches"] == 1
    assert rule["recorded"]["nearest_word_edit"] == [0, 6] and rule["recorded"]["training_verb_share"] == 0.5
    assert rule["pre_run"]["exact_matches"] == 0 and "proposals" not in rule["pre_run"]
    assert premise["overlap"]["standin"]["recorded"] is None  # calibrated, never run here
    assert "sha256" in merged["frozen"]["premise_and_proposers"]
    table = bench_pde.markdown_table(merged)
    assert "| `pde_mixed` | 6 (0, 2) |" in table and "+0.175 [+0.077, +0.273]" in table
    assert "Complete: the runs, SFT seeds, scenes and budget issue 22 asks for." in table
    assert ": met (gain ratio" in table and "Exploratory" not in table  # no pde_canonical/oracle runs here
    secondary = merged["secondary_auc_contrasts"]
    assert len(secondary) == len(stats.SECONDARY) and all(c["mean"] is None for c in secondary)

    # A benchmark still in parts: one noise run missing, the contrast over the 5 pairs left
    (parts / "noise-sft2-seed2.json").unlink()
    merged = bench_pde.merge(parts, tmp_path / "out.json", "t")
    assert merged["primary_contrast"]["n_seeds"] == 5
    assert merged["primary_contrast"]["unpaired_runs_left_out"] == ["pde_mixed sft2 seed2"]
    assert merged["completeness"]["complete"] is False
    assert merged["completeness"]["missing"] == ["arm noise: 5 of 6 runs"]
    # The decoy recipe (the hard tier): a decoy, not calibrated in premise_calibration.json
    decoy = bench_pde.merge(
        parts, tmp_path / "out.json", "t", recipe=ROOT / "learner/recipes/language_premise.json"
    )
    assert decoy["premise"]["decoy"] is True and decoy["premise"]["canonical_start"] == []
    assert "no cell at canonical_prob 0.0" in decoy["premise"]["calibration_missing"]


@pytest.mark.parametrize("arm", sorted(pde_arm.ARM_KINDS))
def test_the_benchmark_arms_get_the_ppo_they_had(arm: str) -> None:
    bench, a = pde_arm.BenchSettings(), pde_arm.ARM_KINDS[arm]
    settings = pde_arm.loop_settings(a, bench, 3, database_url="sqlite://")
    assert settings.ppo == PPOConfig(
        ratio_variant=a.ratio_variant,
        learning_rate=bench.learning_rate,
        value_learning_rate=1e-3,
        noise_learning_rate=0.0,
        seed=3,
    )
