"""Demonstrations from the cell to SFT in the two-machine stacks, by the one documented command
(docs/teleop.md): `docker compose -f docker-compose.workstation.yml --profile record run --rm
record TASK ...`. Its compose environment, as a plain process (no Docker engine here, as in
test_compose.py): `pde record` reaches the robot stack's server (sim backend) over the CURVE link
with the recorder's key from `pde keys init`, and the take lands in the workstation's data volume,
where the learner's `pde learner sft` reads demonstrations. The terminal is a real pty."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from learner.main import LearnerSettings
from pde.keys import DEFAULT_CLIENTS
from pde.keys import init as keys_init
from pde.procs import ProcessGroup
from tests.compose.test_compose import (
    ROBOT,
    WORKSTATION,
    _service_env,
    _start_healthy,
    config,
    env_file,
    needs_compose,
)
from tests.helpers import free_port, pde_command

TASK = "put_green_container_in_bowl"
DEADLINE_S = 180.0  # generous: the sim and the client start on a loaded 2-core machine


class Terminal:
    """A process on a pty: what it printed, and keys typed into it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
        os.close(slave)
        self.seen = ""

    def expect(self, text: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while text not in self.seen:
            assert time.monotonic() < deadline, f"never printed {text!r}:\n{self.seen[-3000:]}"
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # EIO: the process closed the terminal
                    assert text in self.seen, f"exited before printing {text!r}:\n{self.seen[-3000:]}"

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self.master)


@needs_compose
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_take_recorded_in_the_workstation_stack_lands_where_sft_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys"
    keys_init(keys, list(DEFAULT_CLIENTS))
    ports = {"ROBOT_CMD_PORT": str(free_port()), "ROBOT_OBS_PORT": str(free_port())}
    env = env_file(
        tmp_path, ROBOT_BACKEND="sim", ROBOT_LINK_HOST="127.0.0.1", ROBOT_PC_HOST="127.0.0.1", **ports
    )
    robot = config(env, stack=ROBOT)["services"]["robot_server"]
    workstation = config(env, "record", WORKSTATION)["services"]
    record = workstation["record"]
    assert record["entrypoint"] == ["pde", "record"] and "command" not in record
    assert record["environment"]["PDE_ROBOT_LINK_CLIENT_KEY"] == "/keys/recorder.key_secret"
    robot_data, ws_data = tmp_path / "robot-pc-data", tmp_path / "workstation-data"
    procs = ProcessGroup(tmp_path / "logs")
    term = None
    try:
        _start_healthy(
            procs, "robot_server", robot, _service_env(robot, robot_data, keys / "robot-pc"), robot_data
        )
        # `run --rm record TASK --source guiding --takes 1 --max-take-s 2`: the entrypoint and its args.
        args = [TASK, "--source", "guiding", "--takes", "1", "--max-take-s", "2", "--seed", "0"]
        record_env = _service_env(record, ws_data, keys / "workstation")
        term = Terminal(pde_command(*record["entrypoint"][1:], *args), record_env)
        term.expect("Enter resets the arm")
        term.type("\n")
        term.expect("keep this take? [y/N]")
        term.type("y\n")
        term.expect("note (Enter for none):")
        term.type("first take in compose\n")
        term.expect(f"{TASK}: 1 kept, 0 discarded")
        assert term.proc.wait(timeout=DEADLINE_S) == 0, term.seen[-3000:]
    finally:
        if term is not None:
            term.close()
        procs.stop_all()
    # The take is in the workstation's volume, not the robot PC's ...
    takes = sorted((ws_data / "demos").rglob("*"))
    assert any(p.is_file() for p in takes), takes
    assert not (robot_data / "demos").exists()
    # ... where the workstation's learner (`pde learner sft`) reads demonstrations.
    for k in [k for k in os.environ if k.startswith("PDE_")]:
        monkeypatch.delenv(k)
    learner_env = _service_env(workstation["learner"], ws_data, keys / "workstation")
    for k, v in learner_env.items():
        if k.startswith("PDE_"):
            monkeypatch.setenv(k, v)
    assert Path(LearnerSettings().demos) == ws_data / "demos"
