"""``pde <service> [args]``: dispatches to each service's own ``main(argv)``.

Services are imported lazily so ``pde robot-server`` on the robot PC never imports torch, and the
learner image never imports franky. Each service parses its own arguments.
"""

from __future__ import annotations

import importlib
import sys

from pde_contract.environment import UnknownVariableError, check_environment

# subcommand -> (module with main(argv) -> int, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "robot-server": ("robot_server.main", "stream cameras and state, execute action chunks (sim or FR3)"),
    "learner": ("learner.main", "policy, rollouts, mixed-prompt PPO and checkpoints"),
    "supervisor": ("supervisor.main", "VLM summaries, success proposals, prompt proposals and the pool"),
    "ui": ("operator_ui.main", "operator web page: live view, labels, e-stop, curves"),
    "loop": ("learner.loop.main", "the PDE episode loop (Algorithm 1)"),
    "record": ("teleop.main", "demonstrations on the arm: SpaceMouse, keyboard or hand guiding takes"),
    "sim": ("robot_server.sim.main", "simulated tabletop tools: tasks, expert demos, pictures"),
    "data": ("pde_storage.main", "dataset tools: episode files to a LeRobotDataset (export-lerobot)"),
    "calibrate": ("calibration.main", "camera intrinsics and hand-eye calibration"),
    "demo": ("pde.demo", "the whole loop on one machine in simulation"),
    "report": ("pde.report", "one HTML page per run: curves, per-prompt table, episode videos"),
    "keys": ("pde.keys", "CURVE key pairs for the authenticated robot link"),
    "health": ("pde.health", "exit 0 when a service is healthy (compose healthchecks)"),
    "doctor": ("pde.doctor.main", "robot PC checks: RT kernel and limits, FCI NIC, firewall, cameras"),
}


def _usage() -> str:
    lines = ["usage: pde <command> [args]   (pde <command> --help for its options)", "", "commands:"]
    lines += [f"  {name:<14} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"pde: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:  # before any service reads its settings: a misspelt variable would be silently ignored
        check_environment()
    except UnknownVariableError as e:
        print(f"pde {name}: {e}", file=sys.stderr)
        return 2
    module_name, _ = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        print(
            f"pde {name}: cannot import {module_name} ({e}). Install the extra for this service, "
            "e.g. `pip install -e .[all]`, or run `make demo` which sets up .venv/.",
            file=sys.stderr,
        )
        return 2
    result: int = module.main(rest)
    return result
