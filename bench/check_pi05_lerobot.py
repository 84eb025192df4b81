"""π0.5 between this project and LeRobot 0.6.1, both ways, with LeRobot itself on the other side.

Run in a Python 3.12 venv with ``lerobot[pi]==0.6.1`` (docs/pi05.md says how to build one); it calls
this checkout's own venv for our side (``--ours ...``, the same file):

    /work/lerobot-venv/bin/python bench/check_pi05_lerobot.py [--pde-python .venv/bin/python]

1. **Our export into LeRobot**: our side makes a tiny random π0.5 (7 joint targets + gripper,
   ``use_relative_actions`` with the gripper absolute, a constant state entry, LoRA adapters with
   random weights) and stores it as a policy checkpoint; ``pde learner export-policy --format
   lerobot --device cpu`` writes it; LeRobot loads that directory as written:
   ``PI05Policy.from_pretrained(DIR)`` (every weight compared with the file: LeRobot keeps random
   weights after a printed warning when loading fails) and ``make_pre_post_processors(config,
   DIR)`` (its pipeline from policy_preprocessor.json / policy_postprocessor.json and the
   statistics files). Both sides get the same two observations (images at the model's size, the
   raw state, the task) and the same noise: LeRobot's prompt tokens, ``predict_action_chunk``
   (through its postprocessor) and ``select_action``'s first action against ours.
2. **LeRobot's save into ours**: LeRobot builds a tiny random ``PI05Policy`` (its own camera and
   action names, relative actions, MEAN_STD actions) and writes it with ``save_pretrained`` and its
   π0.5 processors' ``save_pretrained``; we add what LeRobot does not write and nothing is
   downloaded for (``tokenizer.json``; ``pde_pi05.json`` with the two tiny sizes LeRobot has no
   field for), load it with ``load_pi05`` (``--init DIR``) and compare chunks as in 1. The JSON and
   statistics files LeRobot wrote are kept in tests/fixtures/pi05_lerobot/ for the suite.
3. **An empty-camera checkpoint**: LeRobot saves one with a wrist camera and ``empty_cameras=1``
   (its config.json lists ``empty_camera_0``, which LeRobot always masks); ours must leave that input
   absent (before issue 36 it fed it the external camera) and give LeRobot's chunk.
4. **Velocity and unnamed actions**: LeRobot saves checkpoints whose 8 action columns are named
   ``dq_1`` ... ``gripper`` or not named at all; LeRobot loads them, ours refuses both with what to
   write. Declaring ``"action_space": "joint_abs"`` in ``pde_pi05.json`` (what the refusal asks for)
   loads the unnamed one and still refuses the ``dq_*`` one.
5. **An openpi DeltaActions conversion**: a LeRobot save with relative joints and an absolute
   gripper (QUANTILES) rewritten as openpi's converter leaves a checkpoint (its config.json, weights
   without ``model.``, ``assets/<id>/norm_stats.json``) with ``pde_pi05.json`` declaring
   ``joint_abs`` and openpi's ``delta_actions`` mask: ours against LeRobot's relative actions on the
   original (openpi adds 1e-6 to each range where LeRobot does not), and, for contrast, the same
   conversion declared ``joint_abs`` alone (the offsets sent as targets).

Tiny sizes: LeRobot builds only its full-size Gemma variants and PaliGemma's SigLIP So400m with a
257152-token vocabulary; here its ``get_gemma_config``, ``PI05Config``'s variant check and the
PaliGemma/Gemma constructors are given our tiny sizes (``dummy`` variants, one SigLIP layer, a
512-token vocabulary; read from our side). Nothing is downloaded: the tokenizer is our tests'
word-level one (tests/learner/pi05_tiny.py), handed to LeRobot's tokenizer step as an object
(``preprocessor_overrides``). Float32 on the CPU.

Writes bench/results/pi05_lerobot_roundtrip.json (versions included); exits 1 when a chunk differs
by more than ``--tolerance``. Not part of ``make test``: it needs the LeRobot venv.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import versions  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent
RESULT = REPO / "bench" / "results" / "pi05_lerobot_roundtrip.json"
FIXTURE = REPO / "tests" / "fixtures" / "pi05_lerobot"
FIXTURE_FILES = (
    "config.json",
    "policy_preprocessor.json",
    "policy_postprocessor.json",
    "policy_preprocessor_step_3_normalizer_processor.safetensors",
    "policy_postprocessor_step_0_unnormalizer_processor.safetensors",
)
PROMPTS = ["put the green container in the bowl", "put the green container in front of the camera"]
SEED = 3
# Direction 2: LeRobot's names, as a LeRobot dataset of a 7-joint arm would give them.
LEROBOT_IMAGE_KEYS = ("observation.images.front", "observation.images.wrist")
LEROBOT_ACTION_NAMES = [*(f"joint_{i}.pos" for i in range(1, 8)), "gripper.pos"]


# --- our side (this project's venv) ------------------------------------------------------------------


def ours_make(work: Path) -> None:
    """A tiny random π0.5 policy checkpoint in ``work/checkpoints`` (what export-policy reads), the
    tiny sizes LeRobot must build (``work/sizes.json``) and the tokenizer (``work/tokenizer.json``)."""
    import torch
    from safetensors.numpy import load_file, save_file

    from learner.checkpoints import CheckpointStore
    from learner.policies.pi05 import Pi05Options, load_pi05
    from learner.policies.pi05_checkpoint import STATS_FILE
    from tests.learner.pi05_tiny import JOINT_ACTION_NAMES, make_joint_checkpoint, tiny_tokenizer_json

    relative = {"use_relative_actions": True, "action_feature_names": JOINT_ACTION_NAMES}
    src = make_joint_checkpoint(work / "source", relative, seed=1)
    stats = load_file(str(src / STATS_FILE))  # the gripper's state entry constant: q01 == q99
    stats["observation.state.q01"][7] = stats["observation.state.q99"][7] = 0.04
    save_file(stats, str(src / STATS_FILE))
    policy = load_pi05(src, Pi05Options(trainable="lora", lora_rank=2))
    torch.manual_seed(2)
    with torch.no_grad():
        for name, p in policy.lora.named_parameters():
            if name.endswith(".B"):  # B starts at zero: random, so that merging matters
                p.normal_(0.0, 0.5)
    CheckpointStore(work / "checkpoints").save(policy, 1)
    (work / "sizes.json").write_text(json.dumps(lerobot_sizes(policy.config), indent=1))
    (work / "tokenizer.json").write_text(tiny_tokenizer_json())


def lerobot_sizes(cfg: Any) -> dict[str, Any]:
    """Our ``Pi05Config``'s sizes as ``teach_lerobot_tiny_sizes`` takes them (sizes.json)."""
    from learner.policies.pi05_model import GEMMA_VARIANTS, SIGLIP_VARIANTS

    return {
        "gemma": {v: vars(GEMMA_VARIANTS[v]) for v in (cfg.paligemma_variant, cfg.action_expert_variant)},
        "vision": vars(SIGLIP_VARIANTS[cfg.vision_variant]),
        "vision_variant": cfg.vision_variant,
        "vocab_size": cfg.vocab_size,
        "paligemma_variant": cfg.paligemma_variant,
        "action_expert_variant": cfg.action_expert_variant,
        "image_px": cfg.image_resolution_px,
        "chunk_size": cfg.chunk_size,
        "max_state_dim": cfg.max_state_dim,
        "max_action_dim": cfg.max_action_dim,
        "tokenizer_max_length": cfg.tokenizer_max_length,
    }


def ours_act(policy_from: str, out: Path) -> None:
    """Our chunk for two observations: ``policy_from`` a policy checkpoint file (``*.pt``) or a π0.5
    directory (``--init DIR``). Writes the inputs as LeRobot takes them, the noise, tokens, actions."""
    import torch

    from learner.checkpoints import CheckpointStore
    from learner.policies.pi05 import Pi05Policy, load_pi05
    from learner.synthetic import synthetic_observation
    from pde_contract.messages import STATE_VECTOR_NAMES

    if Path(policy_from).is_dir():
        policy = load_pi05(policy_from)
    else:
        loaded = CheckpointStore.load(policy_from).policy
        assert isinstance(loaded, Pi05Policy)
        policy = loaded.eval()
    rng = np.random.default_rng(SEED)
    obs = policy.preprocess([synthetic_observation(rng, size_px=24, seq=i) for i in range(len(PROMPTS))])
    state_index = [STATE_VECTOR_NAMES.index(n) for n in policy.mapping.state_names]
    stats = policy.stats["state"].to_stats()
    if "q01" in stats:  # a constant entry at its value in the first row: LeRobot's -1, bin 0
        for i in np.flatnonzero(stats["q01"] == stats["q99"]):
            obs.state[0, state_index[i]] = float(stats["q01"][i])
    torch.manual_seed(SEED)
    sample = policy.sample(obs, PROMPTS, deterministic=True)
    ids, valid = policy.tokenize(PROMPTS, policy.normalize_state(obs.state).numpy())
    arrays: dict[str, Any] = {
        "state": obs.state[:, state_index].numpy(),
        "noise": sample.chain[:, 0],
        "actions": sample.actions,
        "tokens": ids.numpy(),
        "token_valid": valid.numpy(),
    }
    present = [k for k, cam in zip(policy.image_keys, policy.mapping.cameras, strict=True) if cam is not None]
    for j, key in enumerate(present):
        arrays[f"image:{key}"] = obs.images[:, j].numpy()
    mapped = {
        "cameras": dict(zip(policy.image_keys, policy.mapping.cameras, strict=True)),
        "action_space": policy.action_space.value,
        "offset_columns": [i for i, rel in enumerate(policy.relative) if rel],
    }
    arrays["mapping"] = np.array(json.dumps(mapped))
    np.savez(out, **arrays)


def _ours_main(argv: list[str]) -> int:
    step, *rest = argv
    if step == "make":
        ours_make(Path(rest[0]))
    elif step == "act":
        ours_act(rest[0], Path(rest[1]))
    else:
        raise SystemExit(f"--ours {step}: use make WORK or act POLICY OUT")
    return 0


# --- LeRobot's side (the LeRobot venv) ---------------------------------------------------------------


def _pde(python: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([python, *args], env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def teach_lerobot_tiny_sizes(sizes: dict[str, Any]) -> None:
    """Let LeRobot build our tiny variants: its Gemma sizes, variant check, SigLIP and vocabulary."""
    from lerobot.policies.pi05 import modeling_pi05 as m
    from lerobot.policies.pi05.configuration_pi05 import PI05Config

    gemma = {
        name: m.GemmaConfig(
            d["width"], d["depth"], d["mlp_dim"], d["num_heads"], d["num_kv_heads"], d["head_dim"]
        )
        for name, d in sizes["gemma"].items()
    }
    full_size_config, check_variants = m.get_gemma_config, PI05Config.__post_init__
    vlm_class, expert_class = m.PaliGemmaForConditionalGenerationWithPiGemma, m.PiGemmaForCausalLM
    vision, vocab = sizes["vision"], sizes["vocab_size"]

    def get_gemma_config(variant: str) -> Any:
        return gemma[variant] if variant in gemma else full_size_config(variant)

    def post_init(self: Any) -> None:  # LeRobot accepts only its two variant names
        names = self.paligemma_variant, self.action_expert_variant
        self.paligemma_variant, self.action_expert_variant = "gemma_2b", "gemma_300m"
        try:
            check_variants(self)
        finally:
            self.paligemma_variant, self.action_expert_variant = names

    def paligemma(config: Any) -> Any:  # after LeRobot set So400m's MLP and a 2048 projection
        v = config.vision_config
        v.hidden_size, v.num_hidden_layers = vision["width"], vision["depth"]
        v.num_attention_heads, v.intermediate_size = vision["num_heads"], vision["mlp_dim"]
        v.patch_size, v.projection_dim = vision["patch_px"], config.text_config.hidden_size
        config.text_config.vocab_size = config._vocab_size = config.image_token_index = vocab
        return vlm_class(config=config)

    def expert(config: Any) -> Any:
        config.vocab_size = vocab
        return expert_class(config=config)

    m.get_gemma_config, PI05Config.__post_init__ = get_gemma_config, post_init
    m.PaliGemmaForConditionalGenerationWithPiGemma, m.PiGemmaForCausalLM = paligemma, expert


def _tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(path.read_text()), pad_token="<pad>")


def lerobot_load(directory: Path, tokenizer: Path) -> tuple[Any, Any, Any, dict[str, Any]]:
    """LeRobot's policy and pipelines from ``directory`` as written (the tokenizer passed in, as
    PaliGemma's would be downloaded); every weight checked against the file."""
    import contextlib
    import io

    import torch
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy
    from safetensors.torch import load_file

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        policy = PI05Policy.from_pretrained(directory)
    file = load_file(str(directory / "model.safetensors"))
    own = policy.state_dict()
    differing = [k for k, v in file.items() if k not in own or not torch.equal(own[k], v)]
    assert not differing and set(own) <= set(file), (differing[:3], sorted(set(own) - set(file))[:3])
    pre, post = make_pre_post_processors(
        policy.config,
        pretrained_path=str(directory),
        preprocessor_overrides={"tokenizer_processor": {"tokenizer": _tokenizer(tokenizer)}},
    )
    report = {
        "from_pretrained_said": [line for line in printed.getvalue().splitlines() if "keys" in line],
        "weights_equal_to_file": len(file),
        "preprocessor_steps": [type(s).__name__ for s in pre.steps],
        "postprocessor_steps": [type(s).__name__ for s in post.steps],
        "config_device": str(policy.config.device),
    }
    return policy.eval(), pre, post, report


def _pipeline_loads(directory: Path, tokenizer: Path) -> str:
    """What LeRobot says when its pipeline is loaded from ``directory`` as written."""
    from lerobot.configs import PreTrainedConfig
    from lerobot.policies.factory import make_pre_post_processors

    overrides = {"tokenizer_processor": {"tokenizer": _tokenizer(tokenizer)}}
    config = PreTrainedConfig.from_pretrained(directory)
    try:
        make_pre_post_processors(config, pretrained_path=str(directory), preprocessor_overrides=overrides)
    except Exception as e:  # LeRobot's own error, recorded as it is
        return f"refused: {type(e).__name__}: {e}"
    return "loaded"


def lerobot_act(
    policy: Any, pre: Any, post: Any, inputs: Path, rename: dict[str, str] | None = None
) -> dict[str, Any]:
    """LeRobot's chunk for ``inputs`` (our side's file) from the same noise; ours beside it.
    ``rename``: our image input -> LeRobot's (an openpi conversion of a LeRobot save)."""
    import torch

    given = np.load(inputs)
    batch: dict[str, Any] = {
        (rename or {}).get(k.removeprefix("image:"), k.removeprefix("image:")): torch.from_numpy(
            given[k]
        ).float()
        / 255.0
        for k in given.files
        if k.startswith("image:")
    }
    batch["observation.state"] = torch.from_numpy(given["state"]).float()
    batch["task"] = list(PROMPTS)
    processed = pre(batch)
    noise = torch.from_numpy(given["noise"]).float()
    chunk = post(policy.predict_action_chunk(processed, noise=noise)).double().numpy()
    policy.reset()
    policy.model.sample_noise = lambda shape, device: noise.to(device)
    first = post(policy.select_action(processed)).double().numpy()
    tokens = processed["observation.language.tokens"].numpy()
    valid = processed["observation.language.attention_mask"].numpy()
    ours = given["actions"]
    return {
        "prompt_tokens_equal": bool(
            np.array_equal(tokens, given["tokens"]) and np.array_equal(valid, given["token_valid"])
        ),
        "lerobot_prompts": processed["task"],
        "chunk_shape": list(chunk.shape),
        "max_abs_diff_chunk": float(np.abs(chunk - ours).max()),
        "max_abs_diff_select_action_vs_our_first_row": float(np.abs(first - ours[:, 0]).max()),
        "max_abs_action": float(np.abs(ours).max()),
        "ours_mapped": json.loads(str(given["mapping"])),
        "lerobot_image_inputs_fed": sorted(k for k in batch if k.startswith("observation.images.")),
    }


def lerobot_save(
    directory: Path,
    sizes: dict[str, Any],
    tokenizer: Path,
    image_keys: tuple[str, ...] = LEROBOT_IMAGE_KEYS,
    empty_cameras: int = 0,
    action_names: list[str] | None = LEROBOT_ACTION_NAMES,
    action_norm: str = "MEAN_STD",
) -> dict[str, Any]:
    """A tiny random PI05Policy and its π0.5 pipelines, written by LeRobot's save_pretrained:
    ``image_keys`` and ``empty_cameras`` (LeRobot adds ``empty_camera_i`` inputs it always masks),
    the action names (None: unnamed) and the action normalisation (the relative offsets' stats)."""
    import torch
    from lerobot.configs import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.pi05.configuration_pi05 import PI05Config
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy
    from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors
    from lerobot.processor import tokenizer_processor

    px, state_dim, action_dim = sizes["image_px"], 8, len(LEROBOT_ACTION_NAMES)
    norm = {"MEAN_STD": NormalizationMode.MEAN_STD, "QUANTILES": NormalizationMode.QUANTILES}[action_norm]
    config = PI05Config(
        paligemma_variant=sizes["paligemma_variant"],
        action_expert_variant=sizes["action_expert_variant"],
        chunk_size=sizes["chunk_size"],
        n_action_steps=sizes["chunk_size"],
        max_state_dim=sizes["max_state_dim"],
        max_action_dim=sizes["max_action_dim"],
        image_resolution=(px, px),
        tokenizer_max_length=sizes["tokenizer_max_length"],
        use_relative_actions=True,
        relative_exclude_joints=["gripper"],
        action_feature_names=None if action_names is None else list(action_names),
        empty_cameras=empty_cameras,
        normalization_mapping={
            "VISUAL": NormalizationMode.IDENTITY,
            "STATE": NormalizationMode.QUANTILES,
            "ACTION": norm,
        },
        input_features={
            **{k: PolicyFeature(type=FeatureType.VISUAL, shape=(3, px, px)) for k in image_keys},
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_dim,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
        device="cpu",
    )
    torch.manual_seed(SEED)
    policy = PI05Policy(config)
    with torch.no_grad():
        for p in policy.parameters():  # LeRobot zero-initialises norms and adaRMS: random exercises them
            p.normal_(0.0, 0.1)
    q01 = torch.tensor([-2.8] * 7 + [0.0])
    stats = {
        "observation.state": {"q01": q01, "q99": -q01 + torch.tensor([0.0] * 7 + [0.08]), "mean": q01 * 0},
        "action": {
            "mean": torch.linspace(-0.05, 0.05, action_dim),
            "std": torch.linspace(0.02, 0.1, action_dim),
            "q01": torch.linspace(-0.3, -0.1, action_dim),
            "q99": torch.linspace(0.1, 0.25, action_dim),
        },
    }
    # LeRobot's π0.5 pipeline names PaliGemma's tokenizer, which it would download: ours instead,
    # handed over where AutoTokenizer is asked, so the file keeps LeRobot's tokenizer name.
    auto = tokenizer_processor.AutoTokenizer
    tokenizer_processor.AutoTokenizer = type(
        "Local", (), {"from_pretrained": staticmethod(lambda *a, **k: _tokenizer(tokenizer))}
    )
    try:
        pre, post = make_pi05_pre_post_processors(config, stats)
    finally:
        tokenizer_processor.AutoTokenizer = auto
    policy.save_pretrained(directory)
    pre.save_pretrained(directory)
    post.save_pretrained(directory)
    features = json.loads((directory / "config.json").read_text())["input_features"]
    return {"files": sorted(p.name for p in directory.iterdir()), "config_input_features": list(features)}


def openpi_conversion(saved: Path, out: Path, sizes: dict[str, Any], delta: bool) -> dict[str, Any]:
    """What openpi's convert_jax_model_to_pytorch.py would leave for the π0.5 LeRobot ``saved``
    (relative joints, absolute gripper: openpi's DeltaActions(make_bool_mask(7, -1)) in LeRobot's
    words): openpi's config.json (action_dim, action_horizon, the variants, precision float32; the
    tiny sizes LeRobot's defaults would give added), weights without LeRobot's ``model.`` prefix,
    the statistics as assets/<id>/norm_stats.json, and the lab's pde_pi05.json: the action space,
    the prompt with the state and, where ``delta``, the delta_actions mask."""
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True)
    weights = load_file(str(saved / "model.safetensors"))
    save_file(
        {k.removeprefix("model."): v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors")
    )
    lerobot = json.loads((saved / "config.json").read_text())
    config = {
        "action_dim": lerobot["max_action_dim"],
        "action_horizon": lerobot["chunk_size"],
        "paligemma_variant": lerobot["paligemma_variant"],
        "action_expert_variant": lerobot["action_expert_variant"],
        "precision": "float32",
    } | {k: lerobot[k] for k in ("image_resolution", "max_state_dim", "tokenizer_max_length")}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    stats = load_numpy(str(next(saved.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))))
    norm = {
        ours: {k.split(".")[-1]: v.tolist() for k, v in stats.items() if k.rsplit(".", 1)[0] == theirs}
        for ours, theirs in (("state", "observation.state"), ("actions", "action"))
    }
    (out / "assets" / "lab").mkdir(parents=True)
    (out / "assets" / "lab" / "norm_stats.json").write_text(json.dumps({"norm_stats": norm}))
    shutil.copy(saved / "tokenizer.json", out / "tokenizer.json")
    said: dict[str, Any] = {"action_space": "joint_abs", "state_in_prompt": True}
    if delta:
        said["delta_actions"] = [True] * 7 + [False]
    said["model_sizes"] = {k: sizes[k] for k in ("vision_variant", "vocab_size")}
    (out / "pde_pi05.json").write_text(json.dumps(said, indent=1))
    return {k: v for k, v in said.items() if k != "model_sizes"}


def _ours_refusal(python: str, me: str, directory: Path, out: Path) -> str:
    """What our load says of ``directory`` (the last line of its error), or "loaded"."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [python, me, "--ours", "act", str(directory), str(out)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if done.returncode == 0:
        return "loaded"
    return done.stderr.strip().splitlines()[-1]


def _lerobot_saved_for_ours(saved: Path, tokenizer: Path, sizes: dict[str, Any]) -> None:
    """What a lab adds to LeRobot's save: the tokenizer, and the two tiny sizes LeRobot has no field for."""
    shutil.copy(tokenizer, saved / "tokenizer.json")
    tiny = {k: sizes[k] for k in ("vision_variant", "vocab_size")}
    (saved / "pde_pi05.json").write_text(json.dumps({"model_sizes": tiny}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pde-python", default=str(REPO / ".venv" / "bin" / "python"), help="our venv's python")
    p.add_argument("--tolerance", type=float, default=1e-5, help="largest allowed |chunk difference|")
    p.add_argument("--keep", help="also keep the checkpoints and exports in this folder")
    p.add_argument("--ours", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)  # our side, our venv
    args = p.parse_args()
    if args.ours:
        return _ours_main(args.ours)
    import lerobot
    import torch
    import transformers

    me = str(Path(__file__).resolve())
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        _pde(args.pde_python, me, "--ours", "make", str(work))
        sizes = json.loads((work / "sizes.json").read_text())
        teach_lerobot_tiny_sizes(sizes)
        tokenizer = work / "tokenizer.json"
        # 1. our export, loaded by LeRobot as written
        export = work / "export"
        argv = ["learner", "export-policy", "--format", "lerobot", "--checkpoints", str(work / "checkpoints")]
        printed = _pde(args.pde_python, "-m", "pde", *argv, "--out", str(export), "--device", "cpu")
        checkpoint = json.loads(printed.strip().splitlines()[-1])["checkpoint"]
        _pde(args.pde_python, me, "--ours", "act", checkpoint, str(work / "ours_1.npz"))
        policy, pre, post, loaded = lerobot_load(export, tokenizer)
        ours_into_lerobot: dict[str, Any] = {
            "loaded": loaded,
            **lerobot_act(policy, pre, post, work / "ours_1.npz"),
        }
        _pde(args.pde_python, "-m", "pde", *argv, "--out", str(work / "export_cuda"))
        ours_into_lerobot["default_device_cuda_pipeline_here"] = _pipeline_loads(
            work / "export_cuda", tokenizer
        )
        # 2. LeRobot's save, loaded by ours
        saved = work / "lerobot_saved"
        written = lerobot_save(saved, sizes, tokenizer)
        _lerobot_saved_for_ours(saved, tokenizer, sizes)
        _pde(args.pde_python, me, "--ours", "act", str(saved), str(work / "ours_2.npz"))
        policy, pre, post, loaded = lerobot_load(saved, tokenizer)
        lerobot_into_ours: dict[str, Any] = {"written": written, "loaded_back_by_lerobot": loaded}
        lerobot_into_ours |= lerobot_act(policy, pre, post, work / "ours_2.npz")
        # 3. LeRobot's save with empty_cameras=1: its empty_camera_0 masked on both sides
        empty = work / "lerobot_empty_camera"
        written = lerobot_save(empty, sizes, tokenizer, ("observation.images.wrist",), empty_cameras=1)
        _lerobot_saved_for_ours(empty, tokenizer, sizes)
        _pde(args.pde_python, me, "--ours", "act", str(empty), str(work / "ours_3.npz"))
        policy, pre, post, loaded = lerobot_load(empty, tokenizer)
        empty_camera: dict[str, Any] = {
            "written": written,
            **lerobot_act(policy, pre, post, work / "ours_3.npz"),
        }
        # 4. LeRobot's saves whose actions are velocities or unnamed: refused by ours, with what to write
        refused: dict[str, Any] = {}
        declared: dict[str, str] = {}
        for case, names in (
            ("velocity_names_dq", [*(f"dq_{i}" for i in range(1, 8)), "gripper"]),
            ("unnamed_8_columns", None),
        ):
            d = work / f"lerobot_{case}"
            lerobot_save(d, sizes, tokenizer, action_names=names)
            _lerobot_saved_for_ours(d, tokenizer, sizes)
            lerobot_load(d, tokenizer)  # LeRobot itself loads it as it is
            refused[case] = _ours_refusal(args.pde_python, me, d, work / "x.npz")
            said = json.loads((d / "pde_pi05.json").read_text()) | {"action_space": "joint_abs"}
            (d / "pde_pi05.json").write_text(json.dumps(said))
            declared[case] = _ours_refusal(args.pde_python, me, d, work / "x.npz")
        velocity = {"lerobot_loads_all": True, "ours_without_pde_pi05_json": refused}
        velocity["ours_with_action_space_joint_abs_declared"] = declared
        # 5. an openpi conversion of a relative-joint π0.5 (openpi's DeltaActions), declared in
        # pde_pi05.json; LeRobot's use_relative_actions on the original is the reference
        quant = work / "lerobot_relative_quantiles"
        lerobot_save(quant, sizes, tokenizer, action_norm="QUANTILES")
        _lerobot_saved_for_ours(quant, tokenizer, sizes)
        policy, pre, post, _ = lerobot_load(quant, tokenizer)
        rename = {
            "observation.images.base_0_rgb": "observation.images.front",
            "observation.images.left_wrist_0_rgb": "observation.images.wrist",
        }
        openpi_delta: dict[str, Any] = {}
        for case, delta in (("declared_delta_actions", True), ("declared_joint_abs_only", False)):
            conv = work / f"openpi_{case}"
            said = openpi_conversion(quant, conv, sizes, delta)
            _pde(args.pde_python, me, "--ours", "act", str(conv), str(work / f"ours_5_{case}.npz"))
            openpi_delta[case] = {"pde_pi05.json": said} | lerobot_act(
                policy, pre, post, work / f"ours_5_{case}.npz", rename
            )
        FIXTURE.mkdir(parents=True, exist_ok=True)
        for name in FIXTURE_FILES:
            shutil.copy(saved / name, FIXTURE / name)
    used = versions(lerobot=lerobot, torch=torch, transformers=transformers)
    fixture_versions = {k: v for k, v in used.items() if k != "ours"}
    (FIXTURE / "versions.json").write_text(json.dumps(fixture_versions, indent=2) + "\n")
    worst = max(
        float(r[k])
        for r in (ours_into_lerobot, lerobot_into_ours, empty_camera, openpi_delta["declared_delta_actions"])
        for k in ("max_abs_diff_chunk", "max_abs_diff_select_action_vs_our_first_row")
    )
    all_refused = all("Pi05CheckpointError" in v for v in refused.values()) and (
        "Pi05CheckpointError" in declared["velocity_names_dq"] and declared["unnamed_8_columns"] == "loaded"
    )
    result = {
        "what": "a tiny random π0.5 exported by `pde learner export-policy --format lerobot` and run by "
        "LeRobot 0.6.1 (PI05Policy.from_pretrained + its saved pipelines); a tiny random π0.5 saved by "
        "LeRobot 0.6.1 and run by ours (load_pi05); same observations and noise, float32 CPU",
        "command": " ".join([sys.executable, "bench/check_pi05_lerobot.py", *sys.argv[1:]]),
        "versions": used,
        "sizes": sizes,
        "prompts": PROMPTS,
        "ours_into_lerobot": ours_into_lerobot,
        "lerobot_into_ours": lerobot_into_ours,
        "lerobot_empty_camera_into_ours": empty_camera,
        "velocity_or_unnamed_actions": velocity,
        "openpi_delta_conversion_into_ours_vs_lerobot_relative": openpi_delta,
        "tolerance": args.tolerance,
        "passed": bool(worst <= args.tolerance and all_refused),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
