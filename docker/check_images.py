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
   the build needs no PyTorch index. docker/Dockerfile.gpu (ubuntu:24.04, CUDA) is not built: no
   Ubuntu base can be made here, and no GPU runs it.
3. podman's Docker-compatible API on a socket of its own; docker-compose v1 starts
   docker-compose.robot.yml (ROBOT_BACKEND=sim) and docker-compose.workstation.yml (postgres,
   supervisor, operator_ui; not the learner, which is the GPU image) on 127.0.0.1 with the CURVE
   robot link and keys from `pde keys init`, each stack a project with its own volumes.
4. Checks: every started service healthy (its compose healthcheck); one chunk from the
   workstation side over the robot link (docker/check_chunk.py) executed by the robot server;
   the operator page answers 200 and reads the robot's status through the link. Then both stacks
   go down with their volumes.
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
# image the FROM line / compose file names -> the stand-in's Containerfile
STANDINS = {
    "docker.io/library/python:3.11-slim-bookworm": "python.Containerfile",
    "docker.io/library/postgres:16-bookworm": "postgres.Containerfile",
}
NOT_BUILT = {
    "docker/Dockerfile.gpu (pde-robot:gpu)": "FROM ubuntu:24.04 cannot be pulled or bootstrapped "
    "here, and no GPU runs it: the workstation stack runs without its learner",
    "vllm/vllm-openai": "cannot be pulled; profile vllm not started",
}
ROBOT_STACK, WORKSTATION_STACK = "docker-compose.robot.yml", "docker-compose.workstation.yml"
WORKSTATION_SERVICES = ("postgres", "supervisor", "operator_ui")
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
    ok: bool = False
    built: list[Built] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    stood_in: list[str] = field(default_factory=list)
    # what this machine made the run change in the stacks as committed: stack file -> the override
    # file's content (host_limits() and override() say why)
    adjusted: dict[str, object] = field(default_factory=dict)
    not_built: dict[str, str] = field(default_factory=lambda: dict(NOT_BUILT))
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


def build_cpu_image(r: Runner, result: Result, wheels: Path) -> None:
    dockerfile = REPO / "docker" / "Dockerfile"
    source = f"docker/Dockerfile, TORCH_FIND_LINKS: the torch wheel from {wheels}"
    extra = ("-v", f"{wheels}:/wheels:ro", "--build-arg", "TORCH_FIND_LINKS=/wheels")
    result.built.append(r.build(CPU_IMAGE, dockerfile, REPO, source, *extra))
    script = (
        "import importlib.metadata as m, platform; "
        "print(' '.join(['python=' + platform.python_version()] + [p + '=' + m.version(p) for p in "
        "('torch', 'numpy', 'opencv-python-headless', 'mujoco', 'pin', 'franky-control', 'franky-sim', "
        "'pyzmq', 'fastapi', 'psycopg', 'pde-robot')]))"
    )
    line = r.out(
        ["podman", "run", "--rm", "--network", "host", "--entrypoint", "python", CPU_IMAGE, "-c", script]
    )
    result.versions.update(dict(kv.split("=", 1) for kv in line.split()))


# --- 3 and 4: the stacks ------------------------------------------------------------------------------


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


def host_limits() -> dict[str, dict[str, int]]:
    """The robot server's ulimits (rtprio 99, memlock unlimited in the stack) capped at this
    machine's hard limits, which a container cannot exceed: where the checks run without
    CAP_SYS_RESOURCE (rtprio 0 here) runc refuses the container otherwise. The sim backend needs no
    real-time scheduling; on a robot PC the stack's own limits apply. podman also adds open-files
    and process limits above the hard ones once any ulimit is set: named here at the hard limits."""
    limits = {
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
        # runc here refuses a process limit above pid_max, though the hard limit is higher
        "nproc": min(resource.getrlimit(resource.RLIMIT_NPROC)[1], int(PID_MAX.read_text())),
        "rtprio": resource.getrlimit(resource.RLIMIT_RTPRIO)[1],
        "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK)[1],
    }
    return {k: {"soft": v, "hard": v} for k, v in limits.items()}


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


def make_stacks(r: Runner) -> tuple[Stack, Stack, dict[str, str]]:
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
    shutil.copy(REPO / "config" / "robot.example.toml", robot_toml)
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
    }
    ws_env = write_env(r.work / "workstation.env", ws)
    tag = secrets.token_hex(3)
    robot_override = override(r.work / "robot.override.yml", {"robot_server": {"ulimits": host_limits()}})
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
    robot, ws, ws_values = make_stacks(r)
    for stack in (robot, ws):
        for path in stack.overrides:
            result.adjusted[stack.file] = json.loads(path.read_text())
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
    )
    try:
        result.versions.update(tool_versions(r))
        build_base(r, result)
        build_standins(r, result)
        build_cpu_image(r, result, args.torch_wheels)
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
