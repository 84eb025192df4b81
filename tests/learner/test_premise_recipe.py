"""The language-premise recipe's evaluation helpers (bench/bench_premise.py)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_premise", ROOT / "bench" / "bench_premise.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # its dataclasses look their module up by name (string annotations under `from __future__`)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_wilson_interval_known_values():
    wilson = _bench().wilson_interval  # bench/_common.py, shared by the learning benchmarks
    assert wilson(0, 40) == (0.0, pytest.approx(0.0876, abs=1e-4))
    low, high = wilson(1, 50)
    assert low == pytest.approx(0.0035, abs=1e-4) and high == pytest.approx(0.1050, abs=1e-4)
    low, high = wilson(25, 50)
    assert low == pytest.approx(1 - high) and low < 0.5 < high
    assert wilson(0, 0) == (0.0, 1.0)


def test_proposer_wordings_are_what_the_offline_proposer_sends_first():
    from supervisor.proposers import RandomParaphraseProposer

    bench = _bench()
    got = bench.proposer_wordings(bench.TARGET_PROMPT, range(2), 5)
    first = RandomParaphraseProposer(0).paraphrase(bench.TARGET_PROMPT)
    assert got[0] == first and len(got) == len(set(got)) and 5 < len(got) <= 10
    assert bench.TARGET_PROMPT not in got
