"""SFT under DDP or FSDP with 2 CPU processes (torchrun, gloo) equals SFT in one process with the
same global batch, seeds and demos, for the small policy and the tiny π0.5; rank 0 alone writes the
checkpoint."""

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch

from learner.checkpoints import CheckpointStore
from learner.distributed import DistributedContext
from learner.main import main
from learner.policies.pi05 import Pi05Policy, load_pi05
from learner.policies.vla import SmallVLAPolicy
from learner.sft import build_dataset, run_sft, select_demo_files, train_sft
from pde_contract.job_status import read_status
from tests.learner.pi05_tiny import make_tiny_checkpoint
from tests.learner.sft_ddp_worker import configs, run_ranks
from tests.learner.test_pi05_cli import _demos

STEPS = 6


# batch 5 over 2 ranks: uneven shares (3 + 2 rows), weighted so the average is the whole batch's
@pytest.mark.parametrize(("head", "batch"), [("flow", 5), ("flow", 8), ("gaussian", 6)])
def test_sft_on_two_ranks_equals_one_process(demo_dir, tmp_path, head, batch):
    vla, cfg = configs(head, batch, STEPS)
    single_path, single, _ = run_sft(demo_dir, tmp_path / "single", vla, cfg)

    out = tmp_path / "ranks"
    run_ranks(demo_dir, tmp_path / "ddp", head, batch, STEPS, out)
    ranks = [json.loads((tmp_path / f"ranks.rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["cached"] for r in ranks] == [False, False]
    # every rank reports the whole batch's loss: the single process's, step by step
    for r in ranks:
        assert r["metrics"]["sft_loss_first"] == pytest.approx(single["sft_loss_first"], rel=1e-5)
        assert r["metrics"]["sft_loss_last"] == pytest.approx(single["sft_loss_last"], rel=1e-4)

    written = sorted(p.name for p in (tmp_path / "ddp").iterdir())
    assert written == [single_path.name]  # one checkpoint, rank 0's
    got = CheckpointStore.load(tmp_path / "ddp" / single_path.name).policy
    want = CheckpointStore.load(single_path).policy
    assert isinstance(got, SmallVLAPolicy) and isinstance(want, SmallVLAPolicy)
    got_w, want_w = got.state_dict(), want.state_dict()
    assert set(got_w) == set(want_w)
    # Adam's first steps amplify float rounding in tiny gradients (up to ~3e-5 seen here, where
    # training moved the weights by ~1e-2): a small absolute tolerance, not bitwise equality
    for name, value in want_w.items():
        torch.testing.assert_close(got_w[name], value, atol=1e-4, rtol=1e-4, msg=name)
    # training moved the network: equal weights are not two untouched copies
    torch.manual_seed(cfg.seed)
    fresh = SmallVLAPolicy(vla).state_dict()
    assert sum(not torch.allclose(v, fresh[k]) for k, v in want_w.items() if k in fresh) > 10

    # a second job finds rank 0's checkpoint: every rank returns it untrained
    run_ranks(demo_dir, tmp_path / "ddp", head, batch, STEPS, out)
    again = [json.loads((tmp_path / f"ranks.rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["cached"] for r in again] == [True, True]


def test_a_batch_smaller_than_the_ranks_stops_every_rank(demo_dir):
    """Rank 0 (which would get the one row) refuses too, before any collective: rank 1 refusing
    alone left rank 0 waiting for it in DDP's first broadcast."""
    vla, cfg = configs("flow", 1, 1)
    policy = SmallVLAPolicy(vla)
    data = build_dataset(policy, select_demo_files(demo_dir, 4))
    for rank in (0, 1):
        ctx = DistributedContext(rank, 2, rank, torch.device("cpu"))
        with pytest.raises(ValueError, match="a batch of 1 samples cannot be split over 2 ranks"):
            train_sft(policy, data, cfg, ctx=ctx)


def _one_process_then_two_ranks(
    args: Callable[[str], list[str]], capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``pde learner *args("single")`` in this process, then ``*args("ranks")`` under torchrun on 2
    ranks: what each printed. Rank 0 alone prints; it trained anew, from the same first loss."""
    assert main(args("single")) == 0
    single = json.loads((out := capsys.readouterr().out)[out.index("{") :])
    proc = run_ranks("learner", *args("ranks"), module="pde")
    assert proc.stdout.count('"checkpoint"') == 1
    ranks = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert ranks["cached"] is False
    assert ranks["sft_loss_first"] == pytest.approx(single["sft_loss_first"], rel=1e-5)
    return single, ranks


def test_sft_command_under_torchrun_writes_once_and_equals_one_process(demo_dir, tmp_path, capsys):
    def args(ckpt: str) -> list[str]:
        return [
            "sft",
            "--demos",
            str(demo_dir),
            "--checkpoints",
            str(tmp_path / ckpt),
            "--steps",
            "3",
            "--batch-size",
            "5",
            "--image-size",
            "16",
            "--chunk-len",
            "4",
            "--status-file",
            str(tmp_path / f"{ckpt}.status.json"),
        ]

    single, ranks = _one_process_then_two_ranks(args, capsys)
    status = read_status(tmp_path / "ranks.status.json")
    assert status is not None and (status.phase, status.step, status.checkpoint) == (
        "done",
        3,
        ranks["checkpoint"],
    )
    got = CheckpointStore.load(ranks["checkpoint"]).policy.state_dict()
    want = CheckpointStore.load(single["checkpoint"]).policy.state_dict()
    assert set(got) == set(want)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize("engine", ["ddp", "fsdp"])
def test_pi05_sft_command_under_torchrun_equals_one_process(tmp_path, capsys, engine):
    init = make_tiny_checkpoint(tmp_path / "pi05")
    (tmp_path / "demos").mkdir()
    _demos(load_pi05(init), tmp_path / "demos")  # 4 samples

    def args(ckpt: str) -> list[str]:
        # a batch of 3 over 2 ranks: uneven shares (2 + 1 rows); under FSDP every SigLIP and Gemma
        # block is a unit of its own and the value head (no SFT gradient) sits in the root unit
        argv = ["sft", "--policy", "pi05", "--init", str(init), "--demos", str(tmp_path / "demos")]
        argv += ["--checkpoints", str(tmp_path / ckpt), "--steps", "3", "--batch-size", "3"]
        return [*argv, "--pi05-flow-steps", "2", "--device", "cpu", "--distributed", engine]

    single, ranks = _one_process_then_two_ranks(args, capsys)
    assert ranks["sft_loss_last"] == pytest.approx(single["sft_loss_last"], rel=1e-4)
    assert sorted(p.name for p in (tmp_path / "ranks").iterdir()) == ["policy-000000.pt"]

    got = CheckpointStore.load(ranks["checkpoint"]).policy
    want = CheckpointStore.load(single["checkpoint"]).policy
    # under FSDP: rank 0 gathered the whole weights into a plain policy, the single-process format
    assert isinstance(got, Pi05Policy) and isinstance(want, Pi05Policy)
    got_w, want_w = got.state_dict(), want.state_dict()
    assert set(got_w) == set(want_w)
    for name, value in want_w.items():  # measured: at most 3e-7 apart, ddp and fsdp alike
        torch.testing.assert_close(got_w[name], value, atol=2e-6, rtol=1e-4, msg=name)
    # training moved the network (beyond the value head, which SFT leaves as it was initialised)
    base = load_pi05(init).state_dict()
    assert sum(not torch.equal(v, base[k]) for k, v in want_w.items() if "value_head" not in k) > 50
