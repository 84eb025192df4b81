"""Writes pde_contract/environment_names.py, the list of every ``PDE_*`` variable the project
reads, from the settings classes (each setting's one home) and the few variables read outside them.

    python -m pde.environment --write     # after adding or renaming a setting
    python -m pde.environment             # print the list

The classes are imported here, on a machine with every extra installed (tests/contract/
test_environment.py checks the written list is current); the services read only the written list,
so the robot PC never imports the learner's settings (torch) to check its environment.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from pde_contract.environment import settings_variables

# (module, class) of every settings class that reads PDE_* variables.
SETTINGS_CLASSES = (
    ("robot_server.settings", "RobotServerSettings"),
    ("robot_server.robots.franka.config", "FrankaConfig"),
    ("learner.main", "LearnerSettings"),
    ("learner.actor", "ActorSettings"),
    ("learner.loop.settings", "LoopSettings"),
    ("supervisor.settings", "SupervisorSettings"),
    ("operator_ui.settings", "UISettings"),
    ("teleop.settings", "TeleopSettings"),
    ("pde.demo", "DemoSettings"),
)

# Variables read outside a settings class: (module, constant holding the name), resolved at write time.
CONSTANTS = (
    ("pde_contract.link", "ENV_SERVER_KEY"),
    ("pde_contract.link", "ENV_CLIENT_KEY"),
    ("pde_contract.link", "ENV_SERVER_SECRET_KEY"),
    ("pde_contract.link", "ENV_CLIENTS_DIR"),
    ("robot_server.config_file", "ENV_CONFIG_FILE"),
)

# Read by name outside the settings classes, with their reader.
OTHER_VARIABLES = (
    "PDE_SUPERVISOR_ROLLOUTS_N",  # supervisor/main.py: warns that the loop's setting is the one read
    "PDE_LOOP_RATIO_VARIANT",  # learner/loop/settings.py (_MOVED_TO_PPO): refused with the new name
    "PDE_LOOP_LEARNING_RATE",
    "PDE_LOOP_VALUE_LEARNING_RATE",
    "PDE_LOOP_NOISE_LEARNING_RATE",
    "PDE_CI",  # tests/conftest.py: the CI run (its subprocesses inherit it)
    "PDE_CHECK_IMAGES",  # tests/conftest.py, tests/compose/test_images.py
    "PDE_FUZZ_REPORT",  # tests/robot_server/test_fuzz_wire.py, bench/bench_fuzz_soak.py
    "PDE_FUZZ_SEED",
    "PDE_FUZZ_MESSAGES",
    "PDE_SCREENSHOT_DIR",  # tests/operator_ui/browser.py
    "PDE_PI05_WEIGHTS",  # tests/learner/test_pi05.py
    "PDE_GPU_SESSION_TIMEOUT_S",  # bench/gpu_session.sh
    "PDE_LEROBOT_PYTHON",
)

OUT = Path(__file__).resolve().parent.parent / "pde_contract" / "environment_names.py"


def collect() -> tuple[set[str], set[str]]:
    """Every known name and open prefix, from the classes, constants and the list above."""
    names: set[str] = set(OTHER_VARIABLES)
    prefixes: set[str] = set()
    for module, cls_name in SETTINGS_CLASSES:
        n, p = settings_variables(getattr(importlib.import_module(module), cls_name))
        names |= n
        prefixes |= p
    for module, const in CONSTANTS:
        names.add(getattr(importlib.import_module(module), const))
    return names, prefixes


def render(names: set[str], prefixes: set[str]) -> str:
    lines = [
        '"""Written by ``python -m pde.environment --write``; do not edit (pde_contract/environment.py)."""',
        "",
        "KNOWN_VARIABLES: frozenset[str] = frozenset(",
        "    {",
        *(f'        "{n}",' for n in sorted(names)),
        "    }",
        ")",
        "OPEN_PREFIXES: tuple[str, ...] = ("
        + "".join(f'"{p}", ' for p in sorted(prefixes)).rstrip(", ")
        + ("," if len(prefixes) == 1 else "")
        + ")",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pde.environment", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = ap.parse_args(argv)
    text = render(*collect())
    if args.write:
        OUT.write_text(text)
        print(f"wrote {OUT}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
