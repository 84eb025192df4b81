import copy

import numpy as np
import pytest
import torch

from learner.policies.vla import make_test_policy
from learner.ppo import RATIO_VARIANTS, PPOConfig
from learner.synthetic import synthetic_episode
from learner.trainer import Trainer, build_rollout_batch
from pde_contract.episodes import ChunkRecord, read_episode
from tests.contract.test_episodes import EPISODE_V1, format_1_traces

CANON = "put the green container in the bowl"


def _batch(policy, rollout_prompt, seed=0, n_eps=4):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_eps):
        p = rollout_prompt if i % 2 else CANON
        success = i in (0, 1)
        out.append(
            (
                synthetic_episode(policy, rng, 3, p, CANON, success, size_px=20, episode_id=f"e{i}"),
                float(success),
            )
        )
    return out


@pytest.mark.parametrize("variant", [v for v in RATIO_VARIANTS if v != "plain"])
def test_update_returns_finite_diagnostics(variant):
    torch.manual_seed(0)
    policy = make_test_policy("flow")
    stats = Trainer(policy, PPOConfig(ratio_variant=variant, minibatch_size=4)).update(
        _batch(policy, "drop the green box into the bowl")
    )
    for key in (
        "pg_loss",
        "v_loss",
        "approx_kl",
        "clipfrac",
        "explained_variance",
        "w0_mean",
        "prompt_kl",
        "prompt_ratio_mean",
        "w0_guarded_frac",
    ):
        assert key in stats and np.isfinite(stats[key]), key
    assert stats["n_chunks"] == 12 and stats["n_other_prompt_chunks"] == 6


def test_plain_variant_refuses_other_prompts():
    policy = make_test_policy("flow")
    with pytest.raises(ValueError, match="plain"):
        Trainer(policy, PPOConfig(ratio_variant="plain")).update(_batch(policy, "something else"))
    stats = Trainer(policy, PPOConfig(ratio_variant="plain", minibatch_size=4)).update(_batch(policy, CANON))
    assert stats["n_other_prompt_chunks"] == 0 and "prompt_kl" not in stats


@pytest.mark.parametrize("head", ["flow", "gaussian"])
def test_update_raises_likelihood_of_successful_chunks(head):
    torch.manual_seed(0)
    policy = make_test_policy(head)
    batch = _batch(policy, CANON, n_eps=4)
    trainer = Trainer(policy, PPOConfig(minibatch_size=12, learning_rate=1e-3, w0_guard="none"))

    def mean_logp(eps):
        from learner.trainer import build_rollout_batch

        rb = build_rollout_batch(policy, eps)
        with torch.no_grad():
            ps = rb.rollout_prompts
            return policy.evaluate_pair(rb.obs, ps, ps, rb.chains).rollout.log_prob.mean().item()

    good, bad = batch[:2], batch[2:]
    before = mean_logp(good) - mean_logp(bad)
    for _ in range(3):
        trainer.update(batch)
    assert mean_logp(good) - mean_logp(bad) > before


def test_demo_episodes_without_a_policy_trace_are_refused():
    policy = make_test_policy("flow")
    (ep, r), *_ = _batch(policy, CANON)
    for c in ep.chunks:
        c.trace = None
    with pytest.raises(ValueError, match=r"no policy trace.*sft"):
        Trainer(policy).update([(ep, r)])


@pytest.mark.parametrize("name", ["rollout_extras.episode", "rollout_extras_no_elements.episode"])
def test_format_1_episodes_with_the_trace_in_extras_train_as_they_did(name):
    # Files the format-1 actor wrote (trace as extras arrays) give the batch the format-1 trainer
    # built from them: its recorded traces (tests/fixtures/episode_v1/expected_traces.msgpack).
    episode = read_episode(EPISODE_V1 / name)
    expected = [t for t in format_1_traces()[name] if t is not None]
    assert len(expected) == len(episode.chunks)
    policy = make_test_policy("flow", chunk_len=4, flow_steps=5)  # the fixture's policy
    rb = build_rollout_batch(policy, [(episode, 1.0)])
    np.testing.assert_array_equal(rb.chains.numpy(), np.stack([t.chain for t in expected]))
    np.testing.assert_array_equal(rb.old_log_probs.numpy(), [t.log_prob for t in expected])
    np.testing.assert_array_equal(rb.old_values, [t.value for t in expected])
    elements = [t.log_prob_elements for t in expected]
    recorded = np.stack([e if e is not None else np.full((4, 7), np.nan, np.float32) for e in elements])
    np.testing.assert_array_equal(rb.old_log_prob_elements.numpy(), recorded)
    torch.manual_seed(0)
    stats = Trainer(policy, PPOConfig(minibatch_size=4)).update([(episode, 1.0), (episode, 0.0)])
    assert np.isfinite(stats["pg_loss"]) and stats["n_chunks"] == 2 * len(expected)
    # per-element log-probs from before they were recorded: theta_old's, as then
    assert stats["old_log_prob_reevaluated_frac"] == (1.0 if elements[0] is None else 0.0)


def test_policy_snapshot_is_an_independent_copy():
    policy = make_test_policy("flow")
    trainer = Trainer(policy, PPOConfig(minibatch_size=4))
    snap = trainer.policy_snapshot()
    trainer.update(_batch(policy, CANON, n_eps=4))
    w_live = next(policy.parameters())
    w_snap = next(snap.parameters())
    assert not torch.equal(w_live, w_snap) and not snap.training


@pytest.mark.parametrize("guard", ["rebase", "drop"])
def test_w0_guard_is_applied_and_reported(guard):
    torch.manual_seed(0)
    policy = make_test_policy("flow")
    batch = _batch(policy, "drop the green box into the bowl")
    # a bound far below the measured spread: every other-prompt chunk is guarded
    cfg = PPOConfig(minibatch_size=4, w0_guard=guard, w0_log_max=1e-7)
    stats = Trainer(policy, cfg).update(batch)
    assert stats["w0_guarded_frac"] >= 0.5  # the 6 other-prompt chunks of 12 (canonical ones may be tiny too)
    if guard == "drop":
        assert stats["kept_frac"] < 0.6
    else:
        assert stats["kept_frac"] == 1.0


def test_value_head_and_noise_get_their_own_step_sizes():
    torch.manual_seed(0)
    policy = make_test_policy("gaussian")
    cfg = PPOConfig(learning_rate=1e-6, value_learning_rate=1e-3, noise_learning_rate=1e-2, minibatch_size=12)
    trainer = Trainer(policy, cfg)
    policy_group, value_group, noise_group = trainer.optimizer.param_groups
    assert (policy_group["lr"], value_group["lr"], noise_group["lr"]) == (1e-6, 1e-3, 1e-2)
    assert {id(p) for p in value_group["params"]} == {id(p) for p in policy.value_head.parameters()}
    assert [id(p) for p in noise_group["params"]] == [id(policy.log_std)]
    n_grouped = sum(len(g["params"]) for g in trainer.optimizer.param_groups)
    assert n_grouped == len(list(policy.parameters()))
    # the value head and the noise move much further than the action mean in one update
    mean_before = policy.mean_head.weight.detach().clone()
    value_layer = policy.value_head[0]
    assert isinstance(value_layer, torch.nn.Linear)
    value_before = value_layer.weight.detach().clone()
    std_before = policy.log_std.detach().clone()
    trainer.update(_batch(policy, CANON))
    mean_step = (policy.mean_head.weight - mean_before).abs().max().item()
    assert (value_layer.weight - value_before).abs().max().item() > 50 * mean_step
    assert (policy.log_std - std_before).abs().max().item() > 50 * mean_step


def test_flow_head_has_no_noise_group():
    policy = make_test_policy("flow")
    assert policy.noise_parameters() == []
    assert len(Trainer(policy, PPOConfig(noise_learning_rate=1e-2)).optimizer.param_groups) == 2


def test_relabelled_search_successes_train_under_plain_ppo_from_a_ratio_of_one():
    """The loop's relabel option (learner.loop.core.relabelled): episodes rolled out under another
    prompt, relabelled with the canonical one, train with the plain ratio; their behaviour
    log-probs are re-evaluated under the canonical prompt, so their first ratio is 1."""
    from learner.loop.core import relabelled

    torch.manual_seed(0)
    policy = make_test_policy("flow")
    batch = [
        (relabelled(e, CANON) if e.rollout_prompt != CANON else e, r) for e, r in _batch(policy, "set it")
    ]
    assert all(c.trace.log_prob_elements is not None for e, _ in _batch(policy, "set it") for c in e.chunks)
    stats = Trainer(policy, PPOConfig(ratio_variant="plain", minibatch_size=4)).update(batch)
    assert stats["n_other_prompt_chunks"] == 0 and stats["old_log_prob_reevaluated_frac"] == 0.5
    assert stats["w0_min"] == pytest.approx(1.0, abs=1e-4) and stats["w0_max"] == pytest.approx(1.0, abs=1e-4)


def test_rows_that_did_not_run_leave_the_ratios():
    """A chunk's rows skipped at the seam or preempted (ChunkRecord.rows_run) do not enter PPO:
    whatever their recorded log-probabilities, the update sees the same ratios."""
    torch.manual_seed(0)
    policy = make_test_policy("flow")
    batch = _batch(policy, CANON, n_eps=2)
    for episode, _ in batch:
        for chunk in episode.chunks:
            chunk.rows_run = (1, 3)  # rows 0 and 3 of 4 did not run
    garbled = copy.deepcopy(batch)
    for episode, _ in garbled:
        for chunk in episode.chunks:
            assert chunk.trace is not None and chunk.trace.log_prob_elements is not None
            chunk.trace.log_prob_elements[[0, 3]] += 50.0
    for unit in ("chunk", "row", "dim"):
        cfg = PPOConfig(ratio_unit=unit, update_epochs=1, minibatch_size=6)
        stats = Trainer(copy.deepcopy(policy), cfg).update(batch)
        stats_garbled = Trainer(copy.deepcopy(policy), cfg).update(garbled)
        for key in ("behaviour_log_ratio_abs_mean", "w0_mean", "pg_loss", "approx_kl", "kept_frac"):
            assert stats_garbled[key] == pytest.approx(stats[key], rel=1e-5, abs=1e-6), (unit, key)
    # where every row ran, the same garbling moves them
    for episode, _ in garbled:
        for chunk in episode.chunks:
            chunk.rows_run = None
    stats_all = Trainer(copy.deepcopy(policy), PPOConfig(update_epochs=1, minibatch_size=6)).update(garbled)
    assert stats_all["behaviour_log_ratio_abs_mean"] > 10.0


def _person_chunk(like: ChunkRecord, dx_m: float) -> ChunkRecord:
    """One teleop row of a person who took over, as the actor records it (no trace)."""
    row = np.array([[dx_m, 0, 0, 0, 0, 0, 0.08]], np.float32)
    return ChunkRecord(observation=like.observation, actions=row, rows_run=(0, 1), commanded_by="person")


def test_person_rows_leave_the_batch():
    """Rows a person commanded (a takeover) are not the policy's actions: the batch holds only the
    policy's chunks, with the rows they ran before the takeover, and the episode's reward on the
    last policy chunk even when the person's rows come last."""
    torch.manual_seed(0)
    policy = make_test_policy("flow")
    batch = _batch(policy, CANON, n_eps=2)
    taken, reward = batch[0]
    a, b, c = taken.chunks
    b.rows_run = (0, 2)  # preempted by the person after 2 of its 4 rows
    taken.chunks = [a, b, _person_chunk(b, 0.01), _person_chunk(b, 0.01), c, _person_chunk(c, -0.01)]
    rb = build_rollout_batch(policy, batch)
    assert len(rb) == 6 and rb.person_rows_left_out == 3
    assert rb.rows_ran[:3].sum(1).tolist() == [4, 2, 4]
    assert rb.rewards[:3].tolist() == [0.0, 0.0, reward] and rb.dones[:3].tolist() == [0.0, 0.0, 1.0]
    stats = Trainer(policy, PPOConfig(update_epochs=1, minibatch_size=6)).update(batch)
    assert stats["n_chunks"] == 6 and stats["person_rows_left_out"] == 3 and np.isfinite(stats["pg_loss"])
    # an episode the person drove from start to end has nothing of the policy's: left out whole
    taken.chunks = [_person_chunk(a, 0.01)]
    assert len(build_rollout_batch(policy, batch)) == 3


@pytest.mark.parametrize("head", ["flow", "gaussian"])
def test_update_reports_the_mechanism_per_prompt_source(head):
    """Per source (canonical, the pool, each pool prompt): typed, named, and consistent with what
    the sources are (a canonical chunk's w0 is 1 and its two halves of l are one gradient)."""
    torch.manual_seed(0)
    policy = make_test_policy(head)
    rng = np.random.default_rng(0)
    prompts = [CANON, "drop the green box into the bowl", CANON, "place the green tub in the bowl"] * 2
    batch = [
        (synthetic_episode(policy, rng, 2, p, CANON, i < 4, size_px=20, episode_id=f"e{i}"), float(i < 4))
        for i, p in enumerate(prompts)
    ]
    trainer = Trainer(policy, PPOConfig(minibatch_size=4, learning_rate=1e-3, target_kl=None))
    stats = trainer.update(batch)
    diag = trainer.last_diagnostics
    assert diag is not None
    assert [s.source for s in diag.sources] == ["canonical", "pool", "pool1", "pool2"]
    assert [diag.source(f"pool{i}").prompt for i in (1, 2)] == [prompts[1], prompts[3]]
    canonical, pool = diag.source("canonical"), diag.source("pool")
    assert canonical.n_chunks == pool.n_chunks == 8
    assert canonical.log_w0_mean == pytest.approx(0.0, abs=1e-5) and canonical.w0_dropped_frac == 0.0
    assert canonical.grad_norm_canonical_half == pytest.approx(canonical.grad_norm_rollout_half)
    assert pool.grad_norm_canonical_half > 0 and pool.grad_norm_rollout_half > 0
    assert pool.w0_dropped_frac == pytest.approx(stats["w0_guarded_frac"] * 2, abs=0.05)
    for s in diag.sources:  # the update moved every prompt; each move is measured against another mean
        assert s.kl_new_old > 0 and s.mean_move_rms > 0 and np.isfinite(s.move_toward_frac), s
        assert 0.0 <= s.clipfrac <= 1.0
    assert canonical.move_toward == "pool" and pool.move_toward == "canonical"
    assert stats["mech/pool1/kl_new_old"] == diag.source("pool1").kl_new_old  # the loop's metrics


def test_pool_anchor_holds_the_pool_prompt():
    """PPOConfig.pool_anchor_coef: the same batch and step, the pool prompts move less."""
    moves = []
    for coef in (0.0, 100.0):
        torch.manual_seed(0)
        policy = make_test_policy("gaussian")
        trainer = Trainer(policy, PPOConfig(minibatch_size=4, learning_rate=1e-3, pool_anchor_coef=coef))
        stats = trainer.update(_batch(policy, "drop the green box into the bowl"))
        assert ("pool_anchor" in stats) == (coef > 0)
        assert trainer.last_diagnostics is not None
        moves.append(trainer.last_diagnostics.source("pool").kl_new_old)
    assert moves[1] < 0.5 * moves[0], moves
    policy = make_test_policy("gaussian")  # the rollout ratio clips the pool's own ratio: no anchor
    stats = Trainer(
        policy, PPOConfig(minibatch_size=4, ratio_variant="rollout", pool_anchor_coef=100.0)
    ).update(_batch(policy, "drop the green box into the bowl"))
    assert "pool_anchor" not in stats
    with pytest.raises(ValueError, match="pool_anchor_coef must be >= 0"):
        PPOConfig(pool_anchor_coef=-1.0)
