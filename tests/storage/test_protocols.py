"""The Store facade and its narrow Protocols stay in step with the per-aggregate repositories."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from pde_storage import Store, protocols
from pde_storage.repos import EpisodeRepository, IntentRepository, TaskRepository, TelemetryRepository

REPOSITORIES = (TaskRepository, EpisodeRepository, TelemetryRepository, IntentRepository)
PROTOCOLS = [
    p
    for p in vars(protocols).values()
    if inspect.isclass(p) and getattr(p, "_is_protocol", False) and p.__module__ == protocols.__name__
]


def _public(cls: type) -> set[str]:
    return {k for k in vars(cls) if not k.startswith("_")}


def test_each_store_method_lives_in_exactly_one_repository() -> None:
    owners: dict[str, list[str]] = {}
    for repo in REPOSITORIES:
        for name in _public(repo):
            owners.setdefault(name, []).append(repo.__name__)
    shadowed = {name: repos for name, repos in owners.items() if len(repos) > 1}
    assert shadowed == {}, "a method in two repositories: Store would silently use the first"
    facade_only = {"open", "close", "dialect"}
    store_api = {k for k in dir(Store) if not k.startswith("_")} - facade_only - {"media_dir"}
    assert store_api == set(owners)


@pytest.mark.parametrize("proto", PROTOCOLS, ids=lambda p: p.__name__)
def test_protocols_have_the_store_signatures(proto: type) -> None:
    members = {k for k in vars(proto) if not k.startswith("_")}
    for base in proto.__mro__[1:]:
        if base.__module__ == protocols.__name__:
            members |= {k for k in vars(base) if not k.startswith("_")}
    assert members, f"{proto.__name__} names no method"
    for name in sorted(members):
        mine, store = inspect.getattr_static(proto, name), inspect.getattr_static(Store, name)
        if isinstance(mine, property):
            assert isinstance(store, property), name
            continue
        assert inspect.signature(mine) == inspect.signature(store), f"{proto.__name__}.{name}"


def test_store_is_each_service_view(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path}/pde.db", tmp_path / "media") as store:
        for proto in PROTOCOLS:
            assert isinstance(store, proto), proto.__name__
        assert not isinstance(TaskRepository(store.backend), protocols.SupervisorStore)
        # a repository alone works on the shared backend
        assert TaskRepository(store.backend).ensure_task("t", "do it").name == "t"
        assert [t.name for t in store.tasks()] == ["t"]
