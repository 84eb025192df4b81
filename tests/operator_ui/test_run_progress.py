"""Episodes until the next PPO update, the bootstrap counted (operator_ui/routers/run.py)."""

from __future__ import annotations

from pathlib import Path

from operator_ui.routers.run import BootstrapBudget, bootstrap_left, episodes_until_update
from pde_contract.service_state import SUPERVISOR_ROW, SupervisorState
from pde_storage import Store
from pde_storage.service_states import write_state
from tests.storage.factories import make_episode_file

TASK = "put_green_container_in_bowl"
BUDGET = BootstrapBudget(iterations_t0=3, candidates_k=2, pool_min_m=3, source="test")


def _ended(store: Store, prompt_id: int, n: int) -> None:
    for _ in range(n):
        ep = store.create_episode(TASK, prompt_id, 0, "bootstrap")
        store.finish_episode(ep.id, make_episode_file(ep.id, TASK, n_chunks=1))


def test_bootstrap_left_counts_rollouts_now_then_whole_rounds(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path}/pde.db", tmp_path / "media") as store:
        store.ensure_task(TASK, "put the green container in the bowl")
        assert bootstrap_left(store, TASK, BUDGET) is None  # N not written by the loop yet
        store.set_task_state(TASK, rollouts_per_prompt=4, iteration=1)
        canon = store.prompts(TASK, "canonical")[0]
        _ended(store, canon.id, 4)  # the baseline is done
        cand = store.add_prompt(TASK, "a candidate", iteration=1)
        _ended(store, cand.id, 1)  # 3 rollouts to go
        store.set_prompt_status(store.add_prompt(TASK, "in the pool", iteration=1).id, "pool")
        # Now: 3. Pool 1 + candidate 1 < M 3: at least one more round of K 2 x N 4 = 8; at most
        # T0 3 - iteration 1 = 2 rounds.
        assert bootstrap_left(store, TASK, BUDGET) == (3 + 8, 3 + 16)


def test_episodes_until_update_adds_the_rl_batch_and_skips_the_bootstrap_once_in_rl(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path}/pde.db", tmp_path / "media") as store:
        store.ensure_task(TASK, "put the green container in the bowl")
        store.set_task_state(TASK, rollouts_per_prompt=2)
        # No supervisor has said its pool rule yet: the bootstrap's length is unknown
        assert episodes_until_update(store, [TASK], 5)[1] is None
        # The numbers come from the supervisor's published row, not the page's environment
        write_state(
            store,
            SUPERVISOR_ROW,
            SupervisorState(phase="running", iterations_t0=3, candidates_k=2, pool_min_m=3),
        )
        fewest, most, why = episodes_until_update(store, [TASK], 5)
        assert fewest > 5 and most is not None and most >= fewest and "bootstrap" in why
        assert "T0 3, K 2, M 3, the supervisor's" in why
        store.set_task_state(TASK, stage="rl")
        assert episodes_until_update(store, [TASK], 5) == (5, None, "5 labelled RL episodes")
