"""The π0.5 adapter without π0.5: its flow-SDE machinery around a tiny stand-in velocity network,
and its refusals. Running the real model needs LeRobot (Python >= 3.12) and local weights."""

import importlib.util
import math

import numpy as np
import pytest
import torch
from torch import nn

from learner.policies.pi05 import (
    Pi05Backbone,
    Pi05Policy,
    WeightsNotLoadedError,
    check_weights_loaded,
    load_pi05,
)
from learner.synthetic import synthetic_observation


class StandInBackbone(Pi05Backbone):
    """A tiny linear velocity field conditioned on a bag-of-characters prompt code (tests only)."""

    chunk_len = 3
    model_action_dim = 4  # padded width, wider than the 2 executed action dims below
    value_feature_dim = 8
    image_size_px = 16

    def __init__(self) -> None:
        super().__init__()
        self.obs = nn.Linear(2 * 3 * 16 * 16 + 15, 8)
        self.prompt = nn.Linear(26, 8)
        self.mix = nn.Linear(self.model_action_dim, self.model_action_dim, bias=False)
        self.cond_to_v = nn.Linear(8, self.chunk_len * self.model_action_dim)

    def embed_observations(self, images, state):
        return torch.tanh(self.obs(torch.cat([images.flatten(1).float() / 255.0, state], dim=1)))

    def embed_prefix(self, obs_emb, prompts):
        codes = torch.zeros(len(prompts), 26)
        for i, p in enumerate(prompts):
            for ch in p:
                if ch.isalpha():
                    codes[i, ord(ch.lower()) - 97] += 1.0
        return obs_emb + torch.tanh(self.prompt(codes))

    def velocity(self, prefix, x, t):
        bias = self.cond_to_v(prefix).view(prefix.shape[0], 1, self.chunk_len, self.model_action_dim)
        return self.mix(x) + bias * t.view(1, -1, 1, 1)

    def value_features(self, prefix):
        return prefix


def _policy():
    torch.manual_seed(0)
    return Pi05Policy(StandInBackbone(), action_dim=2, flow_steps=4, noise_level=0.5)


def _obs(policy, n=2):
    rng = np.random.default_rng(0)
    return policy.preprocess([synthetic_observation(rng, 20, seq=i) for i in range(n)])


def test_chain_log_prob_is_the_gaussian_density_of_the_stored_chain():
    policy = _policy()
    obs = _obs(policy)
    prompts = ["put the bowl on the top rack", "lift the bowl"]
    s = policy.sample(obs, prompts)
    assert s.chain.shape == (2, 5, 3, 4) and s.actions.shape == (2, 3, 2)
    # independent reference: per step, mean from the stand-in velocity, std sigma_i sqrt(dt)
    with torch.no_grad():
        prefix = policy.backbone.embed_prefix(
            policy.backbone.embed_observations(obs.images, obs.state), prompts
        )
        chain = torch.from_numpy(s.chain).double()
        ref = torch.zeros(2, dtype=torch.float64)
        dt = 0.25
        for i in range(4):
            t = 1.0 - i * dt
            ts = min(t, 1 - dt)
            sigma = 0.5 * math.sqrt(ts / (1 - ts))
            x = chain[:, i]
            v = (
                policy.backbone.velocity(prefix, x.float().unsqueeze(1), torch.tensor([t]))
                .squeeze(1)
                .double()
            )
            mean = x - dt * (v + sigma**2 / (2 * t) * (x + (1 - t) * v))
            dist = torch.distributions.Normal(mean, sigma * math.sqrt(dt))
            # only the executed columns count (the model pads actions to its width)
            ref += dist.log_prob(chain[:, i + 1])[..., : policy.action_dim].flatten(1).sum(1)
    assert np.allclose(s.log_prob, ref.numpy(), atol=1e-3)
    ev = policy.evaluate(obs, prompts, torch.from_numpy(s.chain))
    assert np.allclose(ev.log_prob.detach().numpy(), ref.numpy(), atol=1e-3)


def test_pair_evaluation_and_gradients_through_the_adapter():
    policy = _policy()
    obs = _obs(policy)
    chain = torch.from_numpy(policy.sample(obs, ["a", "b"]).chain)
    pair = policy.evaluate_pair(obs, ["a", "b"], ["a", "c"], chain)
    kl = pair.prompt_kl.detach()
    assert pair.n_second_pass == 1 and float(kl[0]) == 0.0 and float(kl[1]) > 0
    (0.5 * pair.canonical_log_prob + 0.5 * pair.rollout.log_prob).sum().backward()
    assert policy.backbone.prompt.weight.grad is not None


def test_executed_chunk_is_the_denormalised_first_columns():
    policy = _policy()
    policy.action_mean.copy_(torch.tensor([1.0, -1.0]))
    policy.action_std.copy_(torch.tensor([2.0, 0.5]))
    s = policy.sample(_obs(policy, 1), ["x"])
    assert np.allclose(s.actions[0], s.chain[0, -1, :, :2] * [2.0, 0.5] + [1.0, -1.0], atol=1e-5)


def test_missing_weights_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_pi05(tmp_path / "nope")
    (tmp_path / "w").mkdir()
    with pytest.raises(WeightsNotLoadedError, match=r"model\.safetensors"):
        load_pi05(tmp_path / "w")


def test_weights_check_refuses_random_initialisation():
    model_keys = [f"model.layer{i}.weight" for i in range(200)]
    check_weights_loaded(model_keys, [k.removeprefix("model.") for k in model_keys])
    with pytest.raises(WeightsNotLoadedError, match="randomly initialised"):
        check_weights_loaded(model_keys, [f"layer{i}.weight" for i in range(100)])
    with pytest.raises(WeightsNotLoadedError):
        check_weights_loaded(model_keys, [])


@pytest.mark.gpu
@pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is None,
    reason="needs LeRobot's PI05Policy (Python >= 3.12, GPU image) and π0.5 weights in PDE_PI05_WEIGHTS",
)
def test_real_pi05_samples_with_log_prob():  # pragma: no cover
    import os

    policy = load_pi05(os.environ["PDE_PI05_WEIGHTS"])
    s = policy.sample(_obs(policy, 1), ["put the bowl on the top rack"])
    assert np.isfinite(s.log_prob).all()
