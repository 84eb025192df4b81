"""A longer soak of the wire-level fuzz test: the robot server (sim backend, a real subprocess)
under several raw clients sending random, truncated, byte-flipped, wrongly typed, deeply nested,
multi-frame and oversized messages, beside a client driving chunks at the limits. Runs
``tests/robot_server/test_fuzz_wire.py`` with more messages and keeps its measured figures: one
reply per message, the measured TCP's worst excursion outside the box and per control tick, the
gripper's range.

    python bench/bench_fuzz_soak.py --messages 5000 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (sets sys.path)
from _common import write_result

from robot_server.safety import SafetyLimits

_ROOT = Path(__file__).resolve().parents[1]
_TEST = "tests/robot_server/test_fuzz_wire.py"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=5000, help="messages per fuzzing client (3 clients)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "figures.json"
        env = {
            **os.environ,
            "PDE_FUZZ_MESSAGES": str(args.messages),
            "PDE_FUZZ_SEED": str(args.seed),
            "PDE_FUZZ_REPORT": str(report),
        }
        start = time.monotonic()
        # the test's own assertions decide pass/fail; the figures are written before them
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", _TEST],
            cwd=_ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        wall_s = time.monotonic() - start
        if not report.exists():
            sys.exit(f"the fuzz test wrote no figures:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
        figures = json.loads(report.read_text())
    limits = SafetyLimits()
    result = {
        "messages_per_client": args.messages,
        "seed": args.seed,
        "test_passed": proc.returncode == 0,
        "wall_s": round(wall_s, 1),
        "per_tick_step_limit_m": limits.max_step_translation_m,
        "test_tolerances": {"box_m": 0.01, "step_m": 0.02, "gripper_m": 0.002},
        **figures,
    }
    if proc.returncode != 0:
        result["failure"] = proc.stdout[-3000:]
    write_result("fuzz_soak", result, " ".join(["python", "bench/bench_fuzz_soak.py", *sys.argv[1:]]))
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
