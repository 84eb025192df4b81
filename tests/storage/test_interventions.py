"""A person's takeovers per episode (issue 24.3): counted from the episode file when the loop
stores it, and summed per prompt over its finished episodes."""

from __future__ import annotations

from pde_storage import Store
from tests.storage.factories import make_episode_file, with_takeovers

TASK = "put_green_container_in_bowl"


def test_takeovers_are_counted_per_episode_and_per_prompt(store: Store) -> None:
    store.ensure_task(TASK, "put the green container in the bowl")
    canon = store.prompts(TASK)[0]
    other = store.add_prompt(TASK, "drop the green box into the bowl")
    ids = [store.create_episode(TASK, pid, 0, "rl").id for pid in (canon.id, canon.id, canon.id, other.id)]
    two_takes = with_takeovers(make_episode_file(ids[0], TASK, n_chunks=8), [(1, 3), (6, 1)])
    store.finish_episode(ids[0], two_takes)
    store.finish_episode(ids[1], make_episode_file(ids[1], TASK, n_chunks=3))  # the policy alone
    store.abort_episode(ids[2], "operator aborted")  # never finished: not in the prompt's counts
    store.finish_episode(ids[3], with_takeovers(make_episode_file(ids[3], TASK, n_chunks=4), [(0, 2)]))
    store.add_label(ids[0], True, source="operator")
    rows = {e.id: (e.n_interventions, e.n_person_rows) for e in store.episodes()}
    assert rows == {ids[0]: (2, 4), ids[1]: (0, 0), ids[2]: (0, 0), ids[3]: (1, 2)}
    by_prompt = {p.id: (p.n_interventions, p.n_intervened, p.n_finished) for p in store.prompts(TASK)}
    assert by_prompt == {canon.id: (2, 1, 2), other.id: (1, 1, 1)}
    # A discarded episode leaves the statistics, its takeovers too.
    store.discard_episode(ids[3], "someone in the scene")
    assert store.prompt(other.id).n_interventions == 0
    assert store.episode(ids[3]).n_interventions == 1  # the episode itself still says what happened
