"""A π0.5 checkpoint directory on disk: what ``--init DIR`` reads, all of it offline.

Layout (LeRobot 0.6.1's ``save_pretrained`` plus the tokenizer and our mapping):

- ``config.json``: LeRobot's ``PI05Config`` (architecture fields, ``input_features`` whose VISUAL keys
  name the checkpoint's cameras in order, ``normalization_mapping``), or the one openpi's converter
  writes (``action_horizon``, ``action_dim``, the variants; openpi's three image inputs);
- ``model.safetensors``: the weights, keys as LeRobot's ``PI05Policy.state_dict()`` (``model.`` ...)
  or as openpi's converter writes them (no ``model.`` prefix, often bfloat16);
- normalisation statistics: LeRobot's ``policy_preprocessor_step_*_normalizer_processor.safetensors``
  (keys ``observation.state.q01``, ``action.q99``, ...) or openpi's ``assets/<id>/norm_stats.json``
  (``{"norm_stats": {"state": {...}, "actions": {...}}}``, what openpi's converter copies);
- ``tokenizer.json`` (here or in ``tokenizer/``): the PaliGemma tokenizer, read with ``tokenizers``;
- ``pde_pi05.json`` (optional, ours; :class:`MappingFile`): which FR3 state entries and cameras feed
  the checkpoint's, the action space, openpi's delta-action mask, whether the prompt holds the state;
  each field it leaves out takes its default (:func:`read_checkpoint`), and a default that the
  checkpoint leaves open is refused with the line to write. Its ``model_sizes`` holds the size
  fields LeRobot's config has no name for (``vision_variant``, ``vocab_size``: small test models
  only; LeRobot fixes So400m and 257152).

Every missing or mismatched piece stops start-up with a message naming the file and what to do.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from learner.policies.pi05_model import PALIGEMMA_VOCAB_SIZE, UNUSED_CHECKPOINT_KEYS, Pi05Config, Pi05Model
from learner.policies.registry import PolicyInitError
from pde_contract.messages import ACTION_DIMS, STATE_VECTOR_NAMES, ActionSpace

# openpi's examples/convert_jax_model_to_pytorch.py writes a config.json of its own (action_dim,
# action_horizon, the two variants, precision): LeRobot's names for its fields, taken where
# LeRobot's are absent (else the chunk would silently be LeRobot's default 50, pi05_droid's is 15).
OPENPI_FIELDS = {"action_horizon": "chunk_size", "action_dim": "max_action_dim"}
# openpi's models always take these image inputs, in this order (openpi/models/model.py IMAGE_KEYS).
IMAGE_PREFIX = "observation.images."
OPENPI_IMAGE_KEYS = tuple(
    f"{IMAGE_PREFIX}{k}" for k in ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
)
# openpi's single-arm robots (DROID, LIBERO) feed its second wrist input nothing (a zero image, mask
# False: droid_policy.py, libero_policy.py): absent by default in an openpi conversion.
OPENPI_UNUSED_IMAGE_KEY = f"{IMAGE_PREFIX}right_wrist_0_rgb"
# LeRobot's PI05Config(empty_cameras=N) adds image inputs observation.images.empty_camera_0..N-1
# (validate_features); no dataset has them, so its _preprocess_images always feeds them a -1 image
# with mask 0: absent, whatever a mapping says.
EMPTY_CAMERA_PREFIX = f"{IMAGE_PREFIX}empty_camera_"
MAPPING_FILE = "pde_pi05.json"
# Pi05Config's size fields that LeRobot's PI05Config lacks, with the values LeRobot fixes; other
# values are read from pde_pi05.json's MODEL_SIZES_KEY (or from config.json, as tests write it).
SIZE_FIELDS: dict[str, Any] = {"vision_variant": "so400m", "vocab_size": PALIGEMMA_VOCAB_SIZE}
MODEL_SIZES_KEY = "model_sizes"
PREPROCESSOR_FILE = "policy_preprocessor.json"  # LeRobot's pipeline: its relative-actions step config
# The FR3's action columns by name (pde_contract ActionSpace), as exported action_feature_names.
ACTION_NAMES: dict[ActionSpace, tuple[str, ...]] = {
    ActionSpace.EE_DELTA: ("dx_m", "dy_m", "dz_m", "drx_rad", "dry_rad", "drz_rad", "gripper_width_m"),
    ActionSpace.JOINT_ABS: (*(f"joint_{i}_rad" for i in range(1, 8)), "gripper_width_m"),
}
# Absolute spaces, whose column i is state entry STATE_VECTOR_NAMES-named ACTION_NAMES[i]: a
# relative checkpoint's offsets can be added to those entries (ee_delta is a step, not a state).
ACTION_COLUMNS = {ActionSpace.JOINT_ABS: ACTION_NAMES[ActionSpace.JOINT_ABS]}
WEIGHTS_FILE = "model.safetensors"
# LeRobot 0.5's name (0.6.1's relative-actions step makes it step_3); any step_N is read.
STATS_FILE = "policy_preprocessor_step_2_normalizer_processor.safetensors"
NORM_MODES = ("QUANTILES", "MEAN_STD", "MIN_MAX")
# The statistics each mode reads (LeRobot's NormalizationMode and its normaliser's keys).
NORM_STATS = {"QUANTILES": ("q01", "q99"), "MEAN_STD": ("mean", "std"), "MIN_MAX": ("min", "max")}
# Modes that map a range [low, high] to [-1, 1] as 2 (x - low) / (high - low) - 1.
RANGE_MODES = ("QUANTILES", "MIN_MAX")
# Action names that say velocities or joint steps (DROID's joint_velocity, dq_1, qdot, twist): no
# robot server here takes them, whatever action_space a file declares.
VELOCITY_NAME = re.compile(r"vel|speed|twist|dot|(^|[^a-z])(dq|qd|delta_?q|dtheta)([^a-z]|$)")
JOINT_POSITION_NAME = re.compile(r"joint|^q_?\d|^j\d")
GRIPPER_NAME = re.compile(r"gripper|finger")

log = logging.getLogger(__name__)


class Pi05CheckpointError(PolicyInitError):
    """The π0.5 checkpoint directory is missing something or does not fit the robot."""


class MissingStatsError(Pi05CheckpointError):
    """The directory holds no normalisation statistics."""


class WeightsNotLoadedError(Pi05CheckpointError):
    """The weights file does not cover the model: refusing to run a randomly initialised π0.5."""


@dataclass(frozen=True)
class FeatureStats:
    """Normalisation of one feature: ``mode`` QUANTILES maps [q01, q99] to [-1, 1] (π0.5's default),
    MIN_MAX [min, max] the same way, MEAN_STD to zero mean, unit deviation:
    x_norm = (x - offset) / scale - shift. QUANTILES (and MIN_MAX) keep
    LeRobot's form, 2 (x - q01) / (q99 - q01) - 1 (offset q01, scale half the range, shift 1), so
    that a constant entry (q01 == q99) gives -1 at q01 as there, not 0."""

    mode: str
    offset: np.ndarray
    scale: np.ndarray
    known: bool = True
    shift: float = 0.0

    def normalize(self, x: Any) -> Any:
        """Raw units -> normalised (numpy arrays or tensors, the statistics as tensors alike)."""
        return (x - self.offset) / self.scale - self.shift

    def denormalize(self, x_norm: Any) -> Any:
        return (x_norm + self.shift) * self.scale + self.offset

    def to_stats(self) -> dict[str, np.ndarray]:
        """Statistics LeRobot's normaliser turns into this normalisation: the range it divides by
        (openpi's 1e-6 included), a constant entry as q01 == q99 (LeRobot's 1e-8 applies again)."""
        if self.mode not in RANGE_MODES:
            return {"mean": self.offset.copy(), "std": self.scale.copy()}
        low, high = NORM_STATS[self.mode]
        if self.shift == 0.0:  # centred, as policy checkpoints before the LeRobot form held it
            return {low: self.offset - self.scale, high: self.offset + self.scale}
        spread = self.scale * np.float32(2)
        top = np.where(spread == np.float32(1e-8), self.offset, self.offset + spread)
        return {low: self.offset.copy(), high: top.astype(np.float32)}

    @staticmethod
    def unknown(dim: int) -> FeatureStats:
        """Placeholder for statistics still to be computed (the policy refuses to act on it)."""
        return FeatureStats("QUANTILES", np.zeros(dim, np.float32), np.ones(dim, np.float32), known=False)

    @staticmethod
    def quantiles_of(values: np.ndarray) -> FeatureStats:
        """QUANTILES statistics (q01, q99 per column) of rows [N, D], as LeRobot computes them."""
        q01, q99 = np.quantile(values, 0.01, axis=0), np.quantile(values, 0.99, axis=0)
        return FeatureStats.from_stats("QUANTILES", {"q01": q01, "q99": q99}, "demonstrations")

    @staticmethod
    def from_stats(mode: str, stats: dict[str, np.ndarray], where: str, openpi: bool = False) -> FeatureStats:
        """``openpi``: openpi's normaliser, which adds 1e-6 to every range and deviation, where
        LeRobot's replaces a zero range or deviation by 1e-8."""
        if mode not in NORM_MODES:
            raise Pi05CheckpointError(
                f"{where}: normalisation mode {mode!r} is not supported; use {NORM_MODES}"
            )
        need = NORM_STATS[mode]
        missing = [k for k in need if k not in stats]
        if missing:
            raise Pi05CheckpointError(
                f"{where}: {mode} normalisation needs {list(need)}, the statistics lack {missing} "
                "(recompute them for the dataset the checkpoint was trained on)"
            )
        # float32 as LeRobot holds them; the range is rounded once, as its float32 q99 - q01 is.
        a, b = (np.asarray(stats[k], dtype=np.float32).reshape(-1) for k in need)
        spread = b - a if mode in RANGE_MODES else b
        spread = spread + np.float32(1e-6) if openpi else np.where(spread == 0, np.float32(1e-8), spread)
        if mode in RANGE_MODES:
            return FeatureStats(mode, a, (spread / 2).astype(np.float32), shift=1.0)
        return FeatureStats(mode, a, spread.astype(np.float32))

    @property
    def dim(self) -> int:
        return int(self.offset.shape[0])


@dataclass(frozen=True)
class Pi05Mapping:
    """How the FR3's observation and actions meet the checkpoint's (``pde_pi05.json``)."""

    state_names: tuple[str, ...]
    """Our state entries (``STATE_VECTOR_NAMES``) in the order of the checkpoint's state vector."""
    cameras: tuple[str | None, ...]
    """Our camera for each of the checkpoint's image inputs in order; null: absent (masked out)."""
    action_space: ActionSpace = ActionSpace.EE_DELTA

    def check(self, state_dim: int, n_images: int, action_dim: int) -> None:
        unknown = [n for n in self.state_names if n not in STATE_VECTOR_NAMES]
        if unknown:
            raise Pi05CheckpointError(
                f"{MAPPING_FILE}: unknown state names {unknown}; use names from {list(STATE_VECTOR_NAMES)}"
            )
        if len(self.state_names) != state_dim:
            raise Pi05CheckpointError(
                f"{MAPPING_FILE}: {len(self.state_names)} state_names for the checkpoint's "
                f"{state_dim}-entry state"
            )
        if len(self.cameras) != n_images:
            raise Pi05CheckpointError(
                f"{MAPPING_FILE}: {len(self.cameras)} cameras for the checkpoint's {n_images} image inputs "
                "(null for an input with no camera)"
            )
        if not any(self.cameras):
            raise Pi05CheckpointError(f"{MAPPING_FILE}: at least one image input needs a camera")
        if ACTION_DIMS[self.action_space] != action_dim:
            raise Pi05CheckpointError(
                f"the checkpoint acts in {action_dim} dimensions, {self.action_space.value} has "
                f"{ACTION_DIMS[self.action_space]}: set action_space in {MAPPING_FILE} or use another "
                "checkpoint"
            )

    def to_json_dict(self) -> dict[str, Any]:
        return {**asdict(self), "action_space": self.action_space.value}

    def to_file_dict(self, image_keys: tuple[str, ...]) -> dict[str, Any]:
        """What ``pde_pi05.json`` holds: cameras by the checkpoint's image input names."""
        return {**self.to_json_dict(), "cameras": dict(zip(image_keys, self.cameras, strict=True))}

    @staticmethod
    def from_json_dict(raw: dict[str, Any]) -> Pi05Mapping:
        """A policy checkpoint's mapping (``to_json_dict``: cameras in the image inputs' order; a
        lab's ``pde_pi05.json`` names them instead, :class:`MappingFile`)."""
        try:
            return Pi05Mapping(
                state_names=tuple(raw["state_names"]),
                cameras=tuple(raw["cameras"]),
                action_space=ActionSpace(raw.get("action_space", ActionSpace.EE_DELTA.value)),
            )
        except (KeyError, ValueError) as e:
            raise Pi05CheckpointError(
                f"the policy checkpoint's π0.5 mapping is damaged ({e!r}): export it again from its "
                f"source directory, whose {MAPPING_FILE} says the mapping"
            ) from e


class MappingFile(BaseModel):
    """``pde_pi05.json``: what a lab says about a checkpoint; every field may be left out (its
    default applies where the checkpoint allows no other reading, else loading says what to write).

    - ``state_names``: our state entries (``STATE_VECTOR_NAMES``) in the checkpoint's state order;
    - ``cameras``: ``{"<image input>": "<our camera>" | null}``, by the names of config.json's
      image inputs (with or without ``observation.images.``); null: absent (masked, as LeRobot
      masks a camera its batch lacks); inputs left out take their defaults;
    - ``action_space``: ``ee_delta`` or ``joint_abs`` (``pde_contract.messages.ActionSpace``);
    - ``delta_actions``: openpi's ``DeltaActions`` mask (e.g. ``make_bool_mask(7, -1)``: seven
      true, then false): column i, where true, is the model's offset from state entry i; columns
      past the mask are absolute;
    - ``state_in_prompt``: false for openpi's ``discrete_state_input=False`` (``pi05_libero``);
    - ``model_sizes``: the tiny test sizes LeRobot has no field for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state_names: list[str] | None = None
    cameras: dict[str, str | None] | None = None
    action_space: ActionSpace | None = None
    delta_actions: list[bool] | None = None
    state_in_prompt: bool | None = None
    model_sizes: dict[str, Any] | None = None


def read_mapping_file(directory: Path, image_keys: tuple[str, ...]) -> MappingFile:
    """``pde_pi05.json`` of ``directory`` (an empty MappingFile without one)."""
    path = directory / MAPPING_FILE
    if not path.is_file():
        return MappingFile()
    raw = _read_json(path)
    if "cameras" in raw and not isinstance(raw["cameras"], dict):
        template: dict[str, str | None] = {}
        for key in image_keys:  # the by-name rule, as an example to edit
            ours = "wrist" if "wrist" in key.lower() else "external"
            fits = ours not in template.values() and not key.startswith(EMPTY_CAMERA_PREFIX)
            template[key.removeprefix(IMAGE_PREFIX)] = ours if fits else None
        raise Pi05CheckpointError(
            f"{path}: cameras must name the checkpoint's image inputs (matched by name, not by "
            f'order), e.g. "cameras": {json.dumps(template)} with our camera or null (absent) for each'
        )
    try:
        return MappingFile.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors()
        )
        raise Pi05CheckpointError(
            f"{path}: {problems}. Its fields: {sorted(MappingFile.model_fields)} (docs/pi05.md; "
            f"action_space one of {[s.value for s in ActionSpace]})"
        ) from None


@dataclass
class Pi05Checkpoint:
    """Everything of a π0.5 checkpoint directory except the weights, which load into a model."""

    directory: Path
    config: Pi05Config
    image_keys: tuple[str, ...]
    state: FeatureStats
    action: FeatureStats
    mapping: Pi05Mapping
    tokenizer_json: str = field(repr=False)
    relative: tuple[bool, ...] = ()
    """LeRobot's ``use_relative_actions``: True for each action column the model gives as an offset
    from the checkpoint's state entry of the same index (added back before the robot gets it);
    empty: every column absolute."""
    state_in_prompt: bool = True
    """The prompt holds the discretised state (False: openpi's ``discrete_state_input=False``)."""

    def tokenizer(self) -> Tokenizer:
        return tokenizer_from_json(self.tokenizer_json, self.config.tokenizer_max_length)

    def load_weights(self, model: Pi05Model) -> None:
        load_weights(model, self.directory / WEIGHTS_FILE)


def tokenizer_from_json(text: str, max_length: int) -> Tokenizer:
    """The tokenizer padding on the right to ``max_length`` and truncating, as LeRobot's step does."""
    tok = Tokenizer.from_str(text)
    pad_id = tok.token_to_id("<pad>")
    tok.enable_truncation(max_length)
    tok.enable_padding(length=max_length, pad_id=0 if pad_id is None else pad_id, pad_token="<pad>")
    return tok


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise Pi05CheckpointError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise Pi05CheckpointError(f"{path} holds {type(raw).__name__}, not a JSON object")
    return raw


def _find_tokenizer(directory: Path) -> Path:
    for candidate in (directory / "tokenizer.json", directory / "tokenizer" / "tokenizer.json"):
        if candidate.is_file():
            return candidate
    raise Pi05CheckpointError(
        f"no tokenizer.json in {directory} or {directory / 'tokenizer'}: π0.5 reads prompts with the "
        "PaliGemma tokenizer and nothing is downloaded at run time. On a machine with internet access, "
        "accept the licence of google/paligemma-3b-pt-224 on the Hugging Face hub, download its "
        f"tokenizer.json and copy it to {directory / 'tokenizer.json'}"
    )


def _read_stats(directory: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], Path]:
    """(state stats, action stats, source file) from LeRobot's or openpi's statistics."""
    lerobot = sorted(directory.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))
    if lerobot:
        flat = load_numpy(str(lerobot[0]))
        state = {
            k.removeprefix("observation.state."): v
            for k, v in flat.items()
            if k.startswith("observation.state.")
        }
        action = {k.removeprefix("action."): v for k, v in flat.items() if k.startswith("action.")}
        return state, action, lerobot[0]
    # assets/<asset id>/: the id may have a slash (pi05_libero's "physical-intelligence/libero").
    openpi = sorted(directory.glob("assets/**/norm_stats.json"))
    if len(openpi) > 1:
        raise Pi05CheckpointError(
            f"{directory} holds several openpi statistics {[str(p) for p in openpi]}: keep the one of "
            "the dataset the checkpoint was trained on"
        )
    if openpi:
        raw = _read_json(openpi[0]).get("norm_stats", {})
        if "state" not in raw or "actions" not in raw:
            raise Pi05CheckpointError(f"{openpi[0]} has no norm_stats.state / norm_stats.actions")

        def arrays(d: dict[str, Any]) -> dict[str, np.ndarray]:
            return {k: np.asarray(v, dtype=np.float64) for k, v in d.items()}

        return arrays(raw["state"]), arrays(raw["actions"]), openpi[0]
    raise MissingStatsError(
        f"no normalisation statistics in {directory}: expected LeRobot's "
        "policy_preprocessor_step_*_normalizer_processor.safetensors or openpi's "
        "assets/<id>/norm_stats.json; "
        "without them the actions would be normalised outputs read as metres and radians. A base "
        "checkpoint without statistics starts with `pde learner sft`, which computes them from the demos"
    )


def default_state_names(state_dim: int) -> tuple[str, ...]:
    """Ours as they are when the dimension allows no other reading: the full 15-entry state, or the
    7 joints + gripper (DROID's order)."""
    if state_dim == len(STATE_VECTOR_NAMES):
        return STATE_VECTOR_NAMES
    if state_dim == 8:
        return (*(f"joint_{i}_rad" for i in range(1, 8)), "gripper_width_m")
    raise Pi05CheckpointError(
        f"the checkpoint's state has {state_dim} entries; say which of ours feed it in "
        f'{MAPPING_FILE}: {{"state_names": [...]}} with names from {list(STATE_VECTOR_NAMES)}'
    )


def image_inputs(config: dict[str, Any], openpi: bool) -> tuple[str, ...]:
    """The checkpoint's image inputs in order: config.json's VISUAL ``input_features`` and the
    ``empty_camera_i`` inputs its ``empty_cameras`` adds (LeRobot's validate_features), or openpi's
    three."""
    if openpi:
        return OPENPI_IMAGE_KEYS
    features = config.get("input_features", {})
    keys = [k for k, v in features.items() if isinstance(v, dict) and v.get("type") == "VISUAL"]
    empty = config.get("empty_cameras", 0)
    keys += [f"{EMPTY_CAMERA_PREFIX}{i}" for i in range(empty if isinstance(empty, int) else 0)]
    return tuple(dict.fromkeys(keys))


def resolve_cameras(
    image_keys: tuple[str, ...], given: dict[str, str | None] | None, openpi: bool, where: Path
) -> tuple[tuple[str | None, ...], list[str]]:
    """Our camera for each image input (None: absent, masked) and a note per input on why.

    An input named in ``given`` (pde_pi05.json ``cameras``) takes what it says; LeRobot's
    ``empty_camera_i`` is absent (a camera there would be refused: LeRobot never feeds one);
    openpi's ``right_wrist_0_rgb`` is absent (its single-arm convention); otherwise by name: the
    first ``*wrist*`` input gets the wrist camera, the first other one the external camera. Any
    further input is refused with the line to write: no camera is dropped without a word."""
    short = {k.removeprefix(IMAGE_PREFIX): k for k in image_keys}
    named = {short.get(k, k): v for k, v in (given or {}).items()}
    unknown = [k for k in named if k not in image_keys]
    if unknown:
        raise Pi05CheckpointError(
            f"{where}: cameras names {unknown}, which are not image inputs of config.json "
            f"{[k.removeprefix(IMAGE_PREFIX) for k in image_keys]}"
        )
    fed = [k for k, v in named.items() if v is not None and k.startswith(EMPTY_CAMERA_PREFIX)]
    if fed:
        raise Pi05CheckpointError(
            f"{where}: cameras feeds {fed}, LeRobot's empty-camera inputs (PI05Config empty_cameras), "
            "which LeRobot always masks: the checkpoint never saw an image there. Write null for them "
            "or leave them out"
        )
    out: list[str | None] = []
    notes: list[str] = []
    undecided: list[str] = []
    for key in image_keys:
        name = key.removeprefix(IMAGE_PREFIX)
        if key in named:
            out.append(named[key])
            notes.append(f"{name} <- {named[key] or 'absent'} ({MAPPING_FILE})")
            continue
        if key.startswith(EMPTY_CAMERA_PREFIX) or (openpi and key == OPENPI_UNUSED_IMAGE_KEY):
            why = "openpi's single-arm convention" if openpi else "LeRobot's empty camera, masked"
            out.append(None)
            notes.append(f"{name} absent ({why})")
            continue
        ours = "wrist" if "wrist" in name.lower() else "external"
        taken = ours in out or any(named.get(k) == ours for k in image_keys)
        if taken:
            undecided.append(key)
            out.append(None)
            continue
        out.append(ours)
        notes.append(f"{name} <- {ours} (by name)")
    if undecided:
        inputs = [k.removeprefix(IMAGE_PREFIX) for k in image_keys]
        left = [k.removeprefix(IMAGE_PREFIX) for k in undecided]
        line = dict(zip(inputs, out, strict=True))
        raise Pi05CheckpointError(
            f"{where.parent / 'config.json'} has image inputs {inputs}; by name the FR3's wrist and "
            f"external cameras feed the first wrist and first other one, which leaves {left} without "
            f'a camera. Say what each gets in {where}: "cameras": {json.dumps(line)} (null: absent, '
            "masked as LeRobot masks a camera its batch lacks; or name one of ours)"
        )
    return tuple(out), notes


def _model_sizes(directory: Path, config: dict[str, Any]) -> dict[str, Any]:
    """pde_pi05.json's ``model_sizes`` (what our export writes for a model smaller than LeRobot
    builds); a field config.json also gives must agree."""
    path = directory / MAPPING_FILE
    sizes = _read_json(path).get(MODEL_SIZES_KEY, {}) if path.is_file() else {}
    if not isinstance(sizes, dict) or set(sizes) - set(SIZE_FIELDS):
        raise Pi05CheckpointError(
            f"{path}: {MODEL_SIZES_KEY} must be an object with some of {sorted(SIZE_FIELDS)}, got {sizes!r}"
        )
    clash = {k: (v, config[k]) for k, v in sizes.items() if k in config and config[k] != v}
    if clash:
        raise Pi05CheckpointError(
            f"{path} {MODEL_SIZES_KEY} and config.json disagree on {clash} ({MAPPING_FILE}, config.json): "
            "keep one"
        )
    return sizes


def _relative_step(directory: Path) -> dict[str, Any] | None:
    """The config of LeRobot's relative-actions step in policy_preprocessor.json, if there is one."""
    pre = directory / PREPROCESSOR_FILE
    for step in _read_json(pre).get("steps", []) if pre.is_file() else []:
        if isinstance(step, dict) and step.get("registry_name") == "relative_actions_processor":
            conf = step.get("config", {})
            return conf if isinstance(conf, dict) else {}
    return None


def _relative_columns(raw: dict[str, Any], directory: Path, action_dim: int) -> tuple[bool, ...]:
    """Which action columns are offsets from the state, as LeRobot 0.6.1's
    ``RelativeActionsProcessorStep._build_mask`` decides: from the step's config in
    ``policy_preprocessor.json`` (what LeRobot runs), else ``use_relative_actions``,
    ``relative_exclude_joints`` (default ``["gripper"]``) and ``action_feature_names`` of config.json.
    A column is excluded (absolute) when an exclude name equals or occurs in its action name,
    case-insensitively; without action names or exclude names every column is relative."""
    enabled = bool(raw.get("use_relative_actions", False))
    exclude = raw.get("relative_exclude_joints", ["gripper"])
    names = raw.get("action_feature_names")
    step = _relative_step(directory)
    if step is not None:
        enabled = bool(step.get("enabled", False))
        exclude, names = step.get("exclude_joints", []), step.get("action_names")
    if not enabled:
        return ()
    tokens = [str(n).lower() for n in exclude or [] if n]
    if not tokens or names is None:
        return (True,) * action_dim
    mask = [not any(t in str(n).lower() for t in tokens) for n in list(names)[:action_dim]]
    return (*mask, *([True] * (action_dim - len(mask))))


def delta_columns(
    lerobot: tuple[bool, ...], delta_actions: list[bool] | None, action_dim: int, where: Path
) -> tuple[bool, ...]:
    """The relative columns: LeRobot's (config.json / policy_preprocessor.json) or openpi's
    ``DeltaActions`` mask from pde_pi05.json ``delta_actions`` (openpi's semantics: column i < len(mask)
    is an offset from state entry i where the mask is true; columns past the mask are absolute)."""
    if delta_actions is None:
        return lerobot
    if len(delta_actions) > action_dim:
        raise Pi05CheckpointError(
            f"{where}: delta_actions has {len(delta_actions)} entries for {action_dim} action columns"
        )
    mask = (*delta_actions, *([False] * (action_dim - len(delta_actions))))
    if any(lerobot) and tuple(lerobot) != mask:
        raise Pi05CheckpointError(
            f"{where}: delta_actions {list(mask)} and LeRobot's relative actions of config.json / "
            f"{PREPROCESSOR_FILE} {list(lerobot)} disagree: keep one"
        )
    return mask if any(mask) else ()


def _check_relative(relative: tuple[bool, ...], mapping: Pi05Mapping, where: Path) -> None:
    """A relative column becomes an absolute target once the state entry of its index is added:
    the FR3 must take absolute targets and that entry must be the same quantity as the column."""
    if not any(relative):
        return
    todo = (
        "fine-tune the checkpoint on absolute actions (use_relative_actions false), or map the state "
        f"in {MAPPING_FILE} so that entry i is the quantity of action column i"
    )
    columns = ACTION_COLUMNS.get(mapping.action_space)
    if columns is None:
        raise Pi05CheckpointError(
            f"{where}: use_relative_actions (action = offset + state) with the action space "
            f"{mapping.action_space.value}, whose columns are not state entries the offsets could be "
            f"added to; relative actions need {[s.value for s in ACTION_COLUMNS]}: set action_space in "
            f"{MAPPING_FILE}, or {todo}"
        )
    wrong = [
        f"column {i} ({columns[i]}) + state entry {i} "
        f"({mapping.state_names[i] if i < len(mapping.state_names) else 'none'})"
        for i, rel in enumerate(relative)
        if rel and (i >= len(mapping.state_names) or mapping.state_names[i] != columns[i])
    ]
    if wrong:
        raise Pi05CheckpointError(
            f"{where}: use_relative_actions adds the state entry of each relative column's index "
            f"(LeRobot's AbsoluteActionsProcessorStep), which here would give {wrong}; {todo}"
        )


def _state_in_prompt(config: dict[str, Any], mapping: MappingFile, path: Path, openpi: bool) -> bool:
    """Whether the prompt holds the discretised state (π0.5 as LeRobot and most openpi configs run it)
    or not (openpi's ``discrete_state_input=False``, e.g. ``pi05_libero``): config.json's
    ``discrete_state_input`` or pde_pi05.json's ``state_in_prompt``. openpi's converter records it
    nowhere, so a converted checkpoint must say it."""
    said = {
        f"{path / 'config.json'} discrete_state_input": config.get("discrete_state_input"),
        f"{path / MAPPING_FILE} state_in_prompt": mapping.state_in_prompt,
    }
    given = {k: v for k, v in said.items() if v is not None}
    if any(not isinstance(v, bool) for v in given.values()):
        raise Pi05CheckpointError(f"{given}: true or false")
    if len(set(given.values())) > 1:
        raise Pi05CheckpointError(f"{given} disagree: keep one")
    if given:
        return bool(next(iter(given.values())))
    if openpi:
        raise Pi05CheckpointError(
            f"{path / 'config.json'} (openpi's converter) does not record whether the prompt holds the "
            "state: openpi's pi05_libero does not (discrete_state_input=False), pi05_droid and "
            f'pi05_base do. Say it in {path / MAPPING_FILE}: "state_in_prompt": false or true'
        )
    return True


def _action_names(config: dict[str, Any], directory: Path) -> list[str]:
    """The names of the checkpoint's action columns where LeRobot keeps them (config.json's
    ``action_feature_names``, the relative-actions step of policy_preprocessor.json); [] if none."""
    names = config.get("action_feature_names") or (_relative_step(directory) or {}).get("action_names")
    return [str(n) for n in names or []]


def _names_say(names: list[str]) -> ActionSpace | None:
    """The action space the column names state: ours (``ACTION_NAMES``), or 7 joint positions and
    a gripper (LeRobot's ``joint_1.pos`` ... ``gripper.pos``); None when they say neither."""
    for space, ours in ACTION_NAMES.items():
        if tuple(names) == ours:
            return space
    low = [n.lower() for n in names]
    if (
        len(low) == ACTION_DIMS[ActionSpace.JOINT_ABS]
        and all(JOINT_POSITION_NAME.search(n) for n in low[:7])
        and GRIPPER_NAME.search(low[7])
    ):
        return ActionSpace.JOINT_ABS
    return None


def decide_action_space(
    config: dict[str, Any], directory: Path, declared: ActionSpace | None, openpi: bool, dim: int
) -> tuple[ActionSpace, str]:
    """The action space and where it comes from, as far as the checkpoint states what its actions
    are: LeRobot's action names (config.json ``action_feature_names``, the relative-actions step of
    policy_preprocessor.json) and pde_pi05.json's ``action_space``. Refused: velocity-like names
    (none of the FR3's servers takes velocities: ``ActionSpace``), names that say another space than
    the file, and columns nothing names or declares (e.g. openpi's converter, whose pi05_droid gives
    joint velocities)."""
    spaces = {s.value: ACTION_NAMES[s] for s in ActionSpace}
    todo = (
        "fine-tune it on the lab's demonstrations in one of them: copy the directory without its "
        "statistics (policy_preprocessor_step_*_normalizer_processor.safetensors, assets/), write "
        f'{MAPPING_FILE} with "action_space", and run `pde learner sft --policy pi05 --init COPY` '
        "(the statistics then come from the demos)"
    )
    names = _action_names(config, directory)
    velocity = [n for n in names if VELOCITY_NAME.search(n.lower())]
    if velocity:
        raise Pi05CheckpointError(
            f"{directory}: the checkpoint acts in velocities or joint steps ({velocity}); the robot "
            f"server takes {list(spaces)} (absolute joint targets or end-effector steps), none a "
            f"velocity: {todo}"
        )
    said = _names_say(names) if names else None
    if declared is not None:
        if said is not None and said != declared:
            raise Pi05CheckpointError(
                f"{directory / MAPPING_FILE} declares action_space {declared.value}, the checkpoint's "
                f"action names {names} say {said.value}: keep the one that is true"
            )
        return declared, f"{declared.value} ({MAPPING_FILE})"
    if said is not None:
        return said, f"{said.value} (by the action names)"
    what = (
        f"names its {dim} action columns {names}, which say neither"
        if names
        else (
            f"(openpi's converter) does not record what its {dim} action columns are (openpi's "
            "pi05_droid gives 7 joint velocities and a gripper position)"
            if openpi
            else f"does not name its {dim} action columns (config.json action_feature_names)"
        )
    )
    raise Pi05CheckpointError(
        f"{directory / 'config.json'} {what}. The FR3 takes {spaces}; if the checkpoint was trained "
        f'on one of them, say which in {directory / MAPPING_FILE}: "action_space": "joint_abs" (or '
        f'"ee_delta"), with "delta_actions": [true, ..., false] if openpi\'s DeltaActions made the '
        f"joints offsets from the state; else {todo}"
    )


def check_statistics(
    stats: dict[str, np.ndarray], need: tuple[str, ...], want: int | None, where: str
) -> None:
    """The statistics a normalisation uses: one flat array each, of one length (the feature's, where
    config.json gives its shape), every value finite; else what is wrong and in which file."""
    lengths = {k: int(np.asarray(stats[k]).size) for k in need if k in stats}
    if want is not None and any(n != want for n in lengths.values()):
        raise Pi05CheckpointError(
            f"{where}: statistics of lengths {lengths}, config.json gives the feature {want} entries: "
            "the statistics are of another dataset or feature; recompute them for the checkpoint's"
        )
    if len(set(lengths.values())) > 1:
        raise Pi05CheckpointError(f"{where}: statistics of different lengths {lengths}; recompute them")
    bad = {k: np.flatnonzero(~np.isfinite(np.asarray(stats[k], dtype=np.float64))).tolist() for k in lengths}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        raise Pi05CheckpointError(
            f"{where}: statistics not finite (NaN or inf) at entries {bad}: the actions would be NaN "
            "(a constant or empty column in the dataset?); recompute them"
        )


def _feature_dim(config: dict[str, Any], group: str, key: str) -> int | None:
    shape = config.get(group, {}).get(key, {}).get("shape") if isinstance(config.get(group), dict) else None
    return int(np.prod(shape)) if isinstance(shape, list) and shape else None


def read_checkpoint(directory: str | Path, stats_from_demos: bool = False) -> Pi05Checkpoint:
    """Read and check a checkpoint directory (not the weights); raises Pi05CheckpointError.
    ``stats_from_demos`` (SFT): a directory without statistics is accepted, its statistics unknown
    (``FeatureStats.known`` False) until the demonstrations give them."""
    path = Path(directory)
    if not path.is_dir():
        raise Pi05CheckpointError(
            f"π0.5 checkpoint directory {path} does not exist; download the checkpoint (e.g. "
            "lerobot/pi05_base) on a machine with internet access and copy the folder there"
        )
    if not (path / "config.json").is_file():
        raise Pi05CheckpointError(f"{path} has no config.json (LeRobot's PI05Config)")
    if not (path / WEIGHTS_FILE).is_file():
        raise WeightsNotLoadedError(f"{path} has no {WEIGHTS_FILE}: refusing to run an uninitialised π0.5")
    raw = _read_json(path / "config.json")
    if raw.get("type", "pi05") != "pi05":
        raise Pi05CheckpointError(f"{path / 'config.json'} is a {raw.get('type')!r} policy, not pi05")
    openpi = "action_horizon" in raw and "input_features" not in raw
    if openpi:
        raw = {**{ours: raw[theirs] for theirs, ours in OPENPI_FIELDS.items() if theirs in raw}, **raw}
    raw = raw | _model_sizes(path, raw)
    try:
        config = Pi05Config.from_json_dict(raw)
    except (TypeError, ValueError) as e:
        raise Pi05CheckpointError(f"{path / 'config.json'}: {e}") from e
    image_keys = image_inputs(raw, openpi)
    if not image_keys:
        raise Pi05CheckpointError(f"{path / 'config.json'} names no VISUAL input_features (the cameras)")
    modes = raw.get("normalization_mapping", {})
    said = read_mapping_file(path, image_keys)
    in_prompt = _state_in_prompt(raw, said, path, openpi)
    known = True
    try:
        state_stats, action_stats, source = _read_stats(path)
    except MissingStatsError:
        if not stats_from_demos:
            raise
        # A base checkpoint (e.g. lerobot/pi05_base) has no statistics of the lab's robot: SFT
        # computes them from the demonstrations (Pi05Policy.set_statistics_from); until then none.
        known = False
    if known:
        from_openpi = source.suffix == ".json"
        stats = []
        for feature, group, key, found in (
            ("STATE", "input_features", "observation.state", state_stats),
            ("ACTION", "output_features", "action", action_stats),
        ):
            mode = modes.get(feature, "QUANTILES")
            where = f"{source} ({feature.lower()})"
            if mode not in NORM_STATS:
                raise Pi05CheckpointError(
                    f"{where}: normalisation mode {mode!r} is not supported; use {NORM_MODES}"
                )
            check_statistics(found, NORM_STATS[mode], _feature_dim(raw, group, key), where)
            stats.append(FeatureStats.from_stats(mode, found, where, from_openpi))
        state, action = stats
        if state.dim > config.max_state_dim or action.dim > config.max_action_dim:
            raise Pi05CheckpointError(
                f"{source}: state {state.dim} / action {action.dim} entries exceed the model's "
                f"{config.max_state_dim} / {config.max_action_dim}"
            )
        state_dim, action_dim = state.dim, action.dim
    else:
        state_dim = len(said.state_names) if said.state_names is not None else len(STATE_VECTOR_NAMES)
        action_dim = _feature_dim(raw, "output_features", "action") or 0
    space, space_source = decide_action_space(raw, path, said.action_space, openpi, action_dim)
    action_dim = ACTION_DIMS[space] if not known else action_dim
    cameras, camera_notes = resolve_cameras(image_keys, said.cameras, openpi, path / MAPPING_FILE)
    state_names = tuple(said.state_names) if said.state_names is not None else default_state_names(state_dim)
    mapping = Pi05Mapping(state_names, cameras, space)
    mapping.check(state_dim, len(image_keys), action_dim)
    relative = delta_columns(
        _relative_columns(raw, path, action_dim), said.delta_actions, action_dim, path / MAPPING_FILE
    )
    _check_relative(relative, mapping, path / "config.json")
    if not known:
        state, action = FeatureStats.unknown(len(state_names)), FeatureStats.unknown(action_dim)
    tokenizer_json = _find_tokenizer(path).read_text()
    offsets = [i for i, r in enumerate(relative) if r]
    log.info(
        "π0.5 %s: cameras %s; actions %s%s",
        path,
        ", ".join(camera_notes),
        space_source,
        f", columns {offsets} offsets from the state" if offsets else "",
    )
    return Pi05Checkpoint(
        path, config, image_keys, state, action, mapping, tokenizer_json, relative, in_prompt
    )


# The VLM's token embedding and its tied ``lm_head``: a LeRobot file holds both (``model.`` prefixed);
# openpi's converter (``safetensors.torch.save_model``, which keeps one name of tied storage) only
# ``paligemma_with_expert.paligemma.lm_head.weight``, unprefixed. LeRobot fills the embedding from
# either spelling (``_fix_pytorch_state_dict_keys``).
EMBED_KEY = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
TIED_LM_HEAD_KEY = "paligemma_with_expert.paligemma.lm_head.weight"
_UNUSED = {k.removeprefix("model.") for k in UNUSED_CHECKPOINT_KEYS}


def load_weights(model: Pi05Model, weights: Path) -> None:
    """LeRobot π0.5 weights (or openpi-converted ones) into ``model``; every parameter must be
    covered and nothing unknown left. (LeRobot prints a warning and keeps random weights when
    loading fails: never here.)"""
    try:
        flat = load_file(str(weights))
    except Exception as e:  # safetensors raises its own error types for damaged files
        raise WeightsNotLoadedError(f"{weights} does not load as safetensors: {e}") from e
    sd: dict[str, torch.Tensor] = {}
    tied_head: torch.Tensor | None = None
    for key, value in flat.items():
        name = key.removeprefix("model.")
        if name == TIED_LM_HEAD_KEY:
            tied_head = value
        if name in _UNUSED:
            continue
        # transformers >= 5.2x saves SigLIP without its ``vision_model`` level.
        if ".vision_tower." in name and ".vision_tower.vision_model." not in name:
            name = name.replace(".vision_tower.", ".vision_tower.vision_model.")
        name = name.replace("action_time_mlp_", "time_mlp_")  # openpi's older names, as LeRobot maps them
        sd[name] = value
    if EMBED_KEY not in sd and tied_head is not None:
        sd[EMBED_KEY] = tied_head
    own = model.state_dict()
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    wrong = sorted(k for k in set(own) & set(sd) if own[k].shape != sd[k].shape)
    if missing or unexpected or wrong:
        raise WeightsNotLoadedError(f"{weights}: {_weights_mismatch(own, sd, missing, unexpected, wrong)}")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in sd.items()})


def _weights_mismatch(
    own: dict[str, torch.Tensor],
    sd: dict[str, torch.Tensor],
    missing: list[str],
    unexpected: list[str],
    wrong: list[str],
) -> str:
    """What does not fit, and the likely cause: other sizes (the variants in config.json) when shapes
    differ or whole layers are missing or extra; else a file that lacks (or adds) the named weights."""
    parts = []
    if missing:
        named = [f"{k} (or its tied copy {TIED_LM_HEAD_KEY})" if k == EMBED_KEY else k for k in missing]
        parts.append(f"lacks {len(missing)} weight(s) the model needs: {named[:3]}")
    if unexpected:
        parts.append(f"holds {len(unexpected)} weight(s) π0.5 does not have: {unexpected[:3]}")
    if wrong:
        shapes = [f"{k} {tuple(sd[k].shape)}, config.json gives {tuple(own[k].shape)}" for k in wrong[:3]]
        parts.append(f"{len(wrong)} weight(s) of another shape: {shapes}")
    other_size = bool(wrong) or any(".layers." in k for k in (*missing, *unexpected))
    hint = (
        "the weights are of another size than config.json says: check paligemma_variant / "
        "action_expert_variant / max_action_dim there against the weights"
        if other_size
        else "the file is incomplete or from another model: copy (or convert) model.safetensors again"
    )
    return f"{'; '.join(parts)}. {hint}"


def write_checkpoint(
    directory: str | Path,
    model: Pi05Model,
    image_keys: tuple[str, ...],
    state_stats: dict[str, np.ndarray],
    action_stats: dict[str, np.ndarray],
    tokenizer_json: str,
    mapping: Pi05Mapping | None = None,
) -> Path:
    """A checkpoint directory in LeRobot's layout as this project reads it (QUANTILES statistics),
    e.g. random weights at a small size for tests. What LeRobot itself loads: pi05_export.py."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    raw = model.config.to_json_dict()
    raw["input_features"] = {
        k: {"type": "VISUAL", "shape": [3, *raw["image_resolution"]]} for k in image_keys
    }
    raw["input_features"]["observation.state"] = {"type": "STATE", "shape": [len(state_stats["q01"])]}
    action_dim = len(action_stats["q01"])
    raw["output_features"] = {"action": {"type": "ACTION", "shape": [action_dim]}}
    # The action space stated as LeRobot states it, by the columns' names (ours).
    space = mapping.action_space if mapping else {d: s for s, d in ACTION_DIMS.items()}.get(action_dim)
    if space is not None:
        raw["action_feature_names"] = list(ACTION_NAMES[space])
    raw["normalization_mapping"] = {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}
    (path / "config.json").write_text(json.dumps(raw, indent=1))
    save_file(
        {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
        str(path / WEIGHTS_FILE),
    )
    stats = {f"observation.state.{k}": np.asarray(v, np.float32) for k, v in state_stats.items()}
    stats |= {f"action.{k}": np.asarray(v, np.float32) for k, v in action_stats.items()}
    save_numpy(stats, str(path / STATS_FILE))
    (path / "tokenizer.json").write_text(tokenizer_json)
    if mapping is not None:
        (path / MAPPING_FILE).write_text(json.dumps(mapping.to_file_dict(image_keys), indent=1))
    return path
