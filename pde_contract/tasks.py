"""The tasks every service knows: the paper's ten real-world tasks (App. C.2), built in and worded
exactly as the paper lists them, plus a lab's own from a TOML tasks file (``PDE_TASKS_FILE``,
example: config/tasks.example.toml). The loop, the supervisor, the operator page and SFT read one
``TaskCatalogue`` from ``load_tasks``; the simulator can lay out only the built-in ten.

A file entry adds a task (``prompt`` required) or, under a built-in name, adds the lab's reset
pose, reset instructions, success description or episode length to it (its prompt stays the
paper's: stored episodes and the simulator use it)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PAPER_TASKS: dict[str, str] = {
    "put_green_container_in_bowl": "put the green container in the bowl",
    "put_tape_on_top_rack": "put the tape on the top rack",
    "put_bowl_on_top_rack": "put the bowl on the top rack",
    "put_green_container_in_front_of_camera": "put the green container in front of the camera",
    "put_bowl_in_front_of_camera": "put the bowl in front of the camera",
    "open_top_drawer_and_put_bowl_inside": "open the top drawer and put the bowl inside",
    "open_bottom_drawer_and_put_bowl_inside": "open the bottom drawer and put the bowl inside",
    "open_top_drawer_and_put_tape_inside": "open the top drawer and put the tape inside",
    "open_top_drawer_and_put_green_container_inside": (
        "open the top drawer and put the green container inside"
    ),
    "put_green_container_on_bottom_rack": "put the green container on the bottom rack",
}

# The headline experiment's tasks (paper tasks 1, 8, 10).
HEADLINE_TASKS: tuple[str, ...] = (
    "put_green_container_in_bowl",
    "open_top_drawer_and_put_tape_inside",
    "put_green_container_on_bottom_rack",
)

TASK_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,99}$"  # snake_case: a file name, a URL part, a metric prefix
FiniteRad = Annotated[float, Field(allow_inf_nan=False)]
# FR3 joint positions q1..q7 (rad), as franky's JointMotion and RobotState take them.
JointPose = tuple[FiniteRad, FiniteRad, FiniteRad, FiniteRad, FiniteRad, FiniteRad, FiniteRad]
NonBlank = Annotated[str, Field(min_length=1, pattern=r"\S")]


class TaskFileEntry(BaseModel):
    """One ``[tasks.<name>]`` table of the tasks file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: NonBlank | None = None
    """The canonical prompt: the instruction the policy is trained for and PDE rephrases. Required
    for a new task; a built-in task keeps the paper's (leave it out, or repeat it exactly)."""
    reset_joints_rad: JointPose | None = None
    """Where the arm goes when the loop resets for this task (q1..q7, rad); none: the robot's
    home. The robot server refuses a pose outside its joint limits or workspace box."""
    reset_instructions: str = ""
    """Shown on the operator page while the loop waits for Start: how to lay out the scene."""
    success_description: str = ""
    """What counts as success, for the VLM that proposes each episode's label (and the operator)."""
    max_chunks: Annotated[int, Field(ge=1)] | None = None
    """Longest episode in action chunks; none: the loop's PDE_LOOP_MAX_CHUNKS."""


class TasksFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tasks: dict[Annotated[str, Field(pattern=TASK_NAME_PATTERN)], TaskFileEntry] = {}


@dataclass(frozen=True)
class TaskSpec:
    """One known task, as every service reads it."""

    name: str
    prompt: str  # canonical
    builtin: bool  # one of the paper's ten: the simulator can lay out its scene
    reset_joints_rad: tuple[float, ...] | None = None
    reset_instructions: str = ""
    success_description: str = ""
    max_chunks: int | None = None


class UnknownTaskError(ValueError):
    pass


class TasksFileError(ValueError):
    pass


@dataclass(frozen=True)
class TaskCatalogue:
    tasks: Mapping[str, TaskSpec]
    source: str  # where the lab's tasks came from ("" : the built-in ten only)

    @property
    def names(self) -> list[str]:
        return list(self.tasks)

    def get(self, name: str) -> TaskSpec:
        self.check([name])
        return self.tasks[name]

    def check(self, names: Iterable[str]) -> list[str]:
        """``names`` as a list when every one is known; else UnknownTaskError listing the known."""
        names = list(names)
        bad = [n for n in names if n not in self.tasks]
        if bad or not names:
            where = f"the paper's ten and those of {self.source}" if self.source else "the paper's ten"
            raise UnknownTaskError(
                f"unknown task(s) {bad or '(none given)'}; known tasks ({where}): {', '.join(self.tasks)}. "
                "A lab's own task goes into the tasks file named by PDE_TASKS_FILE (docs/lab-setup.md)."
            )
        return names


def _problems(e: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']} (got {err.get('input')!r})"
        for err in e.errors()
    )


def load_tasks(path: str | Path | None) -> TaskCatalogue:
    """The built-in ten plus the tasks of the TOML file at ``path`` (None or "": built-ins only).
    TasksFileError names the file and the field that is wrong."""
    builtin = {n: TaskSpec(n, p, builtin=True) for n, p in PAPER_TASKS.items()}
    if path is None or not str(path).strip():
        return TaskCatalogue(builtin, "")
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TasksFileError(f"cannot read the tasks file {path} (PDE_TASKS_FILE): {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise TasksFileError(f"tasks file {path}: not valid TOML: {e}") from None
    try:
        parsed = TasksFile.model_validate(raw)
    except ValidationError as e:
        raise TasksFileError(
            f"tasks file {path}: {_problems(e)} (fields: pde_contract/tasks.py TaskFileEntry; "
            "example: config/tasks.example.toml)"
        ) from None
    tasks = dict(builtin)
    for name, entry in parsed.tasks.items():
        paper = PAPER_TASKS.get(name)
        if paper is None and entry.prompt is None:
            raise TasksFileError(
                f"tasks file {path}: tasks.{name}.prompt: missing; a new task needs its canonical prompt"
            )
        if paper is not None and entry.prompt not in (None, paper):
            raise TasksFileError(
                f"tasks file {path}: tasks.{name}.prompt: {name} is one of the paper's tasks, whose prompt "
                f"stays {paper!r} (got {entry.prompt!r}); give the task another name to word it your way"
            )
        tasks[name] = TaskSpec(
            name=name,
            prompt=(entry.prompt or paper or "").strip(),
            builtin=paper is not None,
            reset_joints_rad=entry.reset_joints_rad,
            reset_instructions=entry.reset_instructions.strip(),
            success_description=entry.success_description.strip(),
            max_chunks=entry.max_chunks,
        )
    return TaskCatalogue(tasks, str(path))
