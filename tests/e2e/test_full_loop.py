"""The whole system end to end, every service its own process as `pde demo` and compose run them:
the simulated robot server, the page, the supervisor against a local fake OpenAI-compatible VLM
(tests/fakes/fake_openai.py), and the learner's episode loop with simulator labels.

What must happen: the bootstrap stage (canonical baseline, then the VLM's candidates), a candidate
admitted to the pool (the operator corrects one simulator label on the page: an untrained policy
never succeeds on its own), the RL stage, one PPO update whose checkpoint the actor then uses, the
curves served by the page's API; then the learner is killed with SIGKILL mid-episode and started
again: nothing labelled is lost, the interrupted episode is aborted with a reason, and the loop goes
on from the newest checkpoint.

Bounded: a tiny policy (hashing text encoder, 32 px), 3-chunk episodes, fast sim pacing, K=2
candidates, N=2 rollouts, PPO batch 2; every wait has a deadline.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pde.procs import ProcessGroup
from pde_contract.records import LabelSource
from pde_storage import CheckpointRow, EpisodeRow, Store
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.helpers import free_port, pde_command, subprocess_env

TASK = "put_green_container_in_bowl"
TOKEN = "e2e-token-" + "z" * 20
T = TypeVar("T")


def _tiny_checkpoint(data_dir: Path) -> None:
    from learner.checkpoints import CheckpointStore
    from learner.policies.vla import SmallVLAPolicy, VLAConfig

    policy = SmallVLAPolicy(
        VLAConfig(text_encoder="fake-hashing", hidden_dim=32, image_size_px=32, chunk_len=4)
    )
    CheckpointStore(data_dir / "checkpoints").save(policy, 0, {"sft_loss": 1.0})


class System:
    def __init__(self, tmp: Path, vlm_url: str) -> None:
        self.data = tmp / "data"
        self.db_url = f"sqlite:///{self.data / 'pde.db'}"
        self.cmd_port, self.obs_port, self.ui_port = free_port(), free_port(), free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.cmd_port}"
        self.page = f"http://127.0.0.1:{self.ui_port}"
        self.procs = ProcessGroup(self.data / "logs")
        self.env = subprocess_env(
            PDE_DATABASE_URL=self.db_url,
            PDE_DATA_DIR=str(self.data),
            PDE_ROBOT_CMD_ENDPOINT=self.endpoint,
            PDE_UI_PORT=str(self.ui_port),
            PDE_UI_TOKEN=TOKEN,
            PDE_SUPERVISOR_BASE_URL=vlm_url,
            PDE_SUPERVISOR_MODEL="fake-qwen-vl",
            PDE_SUPERVISOR_API_KEY="fake-key-for-the-local-server",
            PDE_SUPERVISOR_CANDIDATES_K="2",
            PDE_SUPERVISOR_ITERATIONS_T0="4",
            PDE_SUPERVISOR_POOL_MIN_M="1",
            PDE_SUPERVISOR_POLL_INTERVAL_S="0.3",
            PDE_SUPERVISOR_BACKOFF_INITIAL_S="0.2",
            PDE_LOOP_ROLLOUTS_PER_PROMPT="2",
            PDE_LOOP_HEARTBEAT_PERIOD_S="0.5",
        )

    def health(self, service: str, *extra: str) -> bool:
        import subprocess

        r = subprocess.run(
            pde_command("health", service, *extra), env=self.env, capture_output=True, timeout=60
        )
        return r.returncode == 0

    def start_learner(self) -> None:
        self.procs.start(
            "learner",
            pde_command(
                "learner",
                "run",
                "--tasks",
                TASK,
                "--auto",
                "--max-chunks",
                "3",
                "--batch-size",
                "2",
                "--rollouts-per-prompt",
                "2",
            ),
            self.env,
        )
        self.procs.wait_healthy("learner", lambda: self.health("learner", "--max-age-s", "60"), 240)

    def start(self) -> None:
        store = Store.open(self.db_url, self.data / "media")  # the schema once, before the services
        store.close()
        self.procs.start(
            "robot-server",
            pde_command(
                "robot-server",
                "--backend",
                "sim",
                "--pacing",
                "fast",
                "--cmd-port",
                str(self.cmd_port),
                "--obs-port",
                str(self.obs_port),
                "--image-size",
                "64x64",
                "--heartbeat-timeout-s",
                "2",
            ),
            self.env,
        )
        self.procs.wait_healthy("robot-server", lambda: self.health("robot-server"), 180)
        self.procs.start("ui", pde_command("ui"), self.env)
        self.procs.wait_healthy("ui", lambda: self.health("ui"), 180)
        self.procs.start("supervisor", pde_command("supervisor", "--tasks", TASK), self.env)
        self.procs.wait_healthy("supervisor", lambda: self.health("supervisor"), 240)
        self.start_learner()

    def api(self, path: str, body: dict[str, Any] | None = None) -> Any:
        req = urllib.request.Request(self.page + path)
        if body is not None:
            req.data = json.dumps(body).encode()
            req.add_header("Content-Type", "application/json")
            req.add_header("Authorization", f"Bearer {TOKEN}")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.procs.tail(n, 25)}" for n in self.procs.services)


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    with FakeOpenAIServer() as vlm:
        sys_ = System(tmp_path, vlm.base_url)
        _tiny_checkpoint(sys_.data)
        try:
            sys_.start()
            yield sys_
        finally:
            sys_.procs.stop_all()


def _authoritative(store: Store, episode_id: int) -> tuple[bool | None, list[tuple[bool, LabelSource, str]]]:
    labels = [(lab.success, lab.source, lab.reason) for lab in store.labels(episode_id) if lab.authoritative]
    return store.episode(episode_id).success, labels


def _checkpoint_from(store: Store, version: int) -> CheckpointRow | None:
    c = store.latest_checkpoint()
    return c if c is not None and c.version >= version else None


def _if_aborted(e: EpisodeRow) -> EpisodeRow | None:
    return e if e.status == "aborted" else None


def wait_for(what: str, get: Callable[[], T | None], system: System, timeout_s: float = 240.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        got = get()
        if got:
            return got
        dead = system.procs.first_dead()
        assert dead is None, f"{dead.name} died while waiting for {what}\n{system.logs()}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s\n{system.logs()}"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_full_loop_then_kill9_learner_and_restart(system: System) -> None:
    store = Store(system.db_url, system.data / "media", migrate=False)
    try:
        _run(system, store)
    finally:
        store.close()


def _run(system: System, store: Store) -> None:
    # 1. Bootstrap: the canonical baseline first (policy frozen at the SFT version 0).
    wait_for(
        "canonical baseline",
        lambda: len([e for e in store.episodes(task=TASK, status="labelled") if e.stage == "bootstrap"]) >= 2,
        system,
    )
    baseline = store.episodes(task=TASK, status="labelled")[:2]
    assert all(e.policy_version == 0 and e.rollout_prompt == e.canonical_prompt for e in baseline)
    assert all(store.labels(e.id)[0].source == "simulator" for e in baseline)

    # 2. The VLM's candidates are rolled out; the operator corrects the simulator's label of one
    # candidate rollout on the page, which makes it pass eta and enter the pool.
    relabelled: set[int] = set()

    def admitted() -> list[Any]:
        candidates = {p.id for p in store.prompts(TASK, "candidate")}
        for e in store.episodes(task=TASK, status="labelled"):
            if e.prompt_id in candidates and e.id not in relabelled and not relabelled:
                got = system.api(
                    f"/api/episodes/{e.id}/relabel", {"success": True, "reason": "operator saw it succeed"}
                )
                assert got["episode"]["success"] is True
                relabelled.add(e.id)
        return store.prompts(TASK, "pool")

    pool = wait_for("pool admission", admitted, system)
    assert pool[0].source == "vlm"
    wait_for("RL stage", lambda: store.task_state(TASK).stage == "rl", system, 120)

    # 3. RL episodes, one PPO update, its checkpoint registered and then used by the actor.
    ckpt = wait_for(
        "PPO checkpoint",
        lambda: _checkpoint_from(store, version=1),
        system,
        300,
    )
    assert Path(ckpt.path).is_file()
    wait_for(
        "an episode run with the new weights",
        lambda: [e for e in store.episodes(task=TASK, status="labelled") if e.policy_version >= 1],
        system,
        180,
    )
    rl_eps = [e for e in store.episodes(task=TASK) if e.stage == "rl"]
    assert {e.rollout_prompt for e in rl_eps} <= {p.text for p in store.prompts(TASK, ("canonical", "pool"))}

    # 4. The curves through the page's API.
    curves = system.api(f"/api/tasks/{TASK}/curves")
    assert curves["canonical_success"] and curves["alpha"] and curves["pool_size"][-1][1] >= 1
    names = system.api("/api/metrics")
    assert any(n.startswith("ppo/") for n in names), names
    health = system.api("/api/health")["services"]
    assert health["loop"]["ok"] and health["supervisor"]["ok"], health

    # 5. kill -9 the learner mid-episode and start it again. (An episode can end between the
    # look and the kill; then the kill fell between episodes and we try again.)
    victims: list[Any] = []
    for _attempt in range(3):
        wait_for("a running episode", lambda: store.episodes(task=TASK, status="running"), system, 120)
        before = {e.id: _authoritative(store, e.id) for e in store.episodes(status="labelled")}
        versions_before = [c.version for c in store.checkpoints()]
        system.procs.kill("learner")
        victims = store.episodes(status="running")  # what the dead process left running
        if victims:
            break
        system.start_learner()
    assert victims, "three kills in a row all fell between episodes"
    victim = victims[0]
    time.sleep(2.5)  # no heartbeat since: the learner's healthcheck fails
    assert not system.health("learner", "--max-age-s", "2")
    system.start_learner()
    aborted = wait_for(
        "the interrupted episode aborted",
        lambda: _if_aborted(store.episode(victim.id)),
        system,
        60,
    )
    assert aborted.abort_reason
    newest = max(versions_before)
    wait_for(
        "new labelled episodes after the restart",
        lambda: [
            e for e in store.episodes(status="labelled", since_id=victim.id) if e.policy_version >= newest
        ],
        system,
        180,
    )
    # (The supervisor may add VLM proposals meanwhile; those are not labels.)
    after = {e.id: _authoritative(store, e.id) for e in store.episodes(status="labelled") if e.id in before}
    assert after == before, "labelled episodes changed across the kill -9"
    assert [c.version for c in store.checkpoints()][: len(versions_before)] == versions_before
    for e in store.episodes(status="labelled"):
        assert Path(e.file_path).is_file(), e
