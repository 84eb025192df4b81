"""A checkpoint cannot be silently mis-mapped (issue 36, item 1): LeRobot's empty-camera inputs masked
as LeRobot masks them, every image input mapped by name, declared absent or refused with the line to
write, action spaces from what the checkpoint states, openpi's DeltaActions declared and honoured, a
partial pde_pi05.json over the defaults, statistics checked at load. Tiny random checkpoints in
LeRobot's and openpi's layouts (tests/learner/pi05_tiny.py)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy

from learner.policies.pi05 import Pi05CheckpointError, load_pi05
from learner.policies.pi05_checkpoint import MAPPING_FILE, STATS_FILE
from learner.synthetic import synthetic_observation
from pde_contract.messages import ActionSpace
from tests.learner.pi05_tiny import TINY, make_joint_checkpoint, make_tiny_checkpoint

PROMPT = "put the green container in the bowl"
VISUAL = {"type": "VISUAL", "shape": [3, 16, 16]}
# openpi's make_bool_mask(7, -1): seven joints as offsets from the state, the gripper absolute.
OPENPI_JOINT_DELTA = [True] * 7 + [False]
JOINTS_AND_GRIPPER = [8, 9, 10, 11, 12, 13, 14, 7]  # STATE_VECTOR_NAMES indices of DROID's state


def _obs(n=2, seed=0):
    rng = np.random.default_rng(seed)
    return [synthetic_observation(rng, size_px=24, seq=i) for i in range(n)]


def _config(d: Path) -> dict:
    return json.loads((d / "config.json").read_text())


def _edit_config(d: Path, **fields) -> None:
    (d / "config.json").write_text(json.dumps(_config(d) | fields))


def _with_images(d: Path, *names: str, **fields) -> Path:
    state = _config(d)["input_features"]["observation.state"]
    features = {f"observation.images.{n}": VISUAL for n in names}
    _edit_config(d, input_features=features | {"observation.state": state}, **fields)
    return d


def _declare(d: Path, **fields) -> None:
    (d / MAPPING_FILE).write_text(json.dumps(fields))


def test_lerobots_empty_cameras_are_masked_whatever_the_names_say(tmp_path):
    # PI05Config(empty_cameras=1) saved: its config.json lists empty_camera_0 as an image input.
    d = _with_images(make_tiny_checkpoint(tmp_path / "e"), "wrist", "empty_camera_0", empty_cameras=1)
    policy = load_pi05(d)
    assert policy.mapping.cameras == ("wrist", None) and policy.cameras == ("wrist",)
    # empty_cameras alone (LeRobot's validate_features adds the input when config.json lacks it).
    d2 = _with_images(make_tiny_checkpoint(tmp_path / "e2"), "wrist", empty_cameras=2)
    assert load_pi05(d2).image_keys[1:] == (
        "observation.images.empty_camera_0",
        "observation.images.empty_camera_1",
    )
    assert load_pi05(d2).cameras == ("wrist",)
    _declare(d, cameras={"empty_camera_0": "external"})
    with pytest.raises(Pi05CheckpointError, match=r"empty-camera inputs.*always masks.*null"):
        load_pi05(d)
    # An absent input is LeRobot's -1 image with mask 0: the valid tokens see exactly what they see
    # when the input is left out (as Pi05Policy does), so the velocity is the same.
    model = policy.model.eval()
    obs = policy.preprocess(_obs(1))
    pixels = obs.images.float() / 255 * 2 - 1
    masked = torch.cat([pixels, -torch.ones_like(pixels)], dim=1)
    ids, valid = policy.tokenize([PROMPT], policy.normalize_state(obs.state).numpy())
    x, t = torch.randn(1, policy.chunk_len, TINY.max_action_dim), torch.tensor([0.6])
    with torch.no_grad():
        left_out = model.embed_prefix(model.embed_images(pixels), torch.tensor([[True]]), ids, valid)
        lerobot = model.embed_prefix(model.embed_images(masked), torch.tensor([[True, False]]), ids, valid)
        torch.testing.assert_close(model.velocity(lerobot, x, t), model.velocity(left_out, x, t))


def test_an_image_input_the_names_leave_open_is_refused_with_the_line_to_write(tmp_path):
    d = _with_images(make_tiny_checkpoint(tmp_path / "three"), "front", "top", "wrist")
    with pytest.raises(Pi05CheckpointError) as e:
        load_pi05(d)
    line = '"cameras": {"front": "external", "top": null, "wrist": "wrist"}'
    assert "['top'] without a camera" in str(e.value) and line in str(e.value)
    _declare(d, cameras={"top": None})  # the line written: declared absent, the rest by name
    assert load_pi05(d).mapping.cameras == ("external", None, "wrist")
    _declare(d, cameras={"top": "external", "front": None})
    assert load_pi05(d).mapping.cameras == (None, "external", "wrist")


def test_a_partial_mapping_file_merges_over_the_defaults(tmp_path):
    # What docs/pi05.md says an openpi conversion must say, and nothing else.
    d = make_joint_checkpoint(tmp_path / "p", {"action_feature_names": None})
    _declare(d, action_space="joint_abs", state_in_prompt=False)
    policy = load_pi05(d)
    assert policy.action_space == ActionSpace.JOINT_ABS and not policy.state_in_prompt
    assert policy.mapping.cameras == ("external", "wrist")
    assert policy.mapping.state_names == (*(f"joint_{i}_rad" for i in range(1, 8)), "gripper_width_m")
    _declare(d, action_space="joint_abs", cameras=["external", "wrist"])
    with pytest.raises(Pi05CheckpointError, match=r"by name, not by order"):
        load_pi05(d)
    _declare(d, action_space="joint_abs", camera={"base_0_rgb": "external"})  # a typo is named
    with pytest.raises(Pi05CheckpointError, match=r"camera: Extra inputs.*Its fields: \[.*'cameras'"):
        load_pi05(d)


@pytest.mark.parametrize(
    "names",
    [
        [f"dq_{i}" for i in range(1, 8)] + ["gripper"],
        [f"joint_{i}_velocity" for i in range(7)] + ["gripper_position"],
        [f"qdot{i}" for i in range(7)] + ["gripper"],
    ],
)
def test_velocity_like_action_names_are_refused_even_when_declared(tmp_path, names):
    d = make_joint_checkpoint(tmp_path / "v", {"action_feature_names": names})
    with pytest.raises(Pi05CheckpointError, match=r"velocities or joint steps.*--init COPY"):
        load_pi05(d)
    _declare(d, action_space="joint_abs")
    with pytest.raises(Pi05CheckpointError, match=r"velocities or joint steps"):
        load_pi05(d)


def test_unnamed_or_unknown_action_columns_need_a_declared_action_space(tmp_path):
    d = make_joint_checkpoint(tmp_path / "u", {"action_feature_names": None})
    with pytest.raises(Pi05CheckpointError, match=r'does not name its 8 action columns.*"action_space"'):
        load_pi05(d)
    _edit_config(d, action_feature_names=[f"a{i}" for i in range(8)])
    with pytest.raises(Pi05CheckpointError, match=r"which say neither"):
        load_pi05(d)
    _declare(d, action_space="joint_abs")
    assert load_pi05(d).action_space == ActionSpace.JOINT_ABS
    # Names that say a space: taken; a declaration against them is refused.
    _edit_config(d, action_feature_names=[*(f"joint_{i}.pos" for i in range(1, 8)), "gripper.pos"])
    assert load_pi05(d).action_space == ActionSpace.JOINT_ABS
    _declare(d, action_space="ee_delta")
    with pytest.raises(Pi05CheckpointError, match=r"declares action_space ee_delta.*say joint_abs"):
        load_pi05(d)


# openpi's transforms (openpi/transforms.py), as numpy: DeltaActions / AbsoluteActions with a mask
# that may be shorter than the action, applied to every step of the chunk; quantile Normalize /
# Unnormalize with openpi's +1e-6. The data pipeline: DeltaActions, then Normalize; the output:
# Unnormalize, then AbsoluteActions.
def _openpi_delta(actions, state, mask):
    dims = len(mask)
    out = actions.copy()
    out[..., :dims] -= np.expand_dims(np.where(mask, state[..., :dims], 0), axis=-2)
    return out


def _openpi_absolute(actions, state, mask):
    dims = len(mask)
    out = actions.copy()
    out[..., :dims] += np.expand_dims(np.where(mask, state[..., :dims], 0), axis=-2)
    return out


def _openpi_normalize(x, q01, q99):
    return (x - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0


def _openpi_unnormalize(x, q01, q99):
    return (x + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01


def _openpi_conversion(d: Path, stats: dict) -> None:
    """What openpi's converter leaves: its config.json (tiny sizes kept), assets/<id>/norm_stats.json."""
    lerobot = _config(d)
    keep = ("vision_variant", "vocab_size", "image_resolution", "max_state_dim", "tokenizer_max_length")
    openpi = {"action_dim": TINY.max_action_dim, "action_horizon": 4, "precision": "float32"}
    openpi |= {k: lerobot[k] for k in ("paligemma_variant", "action_expert_variant", *keep)}
    (d / "config.json").write_text(json.dumps(openpi))
    (d / STATS_FILE).unlink()
    (d / "assets" / "lab").mkdir(parents=True)
    norm = {"norm_stats": {k: {s: v.tolist() for s, v in stats[k].items()} for k in ("state", "actions")}}
    (d / "assets" / "lab" / "norm_stats.json").write_text(json.dumps(norm))


def test_openpi_delta_actions_are_declared_and_honoured_as_openpis_transforms(tmp_path):
    d = make_joint_checkpoint(tmp_path / "op")
    offsets = {"q01": np.array([-0.3] * 7 + [0.0]), "q99": np.array([0.25] * 7 + [0.08])}
    state = {"q01": np.array([-2.8] * 7 + [0.0]), "q99": np.array([2.8] * 7 + [0.08])}
    _openpi_conversion(d, {"state": state, "actions": offsets})
    _declare(d, action_space="joint_abs", state_in_prompt=True, cameras={"base_0_rgb": "external"})
    assert load_pi05(d).relative == ()  # declared absolute: what the issue found sent offsets
    _declare(d, action_space="joint_abs", state_in_prompt=True, delta_actions=OPENPI_JOINT_DELTA)
    policy = load_pi05(d)
    assert policy.relative == tuple(OPENPI_JOINT_DELTA)
    assert policy.mapping.cameras == ("external", "wrist", None)  # right_wrist: openpi's convention
    obs = policy.preprocess(_obs(3))
    raw_state = obs.state.numpy()[:, JOINTS_AND_GRIPPER].astype(np.float64)
    # Output: the model's normalised chunk -> Unnormalize -> AbsoluteActions.
    model_out = torch.rand(3, policy.chunk_len, TINY.max_action_dim) * 2 - 1
    ours = policy.denormalize_actions(model_out, obs.state).numpy()
    chunk = model_out[..., :8].numpy().astype(np.float64)
    want = _openpi_absolute(
        _openpi_unnormalize(chunk, offsets["q01"], offsets["q99"]), raw_state, OPENPI_JOINT_DELTA
    )
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)
    assert np.abs(raw_state[:, :7]).max() > 0.1  # the state added is not negligible
    # Training targets: absolute demo actions -> DeltaActions -> Normalize.
    demo = want
    target = policy.normalize_actions(torch.from_numpy(demo).float(), obs.state)[..., :8].numpy()
    expected = _openpi_normalize(
        _openpi_delta(demo, raw_state, OPENPI_JOINT_DELTA), offsets["q01"], offsets["q99"]
    )
    np.testing.assert_allclose(target, expected, rtol=1e-4, atol=1e-4)
    # A shorter mask (openpi allows it): the columns past it stay absolute.
    _declare(d, action_space="joint_abs", state_in_prompt=True, delta_actions=[True] * 3)
    assert load_pi05(d).relative == (True,) * 3 + (False,) * 5
    _declare(d, action_space="joint_abs", state_in_prompt=True, delta_actions=[True] * 9)
    with pytest.raises(Pi05CheckpointError, match=r"delta_actions has 9 entries for 8 action columns"):
        load_pi05(d)
    # Offsets of the end-effector steps cannot become targets: refused as LeRobot's relative ones.
    _declare(d, action_space="ee_delta", state_in_prompt=True, delta_actions=[True] * 6)
    with pytest.raises(Pi05CheckpointError):
        load_pi05(d)


def test_delta_actions_and_lerobots_relative_actions_must_agree(tmp_path):
    # LeRobot's use_relative_actions excluding "gripper" in "gripper.pos": openpi's mask, the same.
    relative = {"use_relative_actions": True, "relative_exclude_joints": ["gripper"]}
    d = make_joint_checkpoint(tmp_path / "both", relative)
    _declare(d, delta_actions=OPENPI_JOINT_DELTA)
    assert load_pi05(d).relative == tuple(OPENPI_JOINT_DELTA)
    _declare(d, delta_actions=[True] * 3)
    with pytest.raises(Pi05CheckpointError, match=r"disagree: keep one"):
        load_pi05(d)


def test_statistics_of_the_wrong_length_or_not_finite_are_refused_naming_the_file(tmp_path):
    d = make_tiny_checkpoint(tmp_path / "s")
    good = load_numpy(str(d / STATS_FILE))
    for key, value, match in (
        (
            "action.q99",
            good["action.q99"][:6],
            r"lengths \{'q01': 7, 'q99': 6\}, config.json gives the feature 7",
        ),
        ("observation.state.q01", good["observation.state.q01"][:8], r"\(state\): statistics of lengths"),
        ("action.q01", np.where(np.arange(7) == 2, np.nan, good["action.q01"]), r"not finite.*'q01': \[2\]"),
        ("observation.state.q99", np.full(15, np.inf, np.float32), r"\(state\).*not finite"),
    ):
        save_numpy(good | {key: value.astype(np.float32)}, str(d / STATS_FILE))
        with pytest.raises(Pi05CheckpointError, match=match) as e:
            load_pi05(d)
        assert str(d / STATS_FILE) in str(e.value)
    # Without config.json's shapes (openpi's converter), the arrays must still agree with each other.
    op = make_joint_checkpoint(tmp_path / "op")
    bad = {"q01": np.zeros(8), "q99": np.ones(7)}
    _openpi_conversion(op, {"state": {"q01": np.zeros(8), "q99": np.ones(8)}, "actions": bad})
    _declare(op, action_space="joint_abs", state_in_prompt=True)
    with pytest.raises(
        Pi05CheckpointError, match=r"norm_stats.json \(action\): statistics of different lengths"
    ):
        load_pi05(op)
