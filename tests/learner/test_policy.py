import numpy as np
import pytest
import torch

from learner.policies.vla import make_test_policy
from learner.synthetic import synthetic_observation

HEADS = ["flow", "gaussian"]


def _batch(policy, n=3, seed=0):
    rng = np.random.default_rng(seed)
    return policy.preprocess([synthetic_observation(rng, 20, seq=i) for i in range(n)])


@pytest.mark.parametrize("head", HEADS)
def test_sample_shapes_and_recorded_log_prob_matches_reevaluation(head):
    torch.manual_seed(0)
    policy = make_test_policy(head)
    obs = _batch(policy)
    prompts = ["put the bowl on the top rack", "grab the bowl", "put the bowl on the top rack"]
    s = policy.sample(obs, prompts)
    k = policy.config.flow_steps if head == "flow" else 1
    assert s.actions.shape == (3, 4, 7) and s.chain.shape == (3, k + 1, 4, 7)
    assert s.log_prob.shape == (3,) and s.value.shape == (3,)
    ev = policy.evaluate_pair(obs, prompts, prompts, torch.from_numpy(s.chain)).rollout
    assert np.allclose(ev.log_prob.detach().numpy(), s.log_prob, atol=1e-3)
    assert np.allclose(ev.value.detach().numpy(), s.value, atol=1e-5)


@pytest.mark.parametrize("head", HEADS)
def test_evaluate_pair_equals_two_separate_evaluations_and_skips_equal_prompts(head):
    torch.manual_seed(0)
    policy = make_test_policy(head)
    obs = _batch(policy, n=4)
    canonical = ["put the tape on the top rack"] * 4
    rollout = ["put the tape on the top rack", "lift the tape onto the upper shelf"] * 2
    chain = torch.from_numpy(policy.sample(obs, rollout).chain)
    pair = policy.evaluate_pair(obs, rollout, canonical, chain)
    assert pair.n_second_pass == 2
    ev_r = policy.evaluate_pair(obs, rollout, rollout, chain).rollout
    ev_c = policy.evaluate_pair(obs, canonical, canonical, chain).rollout
    assert torch.allclose(pair.rollout.log_prob, ev_r.log_prob, atol=1e-4)
    assert torch.allclose(pair.canonical_log_prob, ev_c.log_prob, atol=1e-4)
    assert torch.allclose(pair.rollout.value, ev_r.value, atol=1e-6)
    assert pair.prompt_kl[0] == 0 and pair.prompt_kl[2] == 0
    assert (pair.prompt_kl[[1, 3]] > 0).all()


def test_evaluate_pair_encodes_observations_once():
    policy = make_test_policy("flow")
    obs = _batch(policy, n=2)
    calls = []
    handle = policy.image_encoder.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    chain = torch.from_numpy(policy.sample(obs, ["a", "b"]).chain)
    calls.clear()
    policy.evaluate_pair(obs, ["a", "b"], ["c", "c"], chain)
    handle.remove()
    assert calls == [2]


def test_gradients_flow_through_both_prompt_passes():
    policy = make_test_policy("flow")
    obs = _batch(policy, n=2)
    chain = torch.from_numpy(policy.sample(obs, ["a b", "a b"]).chain)
    pair = policy.evaluate_pair(obs, ["a b", "a b"], ["c d", "c d"], chain)
    pair.canonical_log_prob.sum().backward()
    grad = next(policy.prompt_proj.parameters()).grad
    assert grad is not None and float(grad.abs().sum()) > 0


def test_missing_camera_is_a_clear_error():
    policy = make_test_policy("flow", cameras=("external", "left"))
    with pytest.raises(ValueError, match="needs"):
        _batch(policy, n=1)


def test_prompt_cache_encodes_each_prompt_once():
    policy = make_test_policy("flow")
    policy.prompt_embeddings(["x y", "x y", "z"])
    assert len(policy.prompt_cache) == 2


def test_minilm_encoder_loads_offline_and_separates_tasks():
    from learner.policies.text import MiniLMTextEncoder

    emb = MiniLMTextEncoder().encode(
        ["put the bowl on the top rack", "place the bowl onto the upper rack", "open the bottom drawer"]
    )
    assert emb.shape == (3, 384)
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.3


def test_policy_deepcopy_shares_the_encoder_and_keeps_embeddings():
    import copy

    policy = make_test_policy("flow")
    policy.prompt_embeddings(["a b"])
    snap = copy.deepcopy(policy)
    assert snap.prompt_cache.state().keys() == {"a b"}
    assert snap.prompt_cache._encoder is policy.prompt_cache._encoder
    snap.prompt_embeddings(["c"])
    assert len(policy.prompt_cache) == 1 and len(snap.prompt_cache) == 2


def test_gaussian_noise_is_bounded():
    policy = make_test_policy("gaussian")
    lo, hi = policy.config.gaussian_log_std_range
    with torch.no_grad():
        policy.log_std.fill_(hi + 2.0)
    assert torch.allclose(policy._gaussian_std(), torch.tensor(hi).exp())
    with torch.no_grad():
        policy.log_std.fill_(lo - 2.0)
    assert torch.allclose(policy._gaussian_std(), torch.tensor(lo).exp())
