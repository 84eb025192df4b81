"""π0.5 behind the Policy ABC at a tiny size with random weights: load a checkpoint directory ->
sample a chunk with its chain and log-prob -> mixed-prompt PPO update -> checkpoint -> reload ->
same samples; the normalisation mapping; clear refusals for what is missing or mismatched."""

import json
import os

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from learner.checkpoints import CheckpointStore
from learner.policies.base import DemoRows
from learner.policies.pi05 import (
    Pi05CheckpointError,
    Pi05Options,
    Pi05Policy,
    WeightsNotLoadedError,
    load_pi05,
    resize_with_pad,
    state_prompt,
)
from learner.policies.pi05_checkpoint import EMBED_KEY, STATS_FILE, TIED_LM_HEAD_KEY, Pi05Mapping
from learner.ppo import PPOConfig
from learner.synthetic import synthetic_episode, synthetic_observation
from learner.trainer import Trainer
from pde_contract.messages import STATE_VECTOR_NAMES
from tests.learner.pi05_tiny import TINY, action_stats, make_tiny_checkpoint, state_stats

CANON = "put the green container in the bowl"
OTHER = "put the green container in front of the camera carefully"


@pytest.fixture
def ckpt_dir(tmp_path):
    return make_tiny_checkpoint(tmp_path / "pi05")


def _obs(n=2, seed=0):
    rng = np.random.default_rng(seed)
    return [synthetic_observation(rng, size_px=24, seq=i) for i in range(n)]


def test_sample_gives_a_chunk_its_chain_and_log_prob_over_executed_columns(ckpt_dir):
    policy = load_pi05(ckpt_dir, Pi05Options(flow_steps=3))
    torch.manual_seed(0)
    s = policy.sample(policy.preprocess(_obs()), [CANON, OTHER])
    assert s.actions.shape == (2, TINY.chunk_size, 7)
    assert s.chain.shape == (2, 4, TINY.chunk_size, TINY.max_action_dim)
    assert s.log_prob_elements.shape == (2, TINY.chunk_size, 7)
    np.testing.assert_allclose(s.log_prob, s.log_prob_elements.reshape(2, -1).sum(1), rtol=1e-5)
    # Executed actions are the chain's last state de-normalised with the checkpoint's statistics.
    q01, q99 = action_stats()["q01"], action_stats()["q99"]
    expected = (s.chain[:, -1, :, :7] + 1) / 2 * (q99 - q01) + q01
    np.testing.assert_allclose(s.actions, expected, rtol=1e-5, atol=1e-7)
    # Re-evaluating the stored chain gives the recorded log-probability (cached prefix vs per-step).
    ev = policy.evaluate_pair(
        policy.preprocess(_obs()), [CANON, OTHER], [CANON, OTHER], torch.from_numpy(s.chain)
    ).rollout
    np.testing.assert_allclose(
        ev.log_prob_elements.detach().numpy(), s.log_prob_elements, rtol=1e-4, atol=1e-4
    )
    pair = policy.evaluate_pair(
        policy.preprocess(_obs()), [CANON, OTHER], [CANON, CANON], torch.from_numpy(s.chain)
    )
    assert pair.n_second_pass == 1
    kl = pair.prompt_kl.detach()
    assert float(kl[0]) == 0.0 and float(kl[1]) > 0.0


def test_state_and_actions_follow_the_checkpoint_statistics(ckpt_dir):
    policy = load_pi05(ckpt_dir)
    obs = policy.preprocess(_obs(1))
    norm = policy.normalize_state(obs.state)
    q01, q99 = state_stats()["q01"], state_stats()["q99"]
    expected = 2 * (obs.state.numpy() - q01) / (q99 - q01) - 1
    np.testing.assert_allclose(norm.numpy(), expected, rtol=1e-5, atol=1e-6)
    actions = torch.tensor(np.stack([action_stats()["q01"], action_stats()["q99"]]))[None].float()
    np.testing.assert_allclose(
        policy.normalize_actions(actions, obs.state)[0, :, :7].numpy(), [[-1] * 7, [1] * 7], atol=1e-5
    )
    assert policy.normalize_actions(actions, obs.state).shape[-1] == TINY.max_action_dim
    prompt = state_prompt("put_the bowl\n", np.array([-1.5, -1.0, 0.0, 1.0, 1.5]))
    # LeRobot's np.digitize over 256 bins of [-1, 1]: below -1 gives -1, above 1 stays 255
    assert prompt == "Task: put the bowl, State: -1 0 128 255 255;\nAction: "


def test_a_mapping_file_picks_state_entries_and_cameras(tmp_path):
    mapping = Pi05Mapping(
        state_names=tuple(json.loads(json.dumps(["joint_1_rad"] * 15))), cameras=("wrist", None)
    )
    d = make_tiny_checkpoint(tmp_path / "m", mapping=mapping)
    policy = load_pi05(d)
    assert policy.cameras == ("wrist",)
    obs = policy.preprocess(_obs(1))
    assert obs.images.shape == (1, 1, 3, 16, 16)
    norm = policy.normalize_state(obs.state)
    q01, q99 = state_stats()["q01"], state_stats()["q99"]
    np.testing.assert_allclose(
        norm[0].numpy(), 2 * (float(obs.state[0, 8]) - q01) / (q99 - q01) - 1, rtol=1e-5
    )
    policy.sample(obs, [CANON])


def _openpi_norm_stats(d):
    """LeRobot's statistics file replaced by openpi's ``assets/<id>/norm_stats.json``."""
    (d / STATS_FILE).unlink()
    (d / "assets" / "droid").mkdir(parents=True)
    stats = {
        "state": {k: v.tolist() for k, v in state_stats().items()},
        "actions": {k: v.tolist() for k, v in action_stats().items()},
    }
    (d / "assets" / "droid" / "norm_stats.json").write_text(json.dumps({"norm_stats": stats}))


def test_openpi_norm_stats_are_read(tmp_path):
    d = make_tiny_checkpoint(tmp_path / "op")
    _openpi_norm_stats(d)
    # openpi's normaliser: (x - q01) / (q99 - q01 + 1e-6) * 2 - 1
    q01, q99 = action_stats()["q01"], action_stats()["q99"]
    stats = load_pi05(d).stats["action"]
    np.testing.assert_allclose(stats.denormalize(np.ones(7)), q99 + 1e-6, rtol=1e-6)
    np.testing.assert_allclose(stats.normalize(q01), -1.0)


def _as_openpi_converts(weights):
    """openpi's converter: no ``model.`` prefix, bfloat16, the tied embedding saved only under the
    VLM's ``lm_head`` name, the expert's (untied) ``lm_head`` kept (safetensors' ``save_model``)."""
    out = {k.removeprefix("model."): v.bfloat16() for k, v in weights.items()}
    out[TIED_LM_HEAD_KEY] = out.pop(EMBED_KEY)
    out["paligemma_with_expert.gemma_expert.lm_head.weight"] = torch.zeros(TINY.vocab_size, 32).bfloat16()
    return out


def test_weights_load_with_either_lm_head_spelling_and_a_missing_key_is_named(tmp_path):
    d = make_tiny_checkpoint(tmp_path / "w")
    weights = load_file(d / "model.safetensors")
    embed = weights[f"model.{EMBED_KEY}"]
    for key in (TIED_LM_HEAD_KEY, f"model.{TIED_LM_HEAD_KEY}"):  # openpi's, LeRobot's
        sd = {k: v for k, v in weights.items() if k != f"model.{EMBED_KEY}"} | {key: embed}
        save_file(sd, d / "model.safetensors")
        assert torch.equal(load_pi05(d).model.state_dict()[EMBED_KEY], embed)
    save_file({k: v for k, v in weights.items() if k != f"model.{EMBED_KEY}"}, d / "model.safetensors")
    with pytest.raises(WeightsNotLoadedError, match=r"embed_tokens.weight \(or its tied copy") as e:
        load_pi05(d)
    assert "variant" not in str(e.value)
    save_file({k: v for k, v in weights.items() if k != "model.action_in_proj.bias"}, d / "model.safetensors")
    with pytest.raises(WeightsNotLoadedError, match=r"lacks 1 weight.*'action_in_proj.bias'") as e:
        load_pi05(d)
    assert "variant" not in str(e.value) and "copy (or convert) model.safetensors again" in str(e.value)


def test_an_openpi_converted_checkpoint_takes_its_action_horizon_and_image_inputs(tmp_path):
    """What openpi's convert_jax_model_to_pytorch.py writes: its own config.json (action_dim,
    action_horizon, variants, precision; no chunk_size, input_features or normalisation modes),
    weights without LeRobot's ``model.`` prefix in bfloat16, statistics in assets/<id>/."""
    d = make_tiny_checkpoint(tmp_path / "openpi")
    lerobot = json.loads((d / "config.json").read_text())
    weights = load_file(d / "model.safetensors")
    save_file(_as_openpi_converts(weights), d / "model.safetensors")
    _openpi_norm_stats(d)
    openpi = {
        "action_dim": TINY.max_action_dim,
        "action_horizon": 3,
        "paligemma_variant": TINY.paligemma_variant,
        "action_expert_variant": TINY.action_expert_variant,
        "precision": "bfloat16",
    }
    # The tiny sizes (a real openpi checkpoint is full size: these are LeRobot's defaults there).
    tiny = ("vision_variant", "vocab_size", "image_resolution", "max_state_dim", "tokenizer_max_length")
    (d / "config.json").write_text(json.dumps(openpi | {k: lerobot[k] for k in tiny}))
    # The converter records neither what the actions are nor whether the prompt holds the state.
    with pytest.raises(Pi05CheckpointError, match="state_in_prompt"):
        load_pi05(d)
    mapping = {"state_in_prompt": True, "state_names": list(STATE_VECTOR_NAMES), "cameras": {}}
    (d / "pde_pi05.json").write_text(json.dumps(mapping | {"cameras": {"base_0_rgb": "external"}}))
    with pytest.raises(Pi05CheckpointError, match="pi05_droid gives 7 joint velocities"):
        load_pi05(d)
    cameras = {"base_0_rgb": "external", "left_wrist_0_rgb": "wrist"}
    (d / "pde_pi05.json").write_text(json.dumps(mapping | {"action_space": "ee_delta", "cameras": cameras}))
    policy = load_pi05(d)
    assert policy.chunk_len == 3 and policy.config.max_action_dim == TINY.max_action_dim
    assert [k.rsplit(".", 1)[-1] for k in policy.image_keys] == [
        "base_0_rgb",
        "left_wrist_0_rgb",
        "right_wrist_0_rgb",
    ]
    assert policy.mapping.cameras == ("external", "wrist", None)
    name = "action_in_proj.weight"
    assert torch.equal(policy.model.state_dict()[name], weights[f"model.{name}"].bfloat16().float())
    assert policy.sample(policy.preprocess(_obs(1)), [CANON]).actions.shape == (1, 3, 7)


def test_resize_with_pad_keeps_the_aspect_ratio():
    img = torch.ones(1, 3, 8, 16)
    out = resize_with_pad(img, 16)
    assert out.shape == (1, 3, 16, 16)
    assert (
        float(out[0, 0, 4:12].min()) == 1.0
        and float(out[0, 0, :4].max()) == 0.0
        and float(out[0, 0, 12:].max()) == 0.0
    )


def test_mixed_prompt_ppo_update_checkpoint_and_reload_give_the_same_samples(ckpt_dir, tmp_path):
    torch.manual_seed(0)
    policy = load_pi05(ckpt_dir, Pi05Options(flow_steps=3))
    rng = np.random.default_rng(0)
    batch = [
        (
            synthetic_episode(policy, rng, 2, OTHER if i % 2 else CANON, CANON, i < 2, 24, f"e{i}"),
            float(i < 2),
        )
        for i in range(4)
    ]
    trainer = Trainer(policy, PPOConfig(minibatch_size=4, update_epochs=1, learning_rate=1e-3))
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    stats = trainer.update(batch)
    assert np.isfinite(stats["pg_loss"]) and stats["n_other_prompt_chunks"] == 4
    assert stats["behaviour_log_ratio_abs_mean"] < 1e-3  # recorded log-probs = re-evaluated ones
    changed = [k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])]
    assert any("gemma_expert" in k for k in changed) and any("vision_tower" in k for k in changed)

    store = CheckpointStore(tmp_path / "ckpts")
    store.save(trainer.policy, 1, stats, trainer.state_dict())
    reloaded = store.load(store.path_for(1)).policy
    obs = policy.preprocess(_obs())
    torch.manual_seed(5)
    a = policy.sample(obs, [CANON, OTHER])
    torch.manual_seed(5)
    b = reloaded.sample(obs, [CANON, OTHER])
    np.testing.assert_array_equal(a.chain, b.chain)
    np.testing.assert_array_equal(a.actions, b.actions)


@pytest.mark.parametrize("trainable", ["expert", "lora", "no_vision"])
def test_frozen_parts_stay_frozen_and_partial_checkpoints_reload(ckpt_dir, tmp_path, trainable):
    torch.manual_seed(0)
    policy = load_pi05(ckpt_dir, Pi05Options(flow_steps=2, trainable=trainable, lora_rank=2))
    obs = policy.preprocess(_obs())
    actions = torch.randn(2, TINY.chunk_size, 7) * 0.01
    policy.train()
    policy.supervised_loss(DemoRows(obs, [CANON, OTHER], actions, *policy.supervised_noise(2))).backward()
    grads = {n for n, p in policy.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert not any("vision_tower" in n for n in grads)
    if trainable == "lora":
        assert grads and all(n.startswith("lora.") for n in grads)
    if trainable == "expert":
        assert not any("paligemma." in n for n in grads) and any("gemma_expert" in n for n in grads)
    if trainable == "no_vision":
        assert any("language_model" in n for n in grads)
    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.add_(0.01)
    snap = Trainer(policy).policy_snapshot()  # the actor's copy (deepcopy keeps the LoRA hooks)
    store = CheckpointStore(tmp_path / "c")
    store.save(policy, 0)
    reloaded = store.load(store.path_for(0)).policy
    policy.eval()
    for other in (snap, reloaded):
        torch.manual_seed(3)
        a = policy.sample(obs, [CANON, OTHER])
        torch.manual_seed(3)
        b = other.sample(obs, [CANON, OTHER])
        np.testing.assert_allclose(a.chain, b.chain, rtol=1e-6, atol=1e-6)


def test_supervised_noise_draws_on_the_cpu_and_the_loss_splits_by_rows(ckpt_dir):
    """SFT's contract (learner/sft.py): the caller draws the whole batch's noise and flow times on
    the CPU, and rows' losses weighted by their share add up to the batch's."""
    policy = load_pi05(ckpt_dir, Pi05Options(flow_steps=2))
    obs = policy.preprocess(_obs(3))
    prompts = [CANON, OTHER, CANON]
    actions = torch.randn(3, TINY.chunk_size, 7) * 0.01
    noise, t = policy.supervised_noise(3)
    assert noise.shape == (3, TINY.chunk_size, TINY.max_action_dim) and noise.device.type == "cpu"
    assert ((t > 0.0) & (t <= 1.0)).all()
    whole = policy.supervised_loss(DemoRows(obs, prompts, actions, noise, t))
    rows = ([0, 1], [2])
    parts = [
        policy.supervised_loss(
            DemoRows(obs.index(torch.tensor(r)), [prompts[i] for i in r], actions[r], noise[r], t[r])
        )
        for r in rows
    ]
    torch.testing.assert_close(parts[0] * (2 / 3) + parts[1] * (1 / 3), whole, atol=1e-7, rtol=1e-6)
    with pytest.raises(ValueError, match="noise has 2 rows for 3 observations"):
        DemoRows(obs, prompts, actions, noise[:2], t)


def test_bf16_and_gradient_checkpointing_run(ckpt_dir):
    policy = load_pi05(ckpt_dir, Pi05Options(flow_steps=2, bf16=True, gradient_checkpointing=True))
    obs = policy.preprocess(_obs())
    s = policy.sample(obs, [CANON, OTHER])
    assert np.isfinite(s.log_prob).all() and np.isfinite(s.actions).all()
    policy.train()
    loss = policy.supervised_loss(
        DemoRows(obs, [CANON, OTHER], torch.zeros(2, TINY.chunk_size, 7), *policy.supervised_noise(2))
    )
    loss.backward()
    assert torch.isfinite(loss)


def test_missing_pieces_are_refused_with_what_to_do(tmp_path):
    with pytest.raises(Pi05CheckpointError, match="does not exist"):
        load_pi05(tmp_path / "nope")
    d = make_tiny_checkpoint(tmp_path / "a")
    (d / "tokenizer.json").unlink()
    with pytest.raises(Pi05CheckpointError, match="paligemma-3b-pt-224"):
        load_pi05(d)
    d = make_tiny_checkpoint(tmp_path / "b")
    (d / STATS_FILE).unlink()
    with pytest.raises(Pi05CheckpointError, match="normalisation statistics"):
        load_pi05(d)
    d = make_tiny_checkpoint(tmp_path / "c")
    (d / "model.safetensors").unlink()
    with pytest.raises(WeightsNotLoadedError, match="uninitialised"):
        load_pi05(d)
    d = make_tiny_checkpoint(tmp_path / "d")
    raw = json.loads((d / "config.json").read_text())
    raw["max_action_dim"] = 12  # weights of another width
    (d / "config.json").write_text(json.dumps(raw))
    with pytest.raises(WeightsNotLoadedError, match=r"another shape.*action_expert_variant"):
        load_pi05(d)
    d = make_tiny_checkpoint(tmp_path / "e")
    (d / "pde_pi05.json").write_text(
        json.dumps({"state_names": ["ee_x_m"], "cameras": {"base_0_rgb": "external"}})
    )
    with pytest.raises(Pi05CheckpointError, match="1 state_names for the checkpoint's 15-entry state"):
        load_pi05(d)


def test_policy_refuses_observations_without_the_mapped_camera(ckpt_dir):
    policy = load_pi05(ckpt_dir)
    obs = _obs(1)[0]
    obs.cameras = [c for c in obs.cameras if c.name != "wrist"]
    with pytest.raises(ValueError, match="needs \\['external', 'wrist'\\]"):
        policy.preprocess([obs])


@pytest.mark.gpu
@pytest.mark.skipif(
    not os.environ.get("PDE_PI05_WEIGHTS"), reason="needs real π0.5 weights (PDE_PI05_WEIGHTS)"
)
def test_real_pi05_samples_with_log_prob():  # pragma: no cover
    policy = load_pi05(os.environ["PDE_PI05_WEIGHTS"], Pi05Options(bf16=True)).to("cuda")
    s = policy.sample(policy.preprocess(_obs(1)), [CANON])
    assert np.isfinite(s.log_prob).all()
    assert isinstance(policy, Pi05Policy)
