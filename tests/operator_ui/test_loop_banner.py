"""The page's banner says why the loop does not run: the reason it stopped on (a lab task on the
sim backend), or that it waits for the SFT policy (learner/loop/service.py writes both rows)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from pde_contract.service_state import LoopPhase, LoopState
from pde_storage import Store
from pde_storage.service_states import write_state

SIM_REFUSAL = (
    "the robot server runs the sim backend, which has only the paper's ten built-in tasks; "
    "['stack_cups'] come from the tasks file /etc/pde/tasks.toml and need the franka backend"
)


def _problems(client: TestClient) -> dict[str, dict[str, str]]:
    return {p["service"]: p for p in client.get("/api/health").json()["problems"]}


def test_a_stopped_loop_says_what_stopped_it(client: TestClient, store: Store) -> None:
    write_state(store, "loop", LoopState(phase=LoopPhase.STOPPED, last_error=SIM_REFUSAL))
    loop = _problems(client)["loop"]
    assert loop["what"] == f"stopped: {SIM_REFUSAL}"
    assert "docker compose up -d learner" in loop["action"]
    write_state(store, "loop", LoopState(phase=LoopPhase.STOPPED))
    assert _problems(client)["loop"]["what"] == "stopped"


def test_a_loop_waiting_for_its_policy_says_how_to_make_one(client: TestClient, store: Store) -> None:
    detail = "no policy checkpoint in /data/checkpoints yet: train the SFT policy from the demonstrations"
    write_state(store, "loop", LoopState(phase=LoopPhase.WAITING_FOR_POLICY, detail=detail))
    loop = _problems(client)["loop"]
    assert (loop["title"], loop["what"]) == ("NO POLICY YET", detail)
    assert "`pde learner sft`" in loop["action"]
