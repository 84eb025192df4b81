"""Build the CPU image and run the robot-PC stack (sim backend) and the workstation stack as
containers through docker-compose, on a machine with podman instead of a Docker engine and no
image registry; write what was built, measured and checked as JSON.

    sudo python3 docker/check_images.py [--out docker/check_result.json] [--torch-wheels /opt/wheels]

Needs (Debian 12, as root): apt-get install podman runc debootstrap docker-compose. Only the
standard library runs here; everything else runs in the images.

What it does, in order:
1. Stand-in base images (the official ones cannot be pulled here): Debian 12 debootstrapped and
   imported as localhost/bookworm-min, then docker/standin/*.Containerfile built on it and tagged
   with the names the FROM lines and the compose files use (python:3.11-slim-bookworm,
   postgres:16-bookworm). The result says so: they check the Dockerfile's steps, not the
   official bases.
2. docker/Dockerfile as pde-robot:cpu, with torch from a local wheel folder (TORCH_FIND_LINKS), so
   the build needs no PyTorch index. docker/Dockerfile.gpu as pde-robot:gpu with torch (the CUDA 13
   build and its nvidia-* packages) from PyPI, FROM the Debian 12 python stand-in with Debian's
   python3.11 (BASE_IMAGE, PYTHON): no Ubuntu base can be pulled or bootstrapped here. Its
   learner is started without a GPU: with PDE_LEARNER_DEVICE=cuda it must stop saying why.
3. The robot server's ulimits as docker/compose.services.yml has them (rtprio 99, memlock
   unlimited), each tried in a container first: one that podman/runc refuses is capped at this
   machine's hard limit, and the result says which and the error (``adjusted_why``). The check's
   robot.toml sets the FR3's control-thread priority (SCHED_FIFO 40) on the sim backend as well;
   where the kernel gives containers no real-time time (rt_budget) the run gives it, and says so.
4. podman's Docker-compatible API on a socket of its own; docker-compose v1 starts
   docker-compose.robot.yml (ROBOT_BACKEND=sim) and docker-compose.workstation.yml (postgres,
   supervisor, operator_ui, and the learner from the GPU image with LEARNER_DEVICE=cpu) on
   127.0.0.1 with the CURVE robot link and keys from `pde keys init`, each stack a project with its
   own volumes.
5. Checks: every started service healthy (its compose healthcheck); the robot server's control
   thread under SCHED_FIFO in its container, with the limits it ran under, and `pde doctor` there
   agreeing; the GPU image's learner refusing cuda without a GPU; one chunk from the
   workstation side over the robot link (docker/check_chunk.py) executed by the robot server;
   the operator page answers 200 and reads the robot's status through the link; the learner
   waits for a policy (no SFT checkpoint in a fresh volume) on the CPU. Then both stacks go down
   with their volumes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STANDIN = REPO / "docker" / "standin"
BASE = "localhost/bookworm-min:latest"
CPU_IMAGE = "localhost/pde-robot:cpu"
GPU_IMAGE = "localhost/pde-robot:gpu"
# image the FROM line / compose file names -> the stand-in's Containerfile
STANDINS = {
    "docker.io/library/python:3.11-slim-bookworm": "python.Containerfile",
    "docker.io/library/postgres:16-bookworm": "postgres.Containerfile",
}
# Dockerfile.gpu's BASE_IMAGE and PYTHON here: its ubuntu:24.04 can be neither pulled nor
# bootstrapped, so the python stand-in (debootstrapped Debian 12, whose apt has python3.11 and no
# 3.12; it also carries this machine's CA bundle, which pip needs to reach PyPI from here).
GPU_BASE = "docker.io/library/python:3.11-slim-bookworm"
GPU_PYTHON = "python3.11"
NOT_BUILT = {"vllm/vllm-openai": "cannot be pulled; profile vllm not started"}
NOTES = [
    "learner: the stack's GPU reservation (deploy.resources.reservations.devices) reaches podman, "
    "whose Docker API (4.3) ignores it without a word; no GPU here, so LEARNER_DEVICE=cpu",
]
ROBOT_STACK, WORKSTATION_STACK = "docker-compose.robot.yml", "docker-compose.workstation.yml"
WORKSTATION_SERVICES = ("postgres", "supervisor", "operator_ui", "learner")
# The robot server's ulimits in docker/compose.services.yml (-1: unlimited); the tests check they agree.
LAB_ULIMITS = {"rtprio": 99, "memlock": -1}
# The FR3's control-thread priority (robot_server/settings.py HARDWARE_RT_PRIORITY), which the
# check's robot.toml sets on the sim backend too (its default there is 0).
LAB_RT_PRIORITY = 40
SCHED_FIFO = 1  # the policy field of /proc/PID/task/TID/stat
# podman's parent cgroup (cgroupfs manager, cgroup v1 cpu controller) and real-time time budgets
# (µs per RT_PERIOD_US) where the kernel schedules real-time tasks by cgroup (rt_budget): the
# control thread's 10 Hz tick needs a few ms of each second
PODMAN_PARENT = Path("/sys/fs/cgroup/cpu/libpod_parent")
RT_PERIOD_US = 1_000_000
ROBOT_RT_RUNTIME_US = 200_000
PARENT_RT_RUNTIME_US = 250_000
LEARNER = ("learner", "run")  # the learner service's command (docker/compose.services.yml)
PID_MAX = Path("/proc/sys/kernel/pid_max")
HEALTHY_TIMEOUT_S = 300.0
HEALTHCHECK_TIMEOUT = "60s"
HEALTH_PUMP_PERIOD_S = 3.0
# podman's own runtime choice (crun) refuses this machine's hybrid cgroups; the default open-files
# ulimit is refused too (shared/CONTAINERS.md).
CONTAINERS_CONF = '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Built:
    image: str
    source: str
    build_s: float
    size_bytes: int
    steps_from_cache: int  # of the Containerfile's steps (0: built from scratch)
    stand_in_for: str = ""


@dataclass
class Result:
    started_utc: str
    command: str
    # the checkout the images were built from: HEAD, and what differed from it when the run began
    commit: str = ""
    uncommitted: list[str] = field(default_factory=list)
    ok: bool = False
    built: list[Built] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    stood_in: list[str] = field(default_factory=list)
    # what this machine made the run change in the stacks as committed: stack file -> the override
    # file's content (override() says why for the healthchecks, adjusted_why for the rest)
    adjusted: dict[str, object] = field(default_factory=dict)
    adjusted_why: list[str] = field(default_factory=list)
    not_built: dict[str, str] = field(default_factory=lambda: dict(NOT_BUILT))
    notes: list[str] = field(default_factory=lambda: list(NOTES))
    error: str = ""


class Failed(Exception):
    """A step that stops the run; the message says which and where its log is."""


class Runner:
    """Commands with the run's environment (its containers.conf, podman's socket), each logged."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        conf = work / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        self.env = dict(os.environ, CONTAINERS_CONF=str(conf))
        self.socket = work / "podman.sock"
        self.env["DOCKER_HOST"] = f"unix://{self.socket}"
        # docker-compose's own 60 s per API call: a container's creation took longer while the
        # machine wrote an image layer (an `up` failed so, measured here)
        self.env["COMPOSE_HTTP_TIMEOUT"] = "600"

    def run(
        self,
        args: Sequence[str],
        log: str,
        *,
        check: bool = True,
        stdin: bytes | None = None,
        timeout_s: float = 3600.0,
        capture: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        """``capture``: stdout returned (and logged after); else written to the log as it comes."""
        path = self.logs / f"{log}.log"
        with path.open("ab") as f:
            f.write(f"$ {' '.join(args)}\n".encode())
            f.flush()
            r = subprocess.run(
                list(args),
                input=stdin,
                stdout=subprocess.PIPE if capture else f,
                stderr=f,
                env=self.env,
                timeout=timeout_s,
                check=False,
            )
            f.write(r.stdout or b"")
        if check and r.returncode != 0:
            raise Failed(f"{args[0]} {args[1] if len(args) > 1 else ''} exited {r.returncode}: see {path}")
        return r

    def out(self, args: Sequence[str], log: str = "queries") -> str:
        return self.run(args, log).stdout.decode().strip()

    def podman(
        self, *args: str, log: str = "podman", check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        return self.run(["podman", *args], log, check=check, capture=False)

    def build(self, tag: str, containerfile: Path, context: Path, source: str, *extra: str) -> Built:
        """``podman build`` on the host network (PyPI, Debian) that never pulls a base."""
        log = self.logs / f"build-{containerfile.name}.log"
        start = log.stat().st_size if log.exists() else 0
        t0 = time.monotonic()
        self.podman(
            "build",
            "--network",
            "host",
            "--pull=never",
            *extra,
            "-f",
            str(containerfile),
            "-t",
            tag,
            str(context),
            log=log.stem,
        )
        build_s = since(t0)
        cached = log.read_bytes()[start:].count(b"--> Using cache")
        return Built(tag, source, build_s, self.image_size(tag), cached)

    def image_exists(self, ref: str) -> bool:
        return self.podman("image", "exists", ref, check=False).returncode == 0

    def image_size(self, ref: str) -> int:
        return int(self.out(["podman", "image", "inspect", "--format", "{{.Size}}", ref]))


def since(t0: float) -> float:
    """Seconds since ``t0`` (time.monotonic()), to a tenth."""
    return round(time.monotonic() - t0, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- 1 and 2: images --------------------------------------------------------------------------------


def build_base(r: Runner, result: Result) -> None:
    if r.image_exists(BASE):
        result.built.append(Built(BASE, "debootstrap (an earlier run's)", 0.0, r.image_size(BASE), 1))
        return
    rootfs = r.work / "rootfs"
    t0 = time.monotonic()
    shutil.rmtree(rootfs, ignore_errors=True)
    r.run(
        ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), "http://deb.debian.org/debian"],
        "debootstrap",
    )
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imp = subprocess.run(
        ["podman", "import", "-", BASE], stdin=tar.stdout, env=r.env, capture_output=True, check=False
    )
    if tar.wait() != 0 or imp.returncode != 0:
        raise Failed(f"podman import of the debootstrapped rootfs failed: {imp.stderr.decode()[-500:]}")
    shutil.rmtree(rootfs)
    build_s = since(t0)
    result.built.append(Built(BASE, "debootstrap --variant=minbase bookworm", build_s, r.image_size(BASE), 0))


def build_standins(r: Runner, result: Result) -> None:
    context = r.work / "standin-context"
    shutil.copytree(STANDIN, context, dirs_exist_ok=True)
    # pip in the stand-in python image reaches PyPI with this machine's CA bundle
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", context / "host-ca.crt")
    for tag, containerfile in STANDINS.items():
        built = r.build(tag, context / containerfile, context, f"docker/standin/{containerfile}")
        built.stand_in_for = tag
        result.built.append(built)
        result.stood_in.append(
            f"{tag.removeprefix('docker.io/library/')}: not the official image (cannot be pulled here) but "
            f"docker/standin/{containerfile} on debootstrapped Debian 12, tagged with its name"
        )


# Python that prints NAME=VERSION words in an image: what the result's "versions" lists
CPU_VERSIONS = (
    "import importlib.metadata as m, platform; "
    "print(' '.join(['python=' + platform.python_version()] + [p + '=' + m.version(p) for p in "
    "('torch', 'numpy', 'opencv-python-headless', 'mujoco', 'pin', 'franky-control', 'franky-sim', "
    "'pyzmq', 'fastapi', 'psycopg', 'pde-robot')]))"
)
GPU_VERSIONS = (
    "import importlib.metadata as m, platform, torch; "
    "nv = [d for d in m.distributions() if d.metadata['Name'].startswith('nvidia-')]; "
    "print(' '.join(['gpu.python=' + platform.python_version(), 'gpu.torch=' + torch.__version__, "
    "'gpu.torch_cuda=' + str(torch.version.cuda), 'gpu.nvidia_packages=' + str(len(nv)), "
    "'gpu.pde-robot=' + m.version('pde-robot')]))"
)


def image_versions(r: Runner, image: str, script: str) -> dict[str, str]:
    """What ``script`` (Python, printing NAME=VERSION words) prints in ``image``."""
    line = r.out(
        ["podman", "run", "--rm", "--network", "host", "--entrypoint", "python", image, "-c", script]
    )
    return dict(kv.split("=", 1) for kv in line.split())


def build_cpu_image(r: Runner, result: Result, wheels: Path) -> None:
    dockerfile = REPO / "docker" / "Dockerfile"
    source = f"docker/Dockerfile, TORCH_FIND_LINKS: the torch wheel from {wheels}"
    extra = ("-v", f"{wheels}:/wheels:ro", "--build-arg", "TORCH_FIND_LINKS=/wheels")
    result.built.append(r.build(CPU_IMAGE, dockerfile, REPO, source, *extra))
    result.versions.update(image_versions(r, CPU_IMAGE, CPU_VERSIONS))


def build_gpu_image(r: Runner, result: Result) -> None:
    """docker/Dockerfile.gpu on the Debian 12 stand-in, torch from PyPI (its CUDA 13 build)."""
    dockerfile = REPO / "docker" / "Dockerfile.gpu"
    source = (
        f"docker/Dockerfile.gpu with BASE_IMAGE={GPU_BASE} (the stand-in: debootstrapped Debian 12, "
        f"not ubuntu:24.04) and PYTHON={GPU_PYTHON} (Debian 12 has no python3.12); torch from PyPI"
    )
    extra = ("--build-arg", f"BASE_IMAGE={GPU_BASE}", "--build-arg", f"PYTHON={GPU_PYTHON}")
    result.built.append(r.build(GPU_IMAGE, dockerfile, REPO, source, *extra))
    result.versions.update(image_versions(r, GPU_IMAGE, GPU_VERSIONS))


def check_learner_without_gpu(r: Runner) -> Check:
    """The GPU image's learner as compose starts it (PDE_LEARNER_DEVICE=cuda) where no GPU is
    visible: it must stop at once and say what to do, not train on the CPU."""
    run = r.run(
        ["podman", "run", "--rm", "--network", "host", "-e", "PDE_LEARNER_DEVICE=cuda", GPU_IMAGE, *LEARNER],
        "learner-without-gpu",
        check=False,
        timeout_s=300,
    )
    log = (r.logs / "learner-without-gpu.log").read_text(errors="replace")
    said = [line for line in log.splitlines() if "torch sees no CUDA device" in line]
    return Check(
        "GPU image: `learner run` with PDE_LEARNER_DEVICE=cuda and no GPU stops saying why",
        run.returncode != 0 and bool(said),
        f"exit {run.returncode}: {said[-1] if said else log[-400:]}",
    )


# --- 3, 4 and 5: the stacks ---------------------------------------------------------------------------


@contextmanager
def podman_service(r: Runner) -> Iterator[None]:
    """podman's Docker-compatible API on the run's own socket, for docker-compose."""
    r.socket.unlink(missing_ok=True)
    log = (r.logs / "podman-service.log").open("ab")
    proc = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{r.socket}"], stdout=log, stderr=log, env=r.env
    )
    try:
        deadline = time.monotonic() + 30
        while not r.socket.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise Failed(f"podman system service did not open {r.socket}: see {log.name}")
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@contextmanager
def health_pump(r: Runner) -> Iterator[None]:
    """podman schedules healthchecks with systemd timers, which this machine (no systemd) lacks:
    run each running container's healthcheck every few seconds instead, so its health status (what
    `depends_on: service_healthy` waits for) moves as under a Docker engine."""
    stop = threading.Event()

    def pump() -> None:
        while not stop.wait(HEALTH_PUMP_PERIOD_S):
            names = r.run(["podman", "ps", "--format", "{{.Names}}"], "health-pump", check=False)
            for name in names.stdout.decode().split():
                r.run(["podman", "healthcheck", "run", name], "health-pump", check=False, timeout_s=60)

    thread = threading.Thread(target=pump, name="health-pump", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(90)


@dataclass
class Stack:
    file: str
    project: str
    env_file: Path
    overrides: tuple[Path, ...] = ()

    def compose(
        self, r: Runner, *args: str, log: str, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        files = [a for f in (REPO / self.file, *self.overrides) for a in ("-f", str(f))]
        base = ["docker-compose", "-p", self.project, "--env-file", str(self.env_file), *files]
        return r.run([*base, *args], log, check=check, timeout_s=900, capture=False)

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"


def write_env(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


# setrlimit's resource numbers (Linux), as runc's "error setting rlimit type N" names them
RLIMIT_NAMES = {6: "nproc", 7: "nofile", 8: "memlock", 14: "rtprio"}
CAP_SYS_RESOURCE = 24  # bit in /proc/self/status CapBnd


def hard_limit(name: str) -> int:
    """This machine's hard limit (-1: unlimited), which a container can exceed only with
    CAP_SYS_RESOURCE. runc here refuses a process limit above pid_max, though the hard limit is higher."""
    which = {
        "nofile": resource.RLIMIT_NOFILE,
        "nproc": resource.RLIMIT_NPROC,
        "rtprio": resource.RLIMIT_RTPRIO,
        "memlock": resource.RLIMIT_MEMLOCK,
    }[name]
    hard = resource.getrlimit(which)[1]
    if name == "nproc":
        pid_max = int(PID_MAX.read_text())
        hard = pid_max if hard == resource.RLIM_INFINITY else min(hard, pid_max)
    return -1 if hard == resource.RLIM_INFINITY else hard


def container_error(r: Runner, *args: str) -> str:
    """Empty when ``podman run --rm --network host ARGS`` exits 0, else the last line it (or
    runc) wrote to stderr; both logged in logs/probes.log."""
    run = subprocess.run(
        ["podman", "run", "--rm", "--network", "host", *args],
        env=r.env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    with (r.logs / "probes.log").open("ab") as f:
        f.write(f"$ podman run {' '.join(args)} -> exit {run.returncode}\n".encode() + run.stderr)
    if run.returncode == 0:
        return ""
    return (run.stderr.decode(errors="replace").strip().splitlines() or [f"exit {run.returncode}"])[-1]


def try_ulimits(r: Runner, limits: dict[str, int]) -> str:
    """Empty when a container starts with ``limits`` (soft = hard, -1: unlimited), else the error
    podman/runc gave."""
    args = [a for name, v in limits.items() for a in ("--ulimit", f"{name}={v}:{v}")]
    return container_error(r, *args, BASE, "true")


def robot_ulimits(r: Runner, result: Result) -> dict[str, dict[str, int]]:
    """The ulimits the robot server gets: the stack's own (LAB_ULIMITS, empty return) when a
    container starts with them; else, one refusal at a time, the refused limit at this machine's
    hard limit, each said in ``result.adjusted_why`` with runc's error. podman itself adds an
    open-files and a process limit once any ulimit is set, which runc may refuse the same way."""
    limits: dict[str, int] = dict(LAB_ULIMITS)
    capped: set[str] = set()
    while error := try_ulimits(r, limits):
        number = error.partition("rlimit type ")[2].split(":")[0]
        name = RLIMIT_NAMES.get(int(number)) if number.isdigit() else None
        if name is None or name in capped:
            raise Failed(f"no container starts with the robot server's ulimits {limits}: {error}")
        asked = f"{limits[name]} (compose)" if name in LAB_ULIMITS else "podman's own (any ulimit adds it)"
        limits[name] = hard_limit(name)
        capped.add(name)
        result.adjusted_why.append(
            f"robot_server ulimits {name}: {asked} refused by runc ({error}); ran at this machine's "
            f"hard limit {limits[name]}"
        )
    if not capped:
        return {}
    status = Path("/proc/self/status").read_text()
    bounding = next(line.split()[1] for line in status.splitlines() if line.startswith("CapBnd:"))
    if not int(bounding, 16) >> CAP_SYS_RESOURCE & 1:
        result.adjusted_why.append(
            f"why: this machine's processes lack CAP_SYS_RESOURCE (CapBnd {bounding}, even as root), "
            "so no container may raise a hard limit above the host's; on a robot PC whose Docker "
            "runs with it, the stack's own ulimits apply"
        )
    return {k: {"soft": v, "hard": v} for k, v in limits.items()}


def try_sched_fifo(r: Runner) -> str:
    """Empty when a container's uid 1000 with CAP_SYS_NICE (as the robot server's) may switch to
    SCHED_FIFO LAB_RT_PRIORITY, else what chrt said."""
    return container_error(
        r, "--cap-add", "SYS_NICE", "--user", "1000", BASE, "chrt", "-f", str(LAB_RT_PRIORITY), "true"
    )


@contextmanager
def rt_budget(r: Runner, result: Result) -> Iterator[dict[str, object]]:
    """The robot server's override that lets its control thread run SCHED_FIFO (empty where a
    container may already). A kernel that schedules real-time tasks by group
    (CONFIG_RT_GROUP_SCHED, cgroup v1) gives a new cgroup 0 µs of RT time, so sched_setscheduler
    fails with EPERM even with CAP_SYS_NICE: podman's parent cgroup then gets a budget (what
    `dockerd --cpu-rt-runtime` does), the container `cpu_rt_runtime`, and the parent its old value
    back once the stacks are down. Kernels without it (the usual PREEMPT_RT builds) need neither."""
    refused = try_sched_fifo(r)
    rt_file = PODMAN_PARENT / "cpu.rt_runtime_us"
    if not refused or not rt_file.exists():
        if refused:
            result.adjusted_why.append(
                f"SCHED_FIFO {LAB_RT_PRIORITY} refused in a container with CAP_SYS_NICE ({refused}) "
                f"and no {rt_file} to give an RT budget in: not adjusted"
            )
        yield {}
        return
    before = rt_file.read_text().strip()
    rt_file.write_text(str(PARENT_RT_RUNTIME_US))
    result.adjusted_why.append(
        f"robot_server cpu_rt_runtime {ROBOT_RT_RUNTIME_US} µs per {RT_PERIOD_US} µs: SCHED_FIFO "
        f"{LAB_RT_PRIORITY} in a container as uid 1000 with CAP_SYS_NICE was refused ({refused}), as "
        f"this kernel schedules real-time by cgroup (cgroup v1 {rt_file} was {before} µs); "
        f"{rt_file} set to {PARENT_RT_RUNTIME_US} for the run (dockerd --cpu-rt-runtime's job) and "
        f"back to {before} after"
    )
    try:
        yield {"cpu_rt_runtime": ROBOT_RT_RUNTIME_US}
    finally:
        try:
            rt_file.write_text(before)
        except OSError as e:
            result.adjusted_why.append(f"{rt_file} not set back to {before}: {e}")


def override(path: Path, services: dict[str, dict[str, object]]) -> Path:
    """A compose override file (JSON is YAML) with ``services``' changes, and every healthcheck's
    timeout at HEALTHCHECK_TIMEOUT: a `pde health` process, which starts Python and connects, takes
    over 10 s on two cores shared with other work (the stacks give it 4-8 s)."""
    doc = {
        "services": {
            name: {"healthcheck": {"timeout": HEALTHCHECK_TIMEOUT}} | change
            for name, change in services.items()
        }
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def make_stacks(
    r: Runner, result: Result, robot_change: dict[str, object]
) -> tuple[Stack, Stack, dict[str, str]]:
    """The two stacks, their env files and keys; ``robot_change``: the robot server's override
    beyond its ulimits (rt_budget's)."""
    keys = r.work / "keys"
    shutil.rmtree(keys, ignore_errors=True)
    keys.mkdir()
    r.podman(
        "run",
        "--rm",
        "--network",
        "host",
        "--user",
        "0",
        "-v",
        f"{keys}:/keys",
        CPU_IMAGE,
        "keys",
        "init",
        "/keys",
        log="keys",
    )
    for p in [keys, *keys.rglob("*")]:  # the containers' user (uid 1000) reads its secret key
        os.chown(p, 1000, 1000)
    secrets_dir = r.work / "secrets"
    secrets_dir.mkdir(exist_ok=True)
    robot_toml = r.work / "robot.toml"
    example = (REPO / "config" / "robot.example.toml").read_text()
    commented = f"# rt_priority = {LAB_RT_PRIORITY}\n"
    if commented not in example:
        raise Failed(f"config/robot.example.toml has no line {commented.strip()!r} to set as on the FR3")
    robot_toml.write_text(example.replace(commented, f"rt_priority = {LAB_RT_PRIORITY}\n", 1))
    common = {
        "ROBOT_BACKEND": "sim",
        "ROBOT_CMD_PORT": str(free_port()),
        "ROBOT_OBS_PORT": str(free_port()),
        "TASKS_FILE": str(REPO / "config" / "tasks.example.toml"),
    }
    robot_env = write_env(
        r.work / "robot.env",
        common
        | {
            "ROBOT_CONFIG": str(robot_toml),
            "ROBOT_SECRETS_DIR": str(secrets_dir),
            "ROBOT_LINK_HOST": "127.0.0.1",
            "LINK_KEYS_DIR": str(keys / "robot-pc"),
        },
    )
    ws = common | {
        "POSTGRES_PASSWORD": secrets.token_urlsafe(18),
        "PDE_UI_TOKEN": secrets.token_urlsafe(24),
        "POSTGRES_PORT": str(free_port()),
        "UI_PORT": str(free_port()),
        "ROBOT_PC_HOST": "127.0.0.1",
        "LINK_KEYS_DIR": str(keys / "workstation"),
        "PI05_DIR": str(r.work / "no-pi05"),
        # no GPU here: the learner on the CPU (compose's default, cuda, is checked on its own)
        "LEARNER_DEVICE": "cpu",
    }
    ws_env = write_env(r.work / "workstation.env", ws)
    tag = secrets.token_hex(3)
    ulimits = robot_ulimits(r, result)
    robot_override = override(
        r.work / "robot.override.yml",
        {"robot_server": robot_change | ({"ulimits": ulimits} if ulimits else {})},
    )
    ws_override = override(r.work / "workstation.override.yml", {s: {} for s in WORKSTATION_SERVICES})
    return (
        Stack(ROBOT_STACK, f"pdecheck{tag}robot", robot_env, (robot_override,)),
        Stack(WORKSTATION_STACK, f"pdecheck{tag}ws", ws_env, (ws_override,)),
        ws,
    )


def health(r: Runner, container: str) -> str:
    return r.out(["podman", "inspect", "--format", "{{.State.Health.Status}}", container])


def wait_healthy(r: Runner, containers: Sequence[str], t_up: float) -> Check:
    """Every one of ``containers`` healthy, within HEALTHY_TIMEOUT_S of ``t_up`` (when `up` returned)."""
    deadline = t_up + HEALTHY_TIMEOUT_S
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = {c: health(r, c) for c in containers}
        if all(s == "healthy" for s in states.values()):
            return Check(
                f"healthy: {', '.join(containers)}",
                True,
                f"all healthy {since(t_up):.0f} s after both stacks' `up` returned",
            )
        time.sleep(2)
    return Check(f"healthy: {', '.join(containers)}", False, f"after {HEALTHY_TIMEOUT_S:.0f} s: {states}")


def check_chunk(r: Runner, ws: Stack) -> Check:
    """docker/check_chunk.py in the workstation's page container: its keys and robot endpoint."""
    run = r.run(
        ["podman", "exec", "-i", ws.container("operator_ui"), "python", "-"],
        "check-chunk",
        check=False,
        stdin=(REPO / "docker" / "check_chunk.py").read_bytes(),
        timeout_s=120,
    )
    out = run.stdout.decode().strip().splitlines()
    return Check(
        "one chunk from the workstation stack executed by the robot stack's server",
        run.returncode == 0,
        out[-1] if out else f"no output (exit {run.returncode}): see logs/check-chunk.log",
    )


# Run in the robot server's container: what PID 1 (the server) runs under, as JSON.
RT_PROBE = """
import json, pathlib
lines = pathlib.Path('/proc/1/limits').read_text().splitlines()[1:]
limits = {l[:26].strip(): l[26:].split()[:2] for l in lines}
status = pathlib.Path('/proc/1/status').read_text().splitlines()
cap_eff = int(next(l.split()[1] for l in status if l.startswith('CapEff:')), 16)
threads = []
for task in pathlib.Path('/proc/1/task').iterdir():
    stat = (task / 'stat').read_text()
    fields = stat[stat.rindex(')') + 2:].split()  # from field 3 (state): rt_priority 40, policy 41
    threads.append([stat[stat.index('(') + 1:stat.rindex(')')], int(fields[38]), int(fields[37])])
cmdline = pathlib.Path('/proc/1/cmdline').read_bytes().replace(b'\\0', b' ').decode().strip()
print(json.dumps({'cmdline': cmdline,
    'rtprio': limits['Max realtime priority'], 'memlock': limits['Max locked memory'],
    'cap_sys_nice': bool(cap_eff >> 23 & 1), 'threads': threads}))
"""


def check_robot_realtime(r: Runner, robot: Stack) -> Check:
    """The robot server's control thread under SCHED_FIFO LAB_RT_PRIORITY in its container (the
    stack's cap_add SYS_NICE), and the limits it runs under."""
    run = r.run(
        ["podman", "exec", "-i", robot.container("robot_server"), "python", "-"],
        "robot-realtime",
        check=False,
        stdin=RT_PROBE.encode(),
        timeout_s=60,
    )
    name = f"robot server's control thread under SCHED_FIFO {LAB_RT_PRIORITY} in its container"
    if run.returncode != 0:
        return Check(name, False, f"probe exit {run.returncode}: see logs/robot-realtime.log")
    seen = json.loads(run.stdout)
    fifo = [f"{comm} {prio}" for comm, policy, prio in seen["threads"] if policy == SCHED_FIFO]
    return Check(
        name,
        any(policy == SCHED_FIFO and prio == LAB_RT_PRIORITY for _, policy, prio in seen["threads"]),
        f"PID 1 `{seen['cmdline']}`: SCHED_FIFO threads {fifo or 'none'} of {len(seen['threads'])}; "
        f"CAP_SYS_NICE {'held' if seen['cap_sys_nice'] else 'missing'}; RLIMIT_RTPRIO soft/hard "
        f"{'/'.join(seen['rtprio'])}, RLIMIT_MEMLOCK soft/hard {'/'.join(seen['memlock'])}",
    )


def check_doctor_limits(r: Runner, robot: Stack) -> Check:
    """`pde doctor --no-connect` in the robot server's container (as docs/lab-setup.md §8 runs
    it): its rt-priority and memlock lines, which must agree with what the server got. The
    doctor's other lines (kernel, NIC, cameras) are about a robot PC this machine is not."""
    run = r.run(
        ["podman", "exec", robot.container("robot_server"), "pde", "doctor", "--no-connect"],
        "doctor",
        check=False,
        timeout_s=120,
    )
    lines = [" ".join(s.split()) for s in run.stdout.decode(errors="replace").splitlines()]
    said = {
        name: next((s for s in lines if s.split()[1:2] == [name]), "") for name in ("rt-priority", "memlock")
    }
    return Check(
        "`pde doctor` in the robot server's container: rt-priority",
        said["rt-priority"].startswith("PASS"),
        " | ".join(s or f"no {name} line (exit {run.returncode})" for name, s in said.items()),
    )


def check_learner_waits(r: Runner, ws: Stack) -> Check:
    """The GPU image's learner, on the CPU, in a fresh data volume: it waits for a policy (no SFT
    checkpoint yet) in a state the page shows, instead of exiting."""
    container = ws.container("learner")
    logs = subprocess.run(
        ["podman", "logs", container], env=r.env, capture_output=True, timeout=60, check=False
    )
    said = [
        line
        for line in (logs.stdout + logs.stderr).decode(errors="replace").splitlines()
        if line.startswith("pde loop:")
    ]
    restarts = r.out(["podman", "inspect", "--format", "{{.RestartCount}}", container])
    ok = any("runs on cpu" in s for s in said) and any("no policy checkpoint" in s for s in said)
    return Check(
        "learner (GPU image, LEARNER_DEVICE=cpu) waits for a policy",
        ok and restarts == "0",
        f"restarts {restarts}; it printed: {' | '.join(said) or 'nothing from pde loop'}",
    )


def http_get(url: str, token: str = "") -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def check_page(port: str) -> list[Check]:
    base = f"http://127.0.0.1:{port}"
    code, body = http_get(base + "/")
    page = Check(
        "operator page GET / answers 200",
        code == 200 and b"<html" in body.lower(),
        f"HTTP {code}, {len(body)} bytes",
    )
    code, body = http_get(base + "/api/robot/status")
    robot = Check(
        "operator page reads the robot server's status over the link (GET /api/robot/status)",
        code == 200 and json.loads(body).get("backend") == "sim" if code == 200 else False,
        f"HTTP {code}: {body[:300].decode(errors='replace')}",
    )
    return [page, robot]


def run_stacks(r: Runner, result: Result) -> None:
    with rt_budget(r, result) as robot_change:
        robot, ws, ws_values = make_stacks(r, result, robot_change)
        for stack in (robot, ws):
            for path in stack.overrides:
                result.adjusted[stack.file] = json.loads(path.read_text())
        run_both(r, result, robot, ws, ws_values)


def run_both(r: Runner, result: Result, robot: Stack, ws: Stack, ws_values: dict[str, str]) -> None:
    with podman_service(r), health_pump(r):
        try:
            for stack, services in ((robot, ()), (ws, WORKSTATION_SERVICES)):
                t0 = time.monotonic()
                stack.compose(r, "up", "-d", "--no-build", *services, log=f"up-{stack.project}")
                up_s = since(t0)
                result.checks.append(
                    Check(
                        f"docker-compose -f {stack.file} up -d {' '.join(services)}".strip(),
                        True,
                        f"returned after {up_s} s",
                    )
                )
            t_up = time.monotonic()
            result.checks.append(wait_healthy(r, [robot.container("robot_server")], t_up))
            result.checks.append(wait_healthy(r, [ws.container(s) for s in WORKSTATION_SERVICES], t_up))
            result.checks.append(check_robot_realtime(r, robot))
            result.checks.append(check_doctor_limits(r, robot))
            result.checks.append(check_learner_waits(r, ws))
            result.checks.append(check_chunk(r, ws))
            result.checks.extend(check_page(ws_values["UI_PORT"]))
        except Failed as e:
            result.checks.append(Check("stacks up", False, str(e)))
        finally:
            for stack in (ws, robot):
                stack.compose(r, "logs", "--no-color", log=f"logs-{stack.project}", check=False)
                down = stack.compose(
                    r, "down", "-v", "--timeout", "20", log=f"down-{stack.project}", check=False
                )
                result.checks.append(
                    Check(
                        f"docker-compose -f {stack.file} down -v",
                        down.returncode == 0,
                        f"exit {down.returncode}",
                    )
                )
            shutil.rmtree(r.work / "keys")  # this run's link keys, secret ones included


def tool_versions(r: Runner) -> dict[str, str]:
    def first_line(args: list[str]) -> str:
        return r.run(args, "queries", check=False).stdout.decode().strip().splitlines()[0]

    return {
        "podman": first_line(["podman", "--version"]),
        "runc": first_line(["runc", "--version"]),
        "docker-compose": first_line(["docker-compose", "version", "--short"]),
        "host": first_line(["uname", "-srm"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=REPO / "docker" / "check_result.json")
    ap.add_argument(
        "--torch-wheels",
        type=Path,
        default=Path("/opt/wheels"),
        help="folder holding the torch==2.13.0 CPU wheel for Python 3.11 (TORCH_FIND_LINKS)",
    )
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "pde-check-images",
        help="keys, env files, logs (kept for reading after the run)",
    )
    args = ap.parse_args(argv)
    missing = [t for t in ("podman", "runc", "debootstrap", "docker-compose") if shutil.which(t) is None]
    if missing:
        print(
            f"check_images: {', '.join(missing)} not found: apt-get install podman runc debootstrap "
            "docker-compose (as root)",
            file=sys.stderr,
        )
        return 2
    if os.geteuid() != 0:
        print("check_images: run as root (rootful podman, debootstrap)", file=sys.stderr)
        return 2
    if not list(args.torch_wheels.glob("torch-2.13.0*-cp311-*.whl")):
        print(
            f"check_images: no torch-2.13.0 cp311 wheel in {args.torch_wheels}: `pip download "
            f"--no-deps --python-version 3.11 --only-binary :all: -d {args.torch_wheels} torch==2.13.0 "
            "--index-url <a CPU index>`, or pass --torch-wheels",
            file=sys.stderr,
        )
        return 2
    r = Runner(args.work_dir)
    result = Result(
        started_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        command=" ".join(["python3 docker/check_images.py", *(argv or sys.argv[1:])]),
        commit=r.out(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
        uncommitted=[
            s.strip() for s in r.out(["git", "-C", str(REPO), "status", "--porcelain"]).splitlines()
        ],
    )
    try:
        result.versions.update(tool_versions(r))
        build_base(r, result)
        build_standins(r, result)
        build_cpu_image(r, result, args.torch_wheels)
        build_gpu_image(r, result)
        result.checks.append(check_learner_without_gpu(r))
        run_stacks(r, result)
    except Failed as e:
        result.error = str(e)
    result.ok = not result.error and bool(result.checks) and all(c.ok for c in result.checks)
    args.out.write_text(json.dumps(asdict(result), indent=2) + "\n")
    for c in result.checks:
        print(f"{'PASS' if c.ok else 'FAIL'}  {c.name}: {c.detail}")
    print(
        f"{'ok' if result.ok else 'FAILED'}{': ' + result.error if result.error else ''}; "
        f"result in {args.out}, logs in {r.logs}"
    )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
