"""pde_contract.environment: a PDE_* variable no setting reads is refused at the start of every
`pde` command with the nearest known name; the list of known names is current; every name the
compose files, env example and docs set is a known one."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from pde.environment import OUT, collect, render
from pde_contract.environment import UnknownVariable, check_environment, is_known, unknown_variables
from tests.helpers import REPO_ROOT, pde_command


def test_the_written_list_is_current() -> None:
    assert OUT.read_text() == render(*collect()), "run `python -m pde.environment --write` and commit it"


def test_a_misspelt_variable_is_named_with_the_nearest_known_one() -> None:
    environ = {
        "PDE_ROBOT_WORKSPACE_MIN": "[0.2, -0.3, 0.05]",
        "PDE_FRANKA_RELATIVE_DYNAMIC_FACTOR": "0.1",
        "PDE_DATABASE_URL": "sqlite:///x.db",  # shared: read by the loop, supervisor and page
        "PDE_LOOP_PPO__CLIP_COEF": "0.2",  # nested
        "pde_ui_port": "8001",  # pydantic-settings reads names case-insensitively
        "PDE_ROBOT_LINK_SERVER_KEY": "/keys/server.key",  # read outside a settings class
        "HOME": "/root",  # not ours
    }
    assert unknown_variables(environ) == [
        UnknownVariable("PDE_FRANKA_RELATIVE_DYNAMIC_FACTOR", "PDE_FRANKA_RELATIVE_DYNAMICS_FACTOR"),
        UnknownVariable("PDE_ROBOT_WORKSPACE_MIN", "PDE_ROBOT_WORKSPACE_MIN_M"),
    ]
    with pytest.raises(
        ValueError, match=r"PDE_ROBOT_WORKSPACE_MIN: did you mean PDE_ROBOT_WORKSPACE_MIN_M\?"
    ):
        check_environment(environ)
    assert unknown_variables({"PDE_QQQQQQQQ": "1"}) == [UnknownVariable("PDE_QQQQQQQQ", None)]


@pytest.mark.parametrize("command", ["robot-server", "loop", "learner", "supervisor", "ui", "doctor"])
def test_every_service_refuses_an_unknown_variable_at_start(command: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PDE_")}
    env["PDE_FRANKA_RELATIVE_DYNAMIC_FACTOR"] = "0.1"
    done = subprocess.run(
        pde_command(command, "--help"), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done
    assert (
        "PDE_FRANKA_RELATIVE_DYNAMIC_FACTOR: did you mean PDE_FRANKA_RELATIVE_DYNAMICS_FACTOR?" in done.stderr
    )
    assert done.stdout == ""  # refused before the service printed anything


def _files_that_set_variables() -> list[str]:
    globs: tuple[str, ...] = ("docker-compose*.yml", "docker/*", ".env.example", "docs/*.md", "README.md")
    globs += ("config/*",)
    globs += ("scripts/*", "Makefile", ".ci/*")
    return sorted(str(p.relative_to(REPO_ROOT)) for g in globs for p in REPO_ROOT.glob(g) if p.is_file())


def test_every_variable_the_stacks_and_docs_name_is_known() -> None:
    files = _files_that_set_variables()
    assert "docker-compose.robot.yml" in files and ".env.example" in files and "docs/lab-setup.md" in files
    unknown = {
        f"{name} ({path})"
        for path in files
        # A name ending in _ is a prefix ("PDE_ROBOT_<FIELD>", "PDE_LOOP_PPO__*"), not a variable.
        for name in re.findall(r"PDE_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_<*])", (REPO_ROOT / path).read_text())
        if not is_known(name)
    }
    assert not unknown, sorted(unknown)
