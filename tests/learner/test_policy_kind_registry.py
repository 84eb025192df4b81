"""A new policy kind is its own file plus one registry line (issue 37): ``ToyPolicy`` below is a kind
nothing else in the repository knows, registered by this test alone, and it goes through the CLI's
checks, SFT, sampling, PPO's evaluation and a checkpoint round trip without an edit elsewhere."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from learner.checkpoints import CheckpointStore
from learner.policies import flow_sde
from learner.policies.base import DemoRows, FlowChunkPolicy, ObsBatch
from learner.policies.observations import STATE_DIM, preprocess
from learner.policies.registry import POLICY_KINDS, PolicyKindSpec, policy_kind
from learner.policy_args import add_policy_args, check_policy_args
from learner.sft import SFTConfig, SFTDataset, train_sft
from learner.synthetic import synthetic_observation
from pde_contract.messages import ACTION_DIMS, ActionSpace, Observation

PROMPTS = ["put the bowl on the top rack", "grab the bowl"]


class ToyPolicy(FlowChunkPolicy):
    """A linear flow policy over the robot state and a hashed prompt (no cameras): a new kind's file.
    It writes the network hooks and ``demo_loss``; sampling, evaluation, SFT's draws and statistics
    are inherited."""

    action_space = ActionSpace.EE_DELTA
    cameras: tuple[str, ...] = ()

    def __init__(self, chunk_len: int = 3, width: int = 8) -> None:
        super().__init__()
        self.chunk_len, self.action_dim, self.width = chunk_len, ACTION_DIMS[ActionSpace.EE_DELTA], width
        self.schedule = flow_sde.make_schedule(2, 0.5)
        flat = chunk_len * self.action_dim
        self.trunk = nn.Linear(STATE_DIM, width)
        self.prompt_table = nn.Embedding(64, width)
        self.velocity = nn.Linear(flat + 1 + width, flat)
        self.value_head = nn.Linear(width, 1)

    def preprocess(self, observations: Sequence[Observation]) -> ObsBatch:
        return preprocess(observations, self.cameras, 1)

    def encode_observations(self, obs: ObsBatch) -> torch.Tensor:
        return torch.tanh(self.trunk(obs.state.to(self.device)))

    def condition(self, obs_features: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        ids = torch.tensor([sum(p.encode()) % 64 for p in prompts], device=obs_features.device)
        return obs_features + self.prompt_table(ids)

    def value(self, cond: torch.Tensor) -> torch.Tensor:
        return self.value_head(cond.detach()).squeeze(-1)

    def _velocity(self, cond: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """v(x [B, K, T, D], t [B, K]) under ``cond`` [B, C]."""
        b, k = x.shape[:2]
        feats = [x.flatten(2), t.unsqueeze(-1), cond.unsqueeze(1).expand(b, k, -1)]
        return self.velocity(torch.cat(feats, dim=-1)).reshape(x.shape)

    def velocity_fn(self, cond: torch.Tensor) -> flow_sde.VelocityFn:
        return lambda x, t: self._velocity(cond, x, t.unsqueeze(0).expand(x.shape[0], -1))

    def denormalize_actions(self, actions_norm: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return actions_norm * 0.01

    def demo_loss(self, rows: DemoRows) -> torch.Tensor:
        cond = self.condition(self.encode_observations(rows.obs), rows.prompts)
        target = rows.actions.to(self.device) / 0.01
        noise, t = rows.noise.to(target.device), rows.t.to(target.device)
        x_t = (1 - t.view(-1, 1, 1)) * target + t.view(-1, 1, 1) * noise
        pred = self._velocity(cond, x_t.unsqueeze(1), t.unsqueeze(1)).squeeze(1)
        return ((pred - (noise - target)) ** 2).mean()

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "kind": "toy_linear",
            "config": {"chunk_len": self.chunk_len, "width": self.width},
            "state_dict": {k: v.detach().cpu().clone() for k, v in self.state_dict().items()},
        }

    @classmethod
    def from_checkpoint_state(cls, state: dict[str, Any]) -> ToyPolicy:
        policy = cls(**state["config"])
        policy.load_state_dict(state["state_dict"])
        return policy


@pytest.fixture
def toy_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # The one registry line, here set by the test (and undone after it).
    monkeypatch.setitem(POLICY_KINDS, "toy", PolicyKindSpec("toy_linear", f"{__name__}:ToyPolicy"))
    yield "toy"


def _obs(policy: ToyPolicy, n: int) -> ObsBatch:
    rng = np.random.default_rng(0)
    return policy.preprocess([synthetic_observation(rng, 8, seq=i) for i in range(n)])


def test_the_cli_takes_a_registered_kind_by_name(toy_kind):
    ap = argparse.ArgumentParser()
    add_policy_args(ap)
    args = ap.parse_args(["--policy", toy_kind])
    assert check_policy_args(args) is None
    assert "starts from `pde learner sft`" in (
        check_policy_args(ap.parse_args(["--policy", toy_kind, "--init", "d"])) or ""
    )
    assert isinstance(policy_kind(toy_kind).load_class()(), ToyPolicy)


def test_an_unknown_kind_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown policy 'nope': use one of small, pi05"):
        policy_kind("nope")


def test_a_new_kind_trains_samples_evaluates_and_round_trips_a_checkpoint(toy_kind, tmp_path):
    torch.manual_seed(0)
    policy = ToyPolicy()
    obs = _obs(policy, 4)
    data = SFTDataset(obs, np.full((4, 3, 7), 0.005), [PROMPTS[0]] * 4, ["put_bowl_on_top_rack"] * 4)
    before = [p.detach().clone() for p in policy.parameters()]
    trained, metrics = train_sft(policy, data, SFTConfig(steps=1, batch_size=4, image_shift_px=0))
    assert np.isfinite(metrics["sft_loss_first"])
    assert any(not torch.equal(a, b) for a, b in zip(before, trained.parameters(), strict=True))

    pair_obs = _obs(policy, 2)
    s = trained.sample(pair_obs, PROMPTS)
    assert s.actions.shape == (2, 3, 7) and s.chain.shape == (2, 3, 3, 7)
    chain = torch.from_numpy(s.chain)
    with torch.no_grad():
        pair = trained.evaluate_pair(pair_obs, PROMPTS, [PROMPTS[0]] * 2, chain)
    np.testing.assert_allclose(pair.rollout.log_prob.numpy(), s.log_prob, rtol=1e-4, atol=1e-4)
    assert pair.n_second_pass == 1 and float(pair.prompt_kl[0]) == 0.0

    store = CheckpointStore(tmp_path)
    loaded = store.load(store.save(trained, 1, {}))
    assert isinstance(loaded.policy, ToyPolicy)
    with torch.no_grad():
        again = loaded.policy.evaluate_pair(pair_obs, PROMPTS, [PROMPTS[0]] * 2, chain)
    assert torch.equal(again.rollout.log_prob, pair.rollout.log_prob)
    assert torch.equal(again.canonical_log_prob, pair.canonical_log_prob)
