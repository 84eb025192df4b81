"""What pyproject.toml asks of torch fits what the code imports and what the venv and images pin."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def _learner_torch() -> SpecifierSet:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (torch,) = (r for r in map(Requirement, extras["learner"]) if r.name == "torch")
    return torch.specifier


def test_the_learner_extra_asks_for_a_torch_with_fsdp2_in_public():
    # learner/distributed.py, which `pde learner sft` always imports, takes FSDP2 from
    # torch.distributed.fsdp: public there from torch 2.6 (pytorch#141868), before that only in
    # torch.distributed._composable.fsdp.
    source = (ROOT / "learner" / "distributed.py").read_text()
    assert "from torch.distributed.fsdp import fully_shard" in source
    spec = _learner_torch()
    assert "2.5.1" not in spec and "2.6.0" in spec


def test_the_pinned_torch_satisfies_the_learner_extra():
    pinned = (ROOT / "docker" / "constraints.txt").read_text()
    versions = re.findall(r"^torch==([0-9.]+)$", pinned, re.MULTILINE)
    assert versions
    assert all(v in _learner_torch() for v in versions)


CONSTRAINTS = ROOT / "docker" / "constraints.txt"


def _pins() -> dict[str, str]:
    """docker/constraints.txt as {canonical name: version}."""
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{line!r}: constraints pin exact versions"
            pins[canonicalize_name(req.name)] = spec.version
    return pins


def test_the_constraints_satisfy_every_requirement_of_pyproject():
    # A pin that pyproject.toml's own bounds refuse would make `make install` and the image builds
    # fail to resolve: re-pin with `make constraints`.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    pins = _pins()
    checked = 0
    for req in map(Requirement, requirements):
        version = pins.get(canonicalize_name(req.name))
        if version is not None:
            assert req.specifier.contains(version, prereleases=True), f"{req} refuses the pinned {version}"
            checked += 1
    assert checked > 20
    # torch without a build tag: the CPU build (+cpu) and PyPI's CUDA build both match it.
    assert "+" not in pins["torch"] and pins["torch"] in _learner_torch()


def test_venv_and_images_install_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert "CONSTRAINTS := docker/constraints.txt" in makefile
    installs = [
        line
        for line in makefile.splitlines()
        if "pip install" in line and not line.startswith("#") and "--upgrade pip" not in line
    ]
    assert installs and all("-c $(CONSTRAINTS)" in line for line in installs)
    for dockerfile in ("Dockerfile", "Dockerfile.gpu"):
        text = (ROOT / "docker" / dockerfile).read_text()
        assert "COPY docker/constraints.txt" in text and "ARG TORCH_INDEX_URL" in text
        installs = [line for line in text.splitlines() if "pip install" in line and not line.startswith("#")]
        assert installs and all("-c constraints.txt" in line for line in installs), dockerfile
        assert "download.pytorch.org" not in "".join(installs), "the torch index is a build argument"


def test_secrets_and_caches_stay_out_of_git_and_the_build_context():
    for path in ("keys/robot-pc/server.key_secret", "hf-cache/hub/x", ".env", ".env.local", "data/x"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        assert ignored.returncode == 0, f"{path} is not in .gitignore"
    assert (
        subprocess.run(["git", "check-ignore", "-q", ".env.example"], cwd=ROOT, check=False).returncode == 1
    )
    dockerignore = (ROOT / ".dockerignore").read_text().split()
    for entry in ("keys", "*.key_secret", "hf-cache", ".env", "data", ".venv", ".git"):
        assert entry in dockerignore, f"{entry} is not in .dockerignore"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, check=check)


def _system_packages(*flags: str) -> list[str]:
    return _run("bash", "scripts/system-deps.sh", *flags, "--print").stdout.split()


def _make_install_commands(*variables: str) -> str:
    """What `make install` would run (a dry run, from scratch: -B). --no-print-directory: under
    `make test` this is a nested make, which otherwise prints "make[1]: Entering directory" first."""
    return _run("make", "--no-print-directory", "-n", "-B", "install", *variables).stdout


def _extra_closure(names: str) -> set[str]:
    """Every requirement (canonical name) the comma-separated extras pull in, through pde-robot[...]."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    found: set[str] = set()
    todo = names.split(",")
    while todo:
        for req in map(Requirement, extras[todo.pop()]):
            if canonicalize_name(req.name) == "pde-robot":
                todo += sorted(req.extras)
            else:
                found.add(canonicalize_name(req.name))
    return found


BROWSER_OR_DATABASE = re.compile(r"chromium|postgresql|psycopg|sqlalchemy|playwright|fastapi")


def test_the_robot_pc_installs_no_browser_no_database_and_no_torch():
    """`make install ROLE=robot` (docs/lab-setup.md §3): the robot server's packages only."""
    system = _system_packages("--robot")
    assert not [p for p in system if BROWSER_OR_DATABASE.search(p)], system
    assert {"libusb-1.0-0", "libegl1"} <= set(system)  # RealSense; MuJoCo's headless rendering
    commands = _make_install_commands("ROLE=robot")
    assert "bash scripts/system-deps.sh --robot" in commands
    (install,) = re.findall(r"pip install -q -c docker/constraints.txt -e '\.\[(.*)\]'", commands)
    assert "pip install -q -c docker/constraints.txt torch" not in commands
    python = _extra_closure(install)
    assert {"franky-control", "pyrealsense2", "mujoco"} <= python
    assert not [p for p in python if BROWSER_OR_DATABASE.search(p) or p == "torch"], python


def test_the_default_install_keeps_what_ci_needs():
    system = _system_packages()
    assert {"chromium", "chromium-driver", "postgresql", "docker-compose"} <= set(system)
    commands = _make_install_commands()
    assert commands.splitlines()[0].strip() == "bash scripts/system-deps.sh"
    assert "-e '.[all,dev]'" in commands and "pip install -q -c docker/constraints.txt torch" in commands
    assert {"psycopg", "playwright", "torch", "fastapi"} <= _extra_closure("all,dev")


def test_an_unknown_role_or_option_is_refused_saying_which_exist():
    run = _run("make", "-n", "install", "ROLE=robotpc", check=False)
    assert run.returncode != 0 and "ROLE=all (the default) or ROLE=robot" in run.stderr
    run = _run("bash", "scripts/system-deps.sh", "--robo", check=False)
    assert run.returncode == 2 and "unknown option '--robo'" in run.stderr and "--robot" in run.stderr
