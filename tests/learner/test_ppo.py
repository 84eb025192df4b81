import math

import numpy as np
import pytest
import torch

from learner.ppo import (
    PPOConfig,
    clipped_policy_loss,
    compute_gae,
    explained_variance,
    group_advantages,
    guard_w0,
    mixed_log_prob,
    ratio_units,
    value_loss,
)


def _reference_gae(rewards, values, dones, gamma, lam):
    """Plain per-episode loop: A_t = sum_l (gamma lam)^l delta_{t+l} inside the episode."""
    n = len(rewards)
    adv = np.zeros(n)
    starts = [0] + [i + 1 for i in range(n - 1) if dones[i]]
    ends = [i for i in range(n) if dones[i]]
    if not ends or ends[-1] != n - 1:
        ends.append(n - 1)
    for s, e in zip(starts, ends, strict=True):
        for t in range(s, e + 1):
            total = 0.0
            for k in range(t, e + 1):
                next_v = values[k + 1] if k < e else 0.0
                delta = rewards[k] + gamma * next_v - values[k]
                total += (gamma * lam) ** (k - t) * delta
            adv[t] = total
    return adv, adv + np.asarray(values)


@pytest.mark.parametrize("seed", range(5))
def test_gae_matches_plain_reference_loop(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, size=4)
    rewards, dones = [], []
    for n in lengths:
        r = np.zeros(n)
        r[-1] = float(rng.integers(0, 2))
        rewards += list(r)
        dones += [0.0] * (n - 1) + [1.0]
    values = rng.normal(size=len(rewards))
    adv, ret = compute_gae(np.array(rewards), values, np.array(dones), 0.99, 0.95)
    ref_adv, ref_ret = _reference_gae(rewards, values, dones, 0.99, 0.95)
    assert np.allclose(adv, ref_adv)
    assert np.allclose(ret, ref_ret)


def test_gae_hand_computed_two_chunk_episode():
    # V = [0.5, 0.6], reward 1 at the end. delta1 = 1 - 0.6 = 0.4; delta0 = 0.99*0.6 - 0.5 = 0.094
    adv, ret = compute_gae(np.array([0.0, 1.0]), np.array([0.5, 0.6]), np.array([0.0, 1.0]), 0.99, 0.95)
    assert np.allclose(adv, [0.094 + 0.99 * 0.95 * 0.4, 0.4])
    assert np.allclose(ret, adv + np.array([0.5, 0.6]))


# logp under rollout prompt -1.0, under canonical -3.0, recorded (old, rollout prompt) -1.5
@pytest.mark.parametrize(
    ("variant", "expected_log_ratio"),
    [("mixed", -0.5), ("canonical", -1.5), ("rollout", 0.5), ("plain", -1.5)],
)
def test_ratio_variants_hand_computed(variant, expected_log_ratio):
    logp_r = torch.tensor([-1.0], requires_grad=True)
    logp_c = torch.tensor([-3.0], requires_grad=True)
    log_ratio = mixed_log_prob(variant, logp_r, logp_c) - torch.tensor([-1.5])
    assert float(log_ratio.detach()) == pytest.approx(expected_log_ratio)
    log_ratio.sum().backward()
    grads = {
        "mixed": (0.5, 0.5),
        "canonical": (0.0, 1.0),
        "rollout": (1.0, 0.0),
        "plain": (0.0, 1.0),
    }[variant]
    assert float(logp_r.grad if logp_r.grad is not None else 0.0) == pytest.approx(grads[0])
    assert float(logp_c.grad if logp_c.grad is not None else 0.0) == pytest.approx(grads[1])


def test_mixed_ratio_is_geometric_mean_of_the_two_ratios():
    logp_r, logp_c, old = torch.tensor([-2.0]), torch.tensor([-0.7]), torch.tensor([-1.1])
    w = (mixed_log_prob("mixed", logp_r, logp_c) - old).exp()
    r_p = math.exp(-2.0 + 1.1)
    r_g = math.exp(-0.7 + 1.1)
    assert float(w) == pytest.approx(math.sqrt(r_p * r_g))


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="ratio variant"):
        mixed_log_prob("both", torch.zeros(1), torch.zeros(1))  # type: ignore[arg-type]


def test_clipped_loss_hand_computed():
    log_ratio = torch.tensor([0.5, 0.5, 2.0, 0.0])
    adv = torch.tensor([1.0, -1.0, -1.0, 2.0])
    pl = clipped_policy_loss(log_ratio, adv, clip_coef=0.2, dual_clip=3.0)
    r = math.exp(0.5)
    # A>0, r>1.2: clipped 1.2 ; A<0: unclipped r ; A<0, r=e^2=7.39: dual clip caps at 3 ; r=1: 2
    expected = [-1.2, r, 3.0, -2.0]
    assert float(pl.pg_loss) == pytest.approx(np.mean(expected))
    assert pl.clipfrac == pytest.approx(0.75)
    approx = [(r - 1) - 0.5, (r - 1) - 0.5, (math.exp(2) - 1) - 2, 0.0]
    assert pl.approx_kl == pytest.approx(np.mean(approx), rel=1e-5)
    no_dual = clipped_policy_loss(log_ratio, adv, clip_coef=0.2, dual_clip=0.0)
    assert float(no_dual.pg_loss) == pytest.approx(np.mean([-1.2, r, math.exp(2), -2.0]))


def test_clipped_loss_respects_keep_mask():
    pl = clipped_policy_loss(torch.zeros(2), torch.tensor([1.0, 5.0]), 0.2, keep=torch.tensor([True, False]))
    assert float(pl.pg_loss) == pytest.approx(-1.0)


def test_w0_guard_rebase_starts_every_ratio_at_one_and_weights_no_unit():
    # Two units at the update's start (new == behaviour log-prob of the mixed likelihood at theta_old
    # is log_w0 away from the recorded one). Unguarded, a unit's first gradient is -A * w0; rebased,
    # it is -A for every unit, however (un)likely the chunk is under the canonical prompt.
    log_w0 = torch.tensor([[0.1, -0.1]])
    adv = torch.tensor([1.0])
    grads = {}
    for guard in ("none", "rebase"):
        new = torch.zeros(1, 2, requires_grad=True)
        log_ratio, keep = guard_w0(new + log_w0, log_w0, guard, math.log(2.0))
        clipped_policy_loss(log_ratio, adv, clip_coef=0.2, keep=keep).pg_loss.backward()
        assert new.grad is not None
        grads[guard] = new.grad.numpy()[0]
    # the loss averages the 2 units
    assert np.allclose(grads["none"], -0.5 * np.exp([0.1, -0.1]), atol=1e-6)
    assert np.allclose(grads["rebase"], [-0.5, -0.5], atol=1e-6)


def test_clamp_guard_is_refused_with_what_to_use():
    with pytest.raises(ValueError, match=r"clamp.*removed"):
        PPOConfig(w0_guard="clamp")  # type: ignore[arg-type]


def test_ratio_units_split_a_chunk_log_prob():
    elems = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    assert torch.equal(ratio_units(elems, "chunk"), elems.flatten(1).sum(1, keepdim=True))
    assert torch.equal(ratio_units(elems, "row"), elems.sum(2))
    assert ratio_units(elems, "dim").shape == (2, 12)
    for unit in ("chunk", "row", "dim"):
        assert torch.allclose(ratio_units(elems, unit).sum(1), elems.flatten(1).sum(1))
    with pytest.raises(ValueError, match="per-element"):
        ratio_units(elems.flatten(1), "row")


@pytest.mark.parametrize("seed", range(3))
def test_per_unit_loss_matches_a_plain_reference_loop(seed):
    rng = np.random.default_rng(seed)
    b, u, clip, dual = 5, 4, 0.2, 3.0
    log_ratio = rng.normal(0, 0.4, (b, u))
    adv = rng.normal(0, 1, b)
    keep = rng.random((b, u)) > 0.3
    keep[0] = False  # a sample with nothing kept does not count
    weights = rng.random(b)
    num = den = 0.0
    for i in range(b):
        terms = []
        for j in range(u):
            if not keep[i, j]:
                continue
            r = math.exp(log_ratio[i, j])
            term = max(-adv[i] * r, -adv[i] * min(max(r, 1 - clip), 1 + clip))
            if adv[i] < 0:
                term = min(term, -dual * adv[i])
            terms.append(term)
        if terms:
            num += weights[i] * np.mean(terms)
            den += weights[i]
    pl = clipped_policy_loss(
        torch.tensor(log_ratio), torch.tensor(adv), clip, dual, torch.tensor(keep), torch.tensor(weights)
    )
    assert float(pl.pg_loss) == pytest.approx(num / den, rel=1e-6)


def test_group_advantages_hand_computed():
    adv, informative = group_advantages([1, 0, 0, 0, 1, 1, 0], ["a", "a", "a", "a", "b", "b", "c"])
    assert np.allclose(adv, [0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0])
    assert informative.tolist() == [True] * 4 + [False] * 3  # all-1 group and a group of one
    scaled, _ = group_advantages([1, 0], ["g", "g"], scale=True)
    assert np.allclose(scaled, [1.0, -1.0], atol=1e-5)
    with pytest.raises(ValueError, match="group keys"):
        group_advantages([1, 0], ["g"])


def test_w0_guard_drop_and_none():
    log_w0 = torch.tensor([3.0, 0.1, -4.0])
    _, keep = guard_w0(log_w0.clone(), log_w0, "drop", math.log(2.0))
    assert keep.tolist() == [False, True, False]
    same, keep = guard_w0(log_w0.clone(), log_w0, "none", math.log(2.0))
    assert torch.equal(same, log_w0) and keep.all()


def test_value_loss_hand_computed():
    new, old, ret = torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([2.0])
    assert float(value_loss(new, old, ret, 0.2, clip=False)) == pytest.approx(0.5 * 1.0)
    # clipped value 0.2 -> (0.2 - 2)^2 = 3.24 > 1: the max takes the clipped loss
    assert float(value_loss(new, old, ret, 0.2, clip=True)) == pytest.approx(0.5 * 3.24)


def test_explained_variance():
    y = np.array([1.0, 2.0, 3.0])
    assert explained_variance(y, y) == pytest.approx(1.0)
    assert explained_variance(np.full(3, 2.0), y) == pytest.approx(0.0)
    assert math.isnan(explained_variance(y, np.ones(3)))


def test_the_pipeline_docstrings_name_functions_that_exist() -> None:
    # The module docstrings of ppo.py and trainer.py draw the update as "--function-->" steps; a
    # renamed function must not leave a stale name there (ppo.py once named initial_log_w0).
    import re

    import learner.ppo
    import learner.trainer

    for module in (learner.ppo, learner.trainer):
        doc = module.__doc__ or ""
        named = set(re.findall(r"--([a-z]\w*)(?: \(or ([a-z]\w*)\))?-->", doc))
        named |= set(re.findall(r"\(([a-z]+_\w+)(?: -> ([a-z]+_\w+))?\)", doc))
        names = {n for pair in named for n in pair if n}
        assert names, f"{module.__name__}: no function names found in its docstring"
        missing = sorted(n for n in names if not callable(getattr(module, n, None)))
        assert not missing, f"{module.__name__}'s docstring names {missing}, which it does not define"
