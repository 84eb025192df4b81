import math

import numpy as np
import pytest
import torch

from learner.ppo import (
    clipped_policy_loss,
    compute_gae,
    explained_variance,
    guard_w0,
    mixed_log_prob,
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


def test_w0_guard_clamp_shifts_but_keeps_gradient():
    new = torch.tensor([3.0, 0.1, -4.0], requires_grad=True)
    log_w0 = torch.tensor([3.0, 0.1, -4.0])
    m = math.log(2.0)
    guarded, keep = guard_w0(new * 1.0, log_w0, "clamp", m)
    assert np.allclose(guarded.detach().numpy(), [m, 0.1, -m], atol=1e-6)
    assert keep.all()
    guarded.sum().backward()
    assert new.grad is not None and np.allclose(new.grad.numpy(), 1.0)


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
