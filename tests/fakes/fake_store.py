"""FakeStore: an in-memory stand-in for ``pde_storage.Store`` with the same method shapes.

Used by the supervisor's tests only where the real store is not importable (it is built in
parallel); the tests prefer the real Store on SQLite whenever ``pde_storage`` exists.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pde_contract.episodes import EpisodeFile, write_episode


@dataclass
class _Task:
    name: str
    canonical_prompt: str
    stage: str = "bootstrap"
    iteration: int = 0
    alpha: float = 1.0
    ema_success: float | None = None


@dataclass
class _Prompt:
    id: int
    task: str
    text: str
    status: str
    source: str
    iteration: int
    summary: str = ""


@dataclass
class _Episode:
    id: int
    task: str
    rollout_prompt: str
    canonical_prompt: str
    prompt_id: int
    policy_version: int
    stage: str
    status: str = "running"
    success: bool | None = None
    vlm_proposal: bool | None = None
    vlm_reason: str = ""
    file_path: str = ""
    abort_reason: str = ""


@dataclass
class _Label:
    episode_id: int
    success: bool
    source: str
    reason: str


@dataclass
class FakeStore:
    media_dir: Path
    _tasks: dict[str, _Task] = field(default_factory=dict)
    _prompts: dict[int, _Prompt] = field(default_factory=dict)
    _episodes: dict[int, _Episode] = field(default_factory=dict)
    _labels: list[_Label] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def ensure_task(self, name: str, canonical_prompt: str) -> _Task:
        if name not in self._tasks:
            self._tasks[name] = _Task(name, canonical_prompt)
            pid = next(self._ids)
            self._prompts[pid] = _Prompt(pid, name, canonical_prompt, "canonical", "canonical", 0)
        return self._tasks[name]

    def tasks(self) -> list[_Task]:
        return list(self._tasks.values())

    def task_state(self, task: str) -> _Task:
        return dataclasses.replace(self._tasks[task])

    def set_task_state(self, task: str, **fields: Any) -> _Task:
        for k, v in fields.items():
            if k not in ("stage", "iteration", "alpha", "ema_success"):
                raise ValueError(f"unknown task-state field {k}")
            setattr(self._tasks[task], k, v)
        return self.task_state(task)

    def add_prompt(
        self, task: str, text: str, status: str = "candidate", source: str = "vlm", iteration: int = 0
    ) -> _Prompt:
        text = " ".join(text.split())
        for p in self._prompts.values():
            if p.task == task and p.text == text:
                return dataclasses.replace(p)
        pid = next(self._ids)
        self._prompts[pid] = _Prompt(pid, task, text, status, source, iteration)
        return dataclasses.replace(self._prompts[pid])

    def prompts(self, task: str, status: str | None = None) -> list[Any]:
        out = []
        for p in self._prompts.values():
            if p.task == task and (status is None or p.status == status):
                eps = [e for e in self._episodes.values() if e.prompt_id == p.id and e.success is not None]
                row = dataclasses.replace(p)
                row.n_episodes, row.n_success = len(eps), sum(bool(e.success) for e in eps)  # type: ignore[attr-defined]
                out.append(row)
        return out

    def set_prompt_status(self, prompt_id: int, status: str, summary: str = "") -> _Prompt:
        p = self._prompts[prompt_id]
        if p.status == "canonical":
            raise ValueError("canonical prompt status is fixed")
        p.status = status
        if summary:
            p.summary = summary
        return dataclasses.replace(p)

    def set_prompt_summary(self, prompt_id: int, summary: str) -> _Prompt:
        self._prompts[prompt_id].summary = summary
        return dataclasses.replace(self._prompts[prompt_id])

    def create_episode(self, task: str, rollout_prompt_id: int, policy_version: int, stage: str) -> _Episode:
        p = self._prompts[rollout_prompt_id]
        eid = next(self._ids)
        self._episodes[eid] = _Episode(
            eid, task, p.text, self._tasks[task].canonical_prompt, p.id, policy_version, stage
        )
        return dataclasses.replace(self._episodes[eid])

    def finish_episode(self, episode_id: int, episode_file: EpisodeFile) -> _Episode:
        e = self._episodes[episode_id]
        path = self.media_dir / "episodes" / f"{episode_id}.msgpack"
        write_episode(path, episode_file)
        e.file_path, e.status = str(path), "awaiting_label"
        return dataclasses.replace(e)

    def add_label(self, episode_id: int, success: bool, source: str = "operator", reason: str = "") -> _Label:
        e = self._episodes[episode_id]
        if e.status in ("running", "aborted"):
            raise ValueError(f"episode {episode_id} is {e.status}")
        lab = _Label(episode_id, bool(success), source, reason)
        self._labels.append(lab)
        if source == "vlm":
            e.vlm_proposal, e.vlm_reason = bool(success), reason
        else:
            e.success, e.status = bool(success), "labelled"
        return lab

    def labels(self, episode_id: int) -> list[_Label]:
        return [lab for lab in self._labels if lab.episode_id == episode_id]

    def episodes(
        self,
        task: str | None = None,
        status: str | Iterable[str] | None = None,
        since_id: int = 0,
        limit: int | None = None,
    ) -> list[_Episode]:
        statuses = {status} if isinstance(status, str) else set(status) if status is not None else None
        out = [
            dataclasses.replace(e)
            for e in self._episodes.values()
            if e.id > since_id
            and (task is None or e.task == task)
            and (statuses is None or e.status in statuses)
        ]
        return out[:limit] if limit is not None else out

    def record_supervisor_call(
        self,
        kind: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
        latency_s: float,
        ok: bool,
        error: str = "",
    ) -> None:
        self.calls.append(
            dict(
                kind=kind,
                model=model,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost_usd=cost_usd,
                latency_s=latency_s,
                ok=ok,
                error=error,
                time=time.time(),
            )
        )

    def supervisor_calls(self, limit: int = 100) -> list[SimpleNamespace]:
        return [SimpleNamespace(**c) for c in reversed(self.calls)][:limit]

    def set_service_state(self, name: str, state: dict[str, Any]) -> None:
        self.states[name] = dict(state)

    def service_states(self) -> dict[str, SimpleNamespace]:
        return {k: SimpleNamespace(name=k, state=dict(v)) for k, v in self.states.items()}
