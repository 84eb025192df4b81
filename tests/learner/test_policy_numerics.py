"""The Policy boundary computes what it computed before it was slimmed (issue 27): sampled actions,
chains, log-probs and values, evaluations, the prompt pair and the SFT loss of the small policy (both
heads) and tiny π0.5 for fixed seeds, against ``policy_numerics.json``. That file was written by
``record`` on main at a468443, before the network hooks moved behind ``PolicyNetwork``; rewrite it
(``python -m tests.learner.test_policy_numerics``) only for a change meant to move these numbers."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from learner.policies.base import DemoRows, Policy
from learner.policies.pi05 import Pi05Options, load_pi05
from learner.policies.vla import make_test_policy
from learner.synthetic import synthetic_observation
from tests.learner.pi05_tiny import make_tiny_checkpoint

EXPECTED = Path(__file__).with_name("policy_numerics.json")
KINDS = ("small_flow", "small_gaussian", "pi05")
ROLLOUT = ["put the bowl on the top rack", "grab the bowl"]
CANONICAL = ["put the bowl on the top rack", "put the bowl on the top rack"]


def _policy(kind: str, workdir: Path) -> tuple[Policy, int]:
    """(policy, camera size in pixels); weights from fixed seeds."""
    if kind == "pi05":
        return load_pi05(make_tiny_checkpoint(workdir / "pi05"), Pi05Options(flow_steps=2)), 24
    torch.manual_seed(0)
    return make_test_policy("flow" if kind == "small_flow" else "gaussian"), 20


def record(kind: str, workdir: Path) -> dict[str, Any]:
    """Everything the boundary computes for two observations, as lists of floats."""
    policy, size_px = _policy(kind, workdir)
    rng = np.random.default_rng(0)
    obs = policy.preprocess([synthetic_observation(rng, size_px, seq=i) for i in range(2)])
    out: dict[str, Any] = {}
    torch.manual_seed(1)
    s = policy.sample(obs, ROLLOUT)
    out |= {"actions": s.actions, "log_prob_elements": s.log_prob_elements, "value": s.value}
    out["chain"] = s.chain
    torch.manual_seed(2)
    out["deterministic_actions"] = policy.sample(obs, ROLLOUT, deterministic=True).actions
    chain = torch.from_numpy(s.chain)
    with torch.no_grad():
        ev = policy.evaluate_pair(obs, CANONICAL, CANONICAL, chain).rollout
        pair = policy.evaluate_pair(obs, ROLLOUT, CANONICAL, chain)
        torch.manual_seed(3)
        noise, t = policy.supervised_noise(2)
        loss = policy.supervised_loss(DemoRows(obs, ROLLOUT, torch.from_numpy(s.actions).float(), noise, t))
    out |= {"eval_log_prob_elements": ev.log_prob_elements, "eval_entropy": ev.entropy}
    out["eval_value"] = ev.value
    out |= {
        "pair_log_prob_elements": pair.rollout.log_prob_elements,
        "pair_canonical_log_prob_elements": pair.canonical_log_prob_elements,
        "pair_prompt_kl": pair.prompt_kl,
        "pair_n_second_pass": pair.n_second_pass,
        "supervised_loss": loss,
    }
    return {k: np.asarray(v, dtype=np.float64).tolist() for k, v in out.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_the_policy_computes_what_it_computed_before_the_boundary_moved(kind, tmp_path):
    got = record(kind, tmp_path)
    want = json.loads(EXPECTED.read_text())[kind]
    assert sorted(got) == sorted(want)
    for name in want:
        # Not bitwise: another CPU's kernels may round the last bits differently (on the machine that
        # wrote the file the values are equal bit for bit).
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=f"{kind}: {name}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        EXPECTED.write_text(json.dumps({k: record(k, Path(tmp)) for k in KINDS}) + "\n")
    print(f"wrote {EXPECTED}", file=sys.stderr)
