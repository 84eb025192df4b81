"""``pde demo``: the whole PDE loop on one machine, in simulation.

    pde demo                                  # the operator labels episodes on the page
    pde demo --auto-label --max-episodes 4    # unattended: the simulator labels, stops after 4

First run: scripted-expert demonstrations (``pde sim record``) and the SFT policy (``pde learner
sft``), both cached under the data folder; later runs start in seconds. Then, each as its own
process with its log in <data>/logs/: the simulated robot server (real time), the operator page on
127.0.0.1, the supervisor (offline paraphrase proposer unless a VLM endpoint is configured) and the
learner's episode loop, all sharing SQLite in <data>/pde.db. Ctrl-C stops everything.

The defaults are sized for a 2-core laptop CPU and start from the paper's regime
(learner/recipes/paper_regime.json): three tasks of one scene, 20 demonstrations each, 1000 SFT
steps of the Gaussian head on 32 px frames, the target task (put the green container in front of
the camera) labelled with its canonical prompt in 7.5% of its demos and otherwise with hand-written
wordings no proposer uses, so that prompt's sampled success starts low (3-35% by SFT seed,
bench/results/premise_calibration.json) and the prompt search has something to find. The summary
at the end prints alpha, the pool prompts' share of RL rollouts and the canonical prompt's success
before and after PPO. ``--wordings learner/recipes/language_premise.json``: the decoy premise, the
secondary hard tier (its canonical prompt is trained on another task).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from tqdm import tqdm

from learner.checkpoint_files import checkpoint_files, checkpoint_path
from pde.procs import ProcessGroup, ServiceError
from pde_contract.episodes import EPISODE_SUFFIXES
from pde_contract.job_status import read_status
from pde_contract.records import EpisodeStatus, PromptStatus, Stage
from pde_contract.settings import DataLayout

if TYPE_CHECKING:
    from pde_storage import EpisodeRow, PromptRow, Store

# Paper task 4: the one the short SFT learns best (README, "What `make demo` does": 0.38 sampled
# success, against 0.08 for put_green_container_in_bowl with the same budget).
DEFAULT_TASKS = ("put_green_container_in_front_of_camera",)
PREMISE_TASKS = (
    "put_green_container_in_bowl",
    "put_bowl_in_front_of_camera",
    "put_green_container_in_front_of_camera",
)
PREMISE_WORDINGS = Path(__file__).resolve().parent.parent / "learner" / "recipes" / "paper_regime.json"
REPO_ROOT = Path(__file__).resolve().parent.parent
# Camera frames of the demos and of the server alike; the policy sees them downscaled
# (--policy-image-px).
IMAGE_SIZE = "128x128"
# The premise table's held-out scenes (learner/recipes/README.md); the loop draws its scenes at random
# from [0, 2**31), so these are held out in all but name.
CHECK_SEED = 5000
# A crashed child is started again this many times per service; one more crash stops the run (a
# service that keeps crashing has a cause a restart will not fix: its log says which).
MAX_CHILD_RESTARTS = 3


class DemoError(RuntimeError):
    """A step of the demo failed; the message says which and where its log is."""


# Set by SIGINT/SIGTERM. The handler also raises KeyboardInterrupt, but Python swallows an
# exception raised while a weakref callback runs (SQLAlchemy registers some), so every wait loop
# also checks this flag: a Ctrl-C can never be lost.
_stop_requested = threading.Event()


def _check_stop() -> None:
    if _stop_requested.is_set():
        raise KeyboardInterrupt


@dataclass
class Ports:
    robot_cmd: int
    robot_obs: int
    ui: int


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _any_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def choose_port(wanted: int) -> int:
    """``wanted`` if nothing listens there, else any free port (0 means any)."""
    return wanted if wanted and _port_free(wanted) else _any_free_port()


class DemoSettings(BaseSettings):
    """Defaults of the demo's options (env prefix PDE_DEMO_, e.g. PDE_DEMO_SFT_STEPS=400); the
    command line overrides them."""

    model_config = SettingsConfigDict(env_prefix="PDE_DEMO_", extra="ignore")

    data_dir: Path = Path("data")
    tasks: str = ",".join(DEFAULT_TASKS)
    # The paper's regime (learner/recipes/README.md): SFT on three tasks of one scene, the target's
    # canonical prompt on 7.5% of its demos (the recipe's canonical_prob), so that prompt starts at
    # 10-20% for SFT seeds 0 and 2 (3-35% over seeds 0-3). `--sft-tasks ""` and `--wordings ""`
    # give the single-task start (prompts inert).
    sft_tasks: str = ",".join(PREMISE_TASKS)
    wordings: str = str(PREMISE_WORDINGS)
    demos_per_task: int = Field(default=20, ge=1)
    sft_steps: int = Field(default=1000, ge=1)
    sft_batch_size: int = Field(default=64, ge=1)
    # The Gaussian head: after the same short SFT it succeeds 9 times in 24 where the flow head
    # succeeds once (README); 32 px frames train and act faster than 64 px on a CPU.
    head: Literal["flow", "gaussian"] = "gaussian"
    policy_image_px: int = Field(default=32, ge=16)
    max_chunks: int = Field(default=20, ge=1)
    rollouts_per_prompt: int = Field(default=4, ge=1)
    batch_size: int = Field(default=8, ge=1)
    candidates: int = Field(default=2, ge=1)
    iterations: int = Field(default=2, ge=1)
    # How far the simulator scatters the objects at each reset (0..1, 1 = the whole layout box and
    # any yaw). The demo's short SFT succeeds sometimes only on a narrow layout.
    layout_spread: float = Field(default=0.2, ge=0.0, le=1.0)
    ui_port: int = 8000
    robot_cmd_port: int = 5556
    robot_obs_port: int = 5555
    startup_timeout_s: float = Field(default=300.0, gt=0)
    # After --max-episodes: the canonical prompt under the SFT policy and the latest PPO policy on
    # the same held-out scenes. Once alpha sits near alpha_min the loop itself rarely samples it.
    canonical_check_episodes: int = Field(default=8, ge=0)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    try:
        d = DemoSettings()
    except ValidationError as e:
        raise SystemExit(f"pde demo: invalid PDE_DEMO_* setting:\n{e}") from None
    p = argparse.ArgumentParser(
        prog="pde demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--data-dir", type=Path, default=d.data_dir, help="everything goes here (default %(default)s)"
    )
    p.add_argument("--auto-label", action="store_true", help="the simulator labels episodes (unattended)")
    p.add_argument("--max-episodes", type=int, help="stop cleanly after this many episodes")
    p.add_argument("--tasks", default=d.tasks, help="comma-separated task names (default: %(default)s)")
    p.add_argument(
        "--sft-tasks",
        default=d.sft_tasks,
        help="tasks the SFT policy learns besides --tasks (default: %(default)s; '' for none)",
    )
    p.add_argument(
        "--wordings",
        default=d.wordings,
        help="SFT wording table per task, its canonical_prob included (default: the paper's regime, "
        "%(default)s; learner/recipes/language_premise.json: the decoy hard tier; '' for the canonical "
        "prompt and its paraphrases)",
    )
    p.add_argument(
        "--demos-per-task", type=int, default=d.demos_per_task, help="expert demos per task (%(default)s)"
    )
    p.add_argument("--sft-steps", type=int, default=d.sft_steps, help="SFT gradient steps (%(default)s)")
    p.add_argument(
        "--sft-batch-size", type=int, default=d.sft_batch_size, help="SFT batch size (%(default)s)"
    )
    p.add_argument(
        "--head",
        choices=["flow", "gaussian"],
        default=d.head,
        help="the SFT policy's action head (%(default)s)",
    )
    p.add_argument(
        "--policy-image-px",
        type=int,
        default=d.policy_image_px,
        help="camera frames are downscaled to this square for the policy (%(default)s)",
    )
    p.add_argument(
        "--max-chunks", type=int, default=d.max_chunks, help="longest episode, chunks (%(default)s)"
    )
    p.add_argument(
        "--rollouts-per-prompt", type=int, default=d.rollouts_per_prompt, help="N per prompt (%(default)s)"
    )
    p.add_argument(
        "--batch-size", type=int, default=d.batch_size, help="RL rollouts per PPO update (%(default)s)"
    )
    p.add_argument(
        "--candidates", type=int, default=d.candidates, help="K candidates per iteration (%(default)s)"
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=d.iterations,
        help="T0: prompt-search iterations before RL (%(default)s)",
    )
    p.add_argument(
        "--layout-spread",
        type=float,
        default=d.layout_spread,
        help="how far resets scatter the objects, 0..1 (%(default)s; 1: the whole layout box)",
    )
    p.add_argument("--vlm-base-url", default=os.environ.get("PDE_SUPERVISOR_BASE_URL", ""))
    p.add_argument("--vlm-model", default=os.environ.get("PDE_SUPERVISOR_MODEL", ""))
    p.add_argument("--fast", action="store_true", help="simulate faster than real time")
    p.add_argument("--ui-port", type=int, default=d.ui_port, help="page port (%(default)s, another if taken)")
    p.add_argument("--robot-cmd-port", type=int, default=d.robot_cmd_port)
    p.add_argument("--robot-obs-port", type=int, default=d.robot_obs_port)
    p.add_argument(
        "--prepare-only", action="store_true", help="record the demonstrations and train SFT, then exit"
    )
    p.add_argument("--startup-timeout-s", type=float, default=d.startup_timeout_s, help="per service")
    p.add_argument(
        "--canonical-check-episodes",
        type=int,
        default=d.canonical_check_episodes,
        help="after --max-episodes, the canonical prompt's sampled success under the SFT and the latest "
        "policy on this many held-out scenes (%(default)s; 0 skips it)",
    )
    args = p.parse_args(list(argv))
    args.tasks = _task_list(args.tasks, p)
    # The SFT policy learns every task the loop runs, plus the extra ones (in a stable order).
    args.sft_tasks = (
        list(dict.fromkeys([*_task_list(args.sft_tasks, p), *args.tasks]))
        if args.sft_tasks
        else list(args.tasks)
    )
    if args.wordings and not Path(args.wordings).is_file():
        p.error(f"--wordings {args.wordings}: no such file (a JSON table like {PREMISE_WORDINGS})")
    positive = ("demos_per_task", "sft_steps", "sft_batch_size", "max_chunks", "rollouts_per_prompt")
    for name in (*positive, "batch_size", "candidates", "iterations"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.policy_image_px < 16:
        p.error("--policy-image-px must be at least 16")
    if args.max_episodes is not None and args.max_episodes < 1:
        p.error("--max-episodes must be at least 1")
    if args.canonical_check_episodes < 0:
        p.error("--canonical-check-episodes must be 0 (skip) or more")
    if not 0.0 <= args.layout_spread <= 1.0:
        p.error(f"--layout-spread {args.layout_spread} must be within 0..1")
    if not args.tasks:
        p.error("--tasks is empty")
    return args


def _task_list(text: str, p: argparse.ArgumentParser) -> list[str]:
    """Comma-separated names, or a JSON list (compose passes the loop's LOOP_TASKS as it is, so
    sim_setup trains on exactly the tasks the learner runs)."""
    if not text.lstrip().startswith("["):
        return [t.strip() for t in text.split(",") if t.strip()]
    try:
        tasks = json.loads(text)
    except json.JSONDecodeError as e:
        p.error(f"--tasks {text!r} starts like a JSON list but is not one ({e})")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        p.error(f'--tasks {text!r}: a JSON list of task names, e.g. ["put_green_container_in_bowl"]')
    return [t.strip() for t in tasks if t.strip()]


# --- progress ------------------------------------------------------------------------------------


def progress_bar(label: str, total: int) -> tqdm:
    """A tqdm bar on stderr: redrawn in place on a terminal; in a log, a line at most every 10 s."""
    return tqdm(
        total=max(1, total),
        desc=label,
        file=sys.stderr,
        mininterval=0.5 if sys.stderr.isatty() else 10.0,
        dynamic_ncols=True,
        bar_format="{desc} |{bar}| {n}/{total} ({elapsed}, ~{remaining} left){postfix}",
    )


def run_with_progress(
    argv: Sequence[str],
    env: dict[str, str],
    log_path: Path,
    bar: tqdm,
    poll: Callable[[], tuple[int, str] | None],
) -> None:
    """Run a one-shot child to completion, its output appended to ``log_path``; ``poll()`` returns
    (done, note) for the bar from what the child leaves on disk (its status file, its output
    files), never from its log. The child runs in its own process group (pde/procs.py, the one
    process runner), killed with everything it started if the wait is interrupted."""
    start = log_path.stat().st_size if log_path.exists() else 0
    group = ProcessGroup(log_path.parent)
    name = log_path.stem
    proc = group.start(name, argv, env).process
    assert proc is not None
    try:
        while proc.poll() is None:
            _check_stop()
            _show(bar, poll())
            time.sleep(0.5)
        if proc.returncode == 0:
            _show(bar, poll())  # the last step, which may end with the child
    except BaseException:
        group.kill(name)
        raise
    finally:
        bar.close()
    if proc.returncode != 0:
        tail = "\n".join(_read_from(log_path, start).splitlines()[-15:])
        raise DemoError(f"`{' '.join(argv[2:])}` failed (exit {proc.returncode}); log {log_path}:\n{tail}")


def _show(bar: tqdm, got: tuple[int, str] | None) -> None:
    if got is None:
        return
    done, note = got
    bar.set_postfix_str(note, refresh=False)
    bar.update(min(done, bar.total) - bar.n)  # redraws at most every mininterval


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


# --- the demo ------------------------------------------------------------------------------------


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data = args.data_dir.resolve()
        self.layout = DataLayout(self.data)
        self.logs = self.layout.logs
        # Demonstrations are cached per layout spread: another spread records (and trains) anew.
        self.demo_dir = self.layout.demos / f"spread{args.layout_spread:g}"
        self.db_url = self.layout.sqlite_url
        self.procs = ProcessGroup(self.logs)
        self.token = os.environ.get("PDE_UI_TOKEN") or secrets.token_urlsafe(18)
        self.last_old_episode_id = 0
        self.ports = Ports(
            choose_port(args.robot_cmd_port), choose_port(args.robot_obs_port), choose_port(args.ui_port)
        )
        if self.ports.robot_obs == self.ports.robot_cmd:
            self.ports.robot_obs = _any_free_port()
        self.ui_url = f"http://127.0.0.1:{self.ports.ui}/#token={self.token}"
        self.robot_endpoint = f"tcp://127.0.0.1:{self.ports.robot_cmd}"
        self.check_lines: list[str] = []
        # service -> its health check (for a restart) and how often it was restarted
        self.health: dict[str, Callable[[], bool]] = {}
        self.restarts: dict[str, int] = {}

    def pde(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "pde", *args]

    def env(self) -> dict[str, str]:
        """The environment every child gets: the shared settings of the compose file, pointed at the
        data folder and this run's ports."""
        a = self.args
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("MUJOCO_GL", "egl")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.update(
            PDE_DATABASE_URL=self.db_url,
            PDE_DATA_DIR=str(self.data),
            PDE_ROBOT_CMD_ENDPOINT=self.robot_endpoint,
            PDE_ROBOT_CMD_PORT=str(self.ports.robot_cmd),
            PDE_ROBOT_OBS_PORT=str(self.ports.robot_obs),
            PDE_UI_HOST="127.0.0.1",
            PDE_UI_PORT=str(self.ports.ui),
            PDE_UI_TOKEN=self.token,
            PDE_UI_RESTARTED_BY="pde demo",  # the page's banner: crashed services come back by themselves
            PDE_LEARNER_CHECKPOINT_DIR=str(self.layout.checkpoints),
            PDE_LEARNER_DEMO_DIR=str(self.demo_dir),
            # N (rollouts per prompt): the loop writes it on each task, where the supervisor reads it.
            PDE_LOOP_ROLLOUTS_PER_PROMPT=str(a.rollouts_per_prompt),
            PDE_SUPERVISOR_CANDIDATES_K=str(a.candidates),
            PDE_SUPERVISOR_ITERATIONS_T0=str(a.iterations),
            PYTHONUNBUFFERED="1",
        )
        return env

    # --- first run: demonstrations and SFT (cached) ------------------------------------------------

    def demo_files(self, task: str) -> list[Path]:
        folder = self.demo_dir / task
        return sorted(p for p in folder.rglob("*") if p.suffix in EPISODE_SUFFIXES) if folder.exists() else []

    def record_demos(self) -> None:
        for task in self.args.sft_tasks:
            have = len(self.demo_files(task))
            want = self.args.demos_per_task
            if have >= want:
                print(f"demonstrations: {have} cached for {task}", flush=True)
                continue
            bar = progress_bar(f"recording {task} demos", want)
            run_with_progress(
                self.pde(
                    "sim",
                    "record",
                    "--tasks",
                    task,
                    "--episodes-per-task",
                    str(want - have),
                    "--seed",
                    str(1000 + have),
                    "--out",
                    str(self.demo_dir / task),
                    "--image-size",
                    IMAGE_SIZE,
                    "--layout-spread",
                    str(self.args.layout_spread),
                ),
                self.env(),
                self.logs / "sim-record.log",
                bar,
                lambda task=task: (len(self.demo_files(task)), ""),  # type: ignore[misc]
            )

    def sft_argv(self) -> list[str]:
        a = self.args
        return self.pde(
            "learner",
            "sft",
            "--demos",
            str(self.demo_dir),
            "--checkpoints",
            str(self.layout.checkpoints),
            "--tasks",
            ",".join(a.sft_tasks),
            "--per-task",
            str(a.demos_per_task),
            "--steps",
            str(a.sft_steps),
            "--batch-size",
            str(a.sft_batch_size),
            "--head",
            a.head,
            "--image-size",
            str(a.policy_image_px),
            *(["--wordings", a.wordings] if a.wordings else []),
            "--status-file",
            str(self.sft_status_path),
        )

    @property
    def sft_status_path(self) -> Path:
        return self.logs / "sft.status.json"

    def train_sft(self) -> None:
        a = self.args
        self.sft_status_path.unlink(missing_ok=True)  # a previous run's "done" is not this one's
        bar = progress_bar("SFT policy", a.sft_steps)

        def poll() -> tuple[int, str] | None:
            status = read_status(self.sft_status_path)
            if status is None:
                return None
            if status.phase == "loading":
                return 0, "loading demonstrations"
            if status.cached:
                return status.total_steps, "cached"
            return status.step, "" if status.loss is None else f"loss {status.loss:.4f}"

        run_with_progress(self.sft_argv(), self.env(), self.logs / "sft.log", bar, poll)
        final = read_status(self.sft_status_path)
        if final is None or final.phase != "done":
            raise DemoError(
                f"`pde learner sft` exited 0 without reporting its result in {self.sft_status_path}; "
                f"log {self.logs / 'sft.log'}"
            )
        cached = final.cached
        print(f"SFT policy: {'cached' if cached else 'trained'} in {self.layout.checkpoints}", flush=True)
        if not cached and not a.prepare_only:
            self.set_aside_previous_run()

    def later_checkpoints(self) -> list[Path]:
        """Policy versions after the SFT one (version 0)."""
        return [path for version, path in checkpoint_files(self.layout.checkpoints).items() if version > 0]

    def set_aside_previous_run(self) -> None:
        """A new SFT policy (other options, another task) starts a new run: the learner would resume
        from PPO versions of the old policy and mix the old run's episodes into the prompt search,
        so those move, unchanged, to <data>/previous-runs/<time>/."""
        db = self.layout.sqlite_file
        old = [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), self.layout.media) if p.exists()]
        old += self.later_checkpoints()
        if not old:
            return
        dest = self.data / "previous-runs" / time.strftime("%Y%m%d-%H%M%S")
        DataLayout(dest).checkpoints.mkdir(parents=True, exist_ok=True)  # the same layout inside
        for p in old:
            p.rename(dest / p.relative_to(self.data))
        print(f"the SFT policy changed: the previous run (database, media, later policies) moved to {dest}")

    # --- services --------------------------------------------------------------------------------

    def start_services(self) -> None:
        from pde.health import as_probe, check_heartbeat, check_robot_server, check_ui

        a = self.args

        def healthy(check: Callable[[], str]) -> Callable[[], bool]:
            probe = as_probe(check)

            def stoppable() -> bool:
                _check_stop()
                return probe()

            return stoppable

        # The schema first, once, so the services do not race to migrate the same SQLite file.
        from pde_storage import Store

        with Store.open(self.db_url, self.layout.media) as store:
            # Episodes of earlier runs are not printed again; with --fast this run's first one can
            # end before the learner reports healthy, so this is read before it starts.
            self.last_old_episode_id = max((e.id for e in store.episodes()), default=0)

        print("starting the simulated robot server ...", flush=True)
        pacing = "fast" if a.fast else "realtime"
        server = ["robot-server", "--backend", "sim", "--pacing", pacing, "--image-size", IMAGE_SIZE]
        server += ["--sim-layout-spread", str(a.layout_spread)]
        # One observation per control tick is all the loop uses; 30 fps of two rendered cameras
        # would take most of a 2-core CPU. The 1 s watchdog (200 ms on the FR3) keeps a loaded
        # laptop from dropping chunks; it is a simulation.
        server += ["--camera-fps", "10", "--heartbeat-timeout-s", "1.0"]
        self._start(
            "robot-server", self.pde(*server), healthy(lambda: check_robot_server(self.robot_endpoint, 1.0))
        )
        print("starting the operator page ...", flush=True)
        self._start(
            "ui", self.pde("ui"), healthy(lambda: check_ui(f"http://127.0.0.1:{self.ports.ui}/healthz", 2.0))
        )
        print(f"\n  operator page: {self.ui_url}\n  token: {self.token}\n", flush=True)

        offline = not a.vlm_base_url
        print(
            "starting the supervisor ("
            + ("offline paraphrase proposer" if offline else a.vlm_base_url)
            + ") ...",
            flush=True,
        )
        sup_args = ["supervisor", "--tasks", *a.tasks]
        sup_args += ["--offline"] if offline else ["--base-url", a.vlm_base_url]
        if not offline and a.vlm_model:
            sup_args += ["--model", a.vlm_model]
        self._start(
            "supervisor",
            self.pde(*sup_args),
            healthy(lambda: check_heartbeat("supervisor", self.db_url, 60.0)),
        )
        print("starting the learner (episode loop + PPO) ...", flush=True)
        loop_args = [
            "learner",
            "run",
            "--tasks",
            ",".join(a.tasks),
            "--auto-start",
            "--max-chunks",
            str(a.max_chunks),
            "--batch-size",
            str(a.batch_size),
            "--rollouts-per-prompt",
            str(a.rollouts_per_prompt),
        ]
        if a.auto_label:
            loop_args.append("--auto-label")
        if a.max_episodes is not None:
            loop_args += ["--max-episodes", str(a.max_episodes)]
        self._start(
            "learner", self.pde(*loop_args), healthy(lambda: check_heartbeat("learner", self.db_url, 600.0))
        )
        how = "the simulator labels them" if a.auto_label else "label each one on the page"
        print(f"running: episodes start by themselves and {how}; Ctrl-C stops everything.", flush=True)

    def _start(self, name: str, argv: list[str], check: Callable[[], bool]) -> None:
        self.health[name] = check
        self.procs.start(name, argv, self.env())
        self.procs.wait_healthy(name, check, self.args.startup_timeout_s)

    def episodes_done(self, store: Store) -> int:
        """Episodes of this run that have ended (the learner's --max-episodes counts these)."""
        return sum(
            e.status != EpisodeStatus.RUNNING for e in store.episodes(since_id=self.last_old_episode_id)
        )

    def recover(self, name: str, rc: int | None, store: Store) -> None:
        """A child crashed: start it again (the loop and the supervisor resume from the database),
        at most MAX_CHILD_RESTARTS times; then stop the run, saying which service and where its log is."""
        n = self.restarts.get(name, 0)
        log = self.procs.services[name].log_path
        if n >= MAX_CHILD_RESTARTS:
            raise DemoError(
                f"{name} crashed {n + 1} times (last exit code {rc}); the run stops here. Its log: {log}\n"
                f"{self.procs.tail(name)}"
            )
        self.restarts[name] = n + 1
        print(
            f"pde demo: {name} crashed (exit code {rc}); restarting it ({n + 1} of {MAX_CHILD_RESTARTS}), "
            f"log {log}",
            flush=True,
        )
        argv = list(self.procs.services[name].argv)
        if name == "learner" and self.args.max_episodes is not None and "--max-episodes" in argv:
            # the restarted loop counts from zero: give it only the episodes still to run
            left = max(1, self.args.max_episodes - self.episodes_done(store))
            argv[argv.index("--max-episodes") + 1] = str(left)
        self.procs.restart(name, argv)
        self.procs.wait_healthy(name, self.health[name], self.args.startup_timeout_s)
        print(f"pde demo: {name} is back", flush=True)

    def watch(self) -> int:
        """Until the learner stops (``--max-episodes``) or a service dies; prints each episode."""
        from pde_storage import Store

        store = Store(self.db_url, self.layout.media, migrate=False)
        seen = self.last_old_episode_id
        try:
            while True:
                for ep in store.episodes(since_id=seen):
                    if ep.status in (EpisodeStatus.RUNNING, EpisodeStatus.AWAITING_LABEL) and not (
                        ep.status == EpisodeStatus.AWAITING_LABEL and not self.args.auto_label
                    ):
                        break
                    seen = ep.id
                    outcome = {True: "success", False: "failure", None: ep.status}[ep.success]
                    print(
                        f"episode {ep.id}: {ep.task} · {ep.stage} · policy v{ep.policy_version} · "
                        f"{outcome} · prompt {ep.rollout_prompt!r}",
                        flush=True,
                    )
                learner = self.procs.services["learner"]
                if not learner.alive:
                    rc = learner.process.returncode if learner.process else None
                    if rc == 0:
                        return 0
                    self.recover("learner", rc, store)
                dead = self.procs.first_dead()
                if dead is not None:
                    self.recover(dead.name, dead.process.returncode if dead.process else None, store)
                _check_stop()
                time.sleep(1.0)
        finally:
            store.close()

    def canonical_check(self) -> None:
        """The canonical prompt's sampled success under the SFT policy (version 0) and the latest PPO
        policy, on the same held-out scenes, with the robot server still up and the learner gone."""
        from pde_storage import Store

        n = self.args.canonical_check_episodes
        with Store(self.db_url, self.layout.media, migrate=False) as store:
            latest = store.latest_checkpoint()
            canon = {
                t: next((p.text for p in store.prompts(t) if p.status == PromptStatus.CANONICAL), "")
                for t in self.args.tasks
            }
        if n == 0 or latest is None or latest.version == 0:
            return
        sft = checkpoint_path(self.layout.checkpoints, 0)
        for task, prompt in canon.items():
            if not prompt:
                continue
            rates = []
            for ckpt in (sft, Path(latest.path)):
                argv = self.pde(
                    "learner", "eval", "--checkpoint", str(ckpt), "--task", task, "--prompt", prompt,
                    "--episodes", str(n), "--max-chunks", str(self.args.max_chunks),
                    "--seed", str(CHECK_SEED), "--device", "cpu", "--cmd-endpoint", self.robot_endpoint,
                )  # fmt: skip
                out = subprocess.run(
                    argv, env=self.env(), capture_output=True, text=True, timeout=60 + 30 * n
                )
                if out.returncode != 0:
                    raise DemoError(f"the canonical-prompt check failed:\n{out.stderr[-2000:]}")
                rate = json.loads(out.stdout.strip().splitlines()[-1])["success_rate"]
                rates.append(f"{round(rate * n)}/{n}")
            self.check_lines.append(
                f"{task}: canonical prompt on {n} held-out scenes (seeds {CHECK_SEED}-{CHECK_SEED + n - 1}, "
                f"sampled): SFT policy {rates[0]}, policy v{latest.version} {rates[1]} "
                f"({n} scenes are an anecdote; bench/bench_pde.py measures 100)"
            )

    def summary(self) -> None:
        from pde_storage import Store

        with Store(self.db_url, self.layout.media, migrate=False) as store:
            eps = store.episodes()
            labelled = [e for e in eps if e.success is not None]
            ckpt = store.latest_checkpoint()
            wins = sum(bool(e.success) for e in labelled)
            print(
                f"\n{len(eps)} episode(s) in {self.layout.sqlite_file}, {len(labelled)} labelled "
                f"({wins} successes); files and videos under {self.layout.media}",
                flush=True,
            )
            for task in self.args.tasks:
                print("  " + prompt_summary(task, store.prompts(task)), flush=True)
                print(
                    "  " + rl_summary(task, store.episodes(task=task), store.task_state(task).alpha),
                    flush=True,
                )
            for line in self.check_lines:
                print("  " + line, flush=True)
            if ckpt is not None:
                print(
                    f"latest policy: version {ckpt.version} (0 = the SFT policy, +1 per PPO update; "
                    f"{ckpt.path})",
                    flush=True,
                )
        print(f"the page was at {self.ui_url}", flush=True)
        print(
            f"browse them again: PDE_DATA_DIR={self.data} PDE_DATABASE_URL={self.db_url} pde ui "
            f"--robot {self.robot_endpoint}   logs: {self.logs}",
            flush=True,
        )


def prompt_summary(task: str, prompts: Sequence[PromptRow]) -> str:
    """One line per task for the end of the demo: how the canonical prompt did and what the
    bootstrap search did to the prompt pool."""
    by_status: dict[PromptStatus, list[PromptRow]] = {}
    for p in prompts:
        by_status.setdefault(p.status, []).append(p)
    canon = by_status.get(PromptStatus.CANONICAL, [])
    wins, n = sum(p.n_success for p in canon), sum(p.n_episodes for p in canon)
    admitted, rejected = by_status.get(PromptStatus.POOL, []), by_status.get(PromptStatus.REJECTED, [])
    pool = ", ".join(f"{p.text!r} {p.n_success}/{p.n_episodes}" for p in admitted)
    return (
        f"{task}: canonical prompt {wins}/{n} successes; prompt pool: {len(admitted)} admitted"
        f"{' (' + pool + ')' if pool else ''}, {len(rejected)} rejected, "
        f"{len(by_status.get(PromptStatus.CANDIDATE, []))} still candidates"
    )


def rl_summary(task: str, episodes: Sequence[EpisodeRow], alpha: float) -> str:
    """One line per task on PDE's mechanism in the RL stage: alpha now, how many RL rollouts used a
    pool prompt, and the canonical prompt's labelled success under the SFT policy (version 0)
    and under PPO-updated policies (version >= 1)."""
    rl = [e for e in episodes if e.stage == Stage.RL]
    pool_share = sum(e.rollout_prompt != e.canonical_prompt for e in rl)
    canon = [e for e in episodes if e.rollout_prompt == e.canonical_prompt and e.success is not None]

    def rate(rows: list[EpisodeRow]) -> str:
        wins = sum(bool(e.success) for e in rows)
        return f"{wins}/{len(rows)}" if rows else "none sampled yet"

    share = f" ({pool_share / len(rl):.0%})" if rl else ""
    before = [e for e in canon if e.policy_version == 0]
    after = [e for e in canon if e.policy_version >= 1]
    return (
        f"{task}: RL stage {len(rl)} rollouts, {pool_share}{share} with a pool prompt, alpha {alpha:.2f}; "
        f"canonical prompt before PPO {rate(before)}, after PPO {rate(after)}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    demo = Demo(args)
    demo.data.mkdir(parents=True, exist_ok=True)
    print(f"pde demo: data folder {demo.data}, logs in {demo.logs}", flush=True)

    def on_term(signum: int, frame: FrameType | None) -> None:
        _stop_requested.set()
        raise KeyboardInterrupt

    # Explicitly: a process started in the background of a non-interactive shell inherits SIGINT
    # ignored, and Python then never raises KeyboardInterrupt.
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    t0 = time.monotonic()
    try:
        demo.record_demos()
        demo.train_sft()
        if args.prepare_only:
            return 0
        demo.start_services()
        print(f"(ready {time.monotonic() - t0:.0f} s after start)", flush=True)
        demo.watch()
        print(f"pde demo: the learner stopped after {args.max_episodes} episode(s)", flush=True)
        if args.canonical_check_episodes:
            print(
                f"checking the canonical prompt on {args.canonical_check_episodes} held-out scenes ...",
                flush=True,
            )
            demo.canonical_check()
        demo.procs.stop_all()
        demo.summary()
        return 0
    except KeyboardInterrupt:
        print("\npde demo: stopping ...", file=sys.stderr, flush=True)
        return 130
    except (DemoError, ServiceError) as e:
        print(f"pde demo: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        # A second Ctrl-C while stopping kills what is left.
        def kill_all(signum: int, frame: FrameType | None) -> None:
            for name in list(demo.procs.services):
                demo.procs.kill(name)

        # SIGTERM too: on_term would raise KeyboardInterrupt in the middle of stop_all and leave
        # the children running.
        signal.signal(signal.SIGINT, kill_all)
        signal.signal(signal.SIGTERM, kill_all)
        demo.procs.stop_all()
        print(f"pde demo: stopped after {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
