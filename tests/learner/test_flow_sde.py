import math

import numpy as np
import torch

from learner.policies import flow_sde


def _linear_velocity(weight: torch.Tensor):
    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return x @ weight + t.view(1, -1, 1, 1)

    return velocity


def test_schedule_sigmas_follow_formula_with_first_step_clamped():
    s = flow_sde.make_schedule(4, 0.5)
    assert np.allclose(s.times.numpy(), [1.0, 0.75, 0.5, 0.25, 0.0])
    t_sigma = np.array([0.75, 0.75, 0.5, 0.25])
    assert np.allclose(s.sigmas.numpy(), 0.5 * np.sqrt(t_sigma / (1 - t_sigma)), atol=1e-6)
    assert np.allclose(s.step_stds.numpy(), s.sigmas.numpy() * math.sqrt(0.25))


def test_chain_log_prob_equals_gaussian_density_of_stored_chain():
    torch.manual_seed(0)
    schedule = flow_sde.make_schedule(5, 0.5)
    weight = 0.3 * torch.randn(3, 3)
    velocity = _linear_velocity(weight)
    chain, sampled_logp = flow_sde.sample_chain(velocity, torch.randn(2, 4, 3), schedule)
    assert chain.shape == (2, 6, 4, 3)

    # Independent reference: numpy, one step at a time, scalar Gaussian densities summed.
    c = chain.double().numpy()
    w = weight.double().numpy()
    ref = np.zeros((2, 4, 3))  # per element: its K transition densities summed
    dt = 0.2
    for i in range(5):
        t = 1.0 - i * dt
        sigma = 0.5 * math.sqrt(min(t, 1 - dt) / (1 - min(t, 1 - dt)))
        x = c[:, i]
        v = x @ w + t
        mean = x - dt * (v + sigma**2 / (2 * t) * (x + (1 - t) * v))
        std = sigma * math.sqrt(dt)
        z = (c[:, i + 1] - mean) / std
        ref += -0.5 * z**2 - math.log(std) - 0.5 * math.log(2 * math.pi)

    assert np.allclose(sampled_logp.double().numpy(), ref, atol=1e-3)
    means = flow_sde.chain_means(velocity, chain, schedule)
    elems = flow_sde.chain_log_prob_from_means(chain, means, schedule)
    assert np.allclose(elems.double().numpy(), ref, atol=1e-3)
    total = ref.reshape(2, -1).sum(1)
    assert np.allclose(flow_sde.chain_log_prob(velocity, chain, schedule).double().numpy(), total, atol=1e-3)


def test_sde_with_exact_velocity_reaches_the_data_point():
    # Data is a point mass at c: x_t = (1 - t) c + t eps, so v(x, t) = (x - c) / t exactly.
    torch.manual_seed(1)
    target = torch.tensor([0.5, -1.0])

    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return (x - target) / t.view(1, -1, 1, 1)

    schedule = flow_sde.make_schedule(8, 0.5)
    chain, _ = flow_sde.sample_chain(velocity, torch.randn(4000, 1, 2), schedule)
    final = chain[:, -1, 0]
    assert torch.allclose(final.mean(0), target, atol=0.05)
    # the last transition's noise is all that is left
    assert float(final.std(0).max()) < 2 * float(schedule.step_stds[-1])


def test_kl_is_zero_for_equal_means_and_positive_otherwise():
    schedule = flow_sde.make_schedule(4, 0.5)
    m = torch.randn(3, 4, 2, 2)
    assert torch.allclose(flow_sde.chain_kl(m, m, schedule), torch.zeros(3))
    shifted = m + 0.1
    expected = (0.1**2 / (2 * schedule.step_stds**2)).sum() * 4
    assert torch.allclose(flow_sde.chain_kl(m, shifted, schedule), expected.expand(3), rtol=1e-4)


def test_deterministic_chain_is_euler_and_has_no_density():
    schedule = flow_sde.make_schedule(4, 0.5)
    chain, logp = flow_sde.sample_chain(
        _linear_velocity(torch.zeros(2, 2)), torch.zeros(1, 1, 2), schedule, True
    )
    # v = t: x_{i+1} = x_i - dt * t_i
    assert np.allclose(chain[0, -1, 0].numpy(), -(0.25 * (1 + 0.75 + 0.5 + 0.25)))
    assert torch.isnan(logp).all()
