"""The services' typed state rows (pde_contract.service_state) in and out of the store."""

from __future__ import annotations

from datetime import datetime

from pde_contract.service_state import (
    RUN_CONTROL_ROW,
    RunControl,
    ServiceMessage,
    State,
    decode_state,
    encode_state,
)
from pde_storage.protocols import ServiceStates


def write_state(store: ServiceStates, name: str, state: ServiceMessage) -> None:
    store.set_service_state(name, encode_state(state))


def read_state(store: ServiceStates, name: str, kind: type[State]) -> tuple[State | None, datetime | None]:
    """The row ``name`` as ``kind`` and when it was written; (None, None) when absent or written by
    an older version this one cannot read."""
    row = store.service_states().get(name)
    state = decode_state(row.state, kind) if row is not None else None
    return (state, row.updated_at) if row is not None and state is not None else (None, None)


def run_control(store: ServiceStates) -> RunControl:
    """The page's pause / practice switch; not paused when never set."""
    return read_state(store, RUN_CONTROL_ROW, RunControl)[0] or RunControl()
