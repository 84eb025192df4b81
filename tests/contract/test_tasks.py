"""The task catalogue: the paper's ten built in, a lab's own from a TOML tasks file; every service's
settings read the same file (PDE_TASKS_FILE) and stop on an unknown task or a bad field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from learner.loop.settings import LoopSettings
from operator_ui.settings import UISettings
from pde_contract.tasks import PAPER_TASKS, TasksFileError, UnknownTaskError, load_tasks
from supervisor.settings import SupervisorSettings
from tests.helpers import REPO_ROOT

EXAMPLE = REPO_ROOT / "config" / "tasks.example.toml"
LAB_TASK = """
[tasks.stack_cups]
prompt = "stack the blue cup on the red cup"
reset_joints_rad = [0.0, -0.6, 0.0, -2.3, 0.0, 1.7, 0.785]
reset_instructions = "Red cup on the cross, blue cup on the left mark."
success_description = "The blue cup sits inside the red cup, upright."
max_chunks = 12
"""


def tasks_file(tmp_path: Path, text: str = LAB_TASK) -> Path:
    path = tmp_path / "tasks.toml"
    path.write_text(text)
    return path


def test_the_paper_tasks_are_built_in_and_a_file_adds_the_labs() -> None:
    assert load_tasks("").names == list(PAPER_TASKS)
    assert all(t.builtin for t in load_tasks(None).tasks.values())
    catalogue = load_tasks(EXAMPLE)  # the committed example is valid
    lab = [t for t in catalogue.tasks.values() if not t.builtin]
    assert lab and all(t.prompt and t.reset_instructions and t.success_description for t in lab)


def test_a_lab_task_carries_every_field(tmp_path: Path) -> None:
    spec = load_tasks(tasks_file(tmp_path)).get("stack_cups")
    assert (spec.prompt, spec.builtin, spec.max_chunks) == ("stack the blue cup on the red cup", False, 12)
    assert spec.reset_joints_rad == (0.0, -0.6, 0.0, -2.3, 0.0, 1.7, 0.785)
    assert spec.reset_instructions.startswith("Red cup") and spec.success_description.endswith("upright.")


def test_a_file_adds_the_labs_words_to_a_paper_task_but_keeps_its_prompt(tmp_path: Path) -> None:
    name = "put_green_container_in_bowl"
    path = tasks_file(tmp_path, f'[tasks.{name}]\nsuccess_description = "container inside the bowl"\n')
    spec = load_tasks(path).get(name)
    assert (spec.prompt, spec.builtin, spec.success_description) == (
        PAPER_TASKS[name],
        True,
        "container inside the bowl",
    )
    reworded = tasks_file(tmp_path, f'[tasks.{name}]\nprompt = "drop the green box in the bowl"\n')
    with pytest.raises(TasksFileError, match=rf"tasks\.{name}\.prompt: .*one of the paper's tasks"):
        load_tasks(reworded)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[tasks.a]\nprompt = "x"\nmax_chunks = 0\n', r"tasks\.a\.max_chunks: .*greater than or equal to 1"),
        ('[tasks.a]\nprompt = "x"\nreset_joints_rad = [0.0, 1.0]\n', r"tasks\.a\.reset_joints_rad"),
        ('[tasks.a]\nprompt = "x"\nreset_joints_rad = [0, 0, 0, -2, 0, 2, nan]\n', r"reset_joints_rad\.6"),
        ('[tasks.a]\nprompt = "x"\nsucces_description = "typo"\n', r"tasks\.a\.succes_description: Extra"),
        ('[tasks.a]\nprompt = "  "\n', r"tasks\.a\.prompt"),
        ('[tasks.a]\nreset_instructions = "no prompt"\n', r"tasks\.a\.prompt: missing"),
        ('[tasks.Bad-Name]\nprompt = "x"\n', r"tasks\.Bad-Name"),
        ("[tasks.a\n", "not valid TOML"),
    ],
)
def test_a_bad_file_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tasks_file(tmp_path, text)
    with pytest.raises(TasksFileError, match=field) as info:
        load_tasks(path)
    assert str(path) in str(info.value)


def test_a_missing_file_says_which_and_where_it_is_named(tmp_path: Path) -> None:
    with pytest.raises(TasksFileError, match=r"cannot read the tasks file .*nope\.toml \(PDE_TASKS_FILE\)"):
        load_tasks(tmp_path / "nope.toml")


def test_an_unknown_task_lists_the_known_ones(tmp_path: Path) -> None:
    catalogue = load_tasks(tasks_file(tmp_path))
    with pytest.raises(UnknownTaskError) as info:
        catalogue.get("stack_cup")
    msg = str(info.value)
    assert "unknown task(s) ['stack_cup']" in msg and "PDE_TASKS_FILE" in msg
    assert all(name in msg for name in [*PAPER_TASKS, "stack_cups"])


def test_every_service_reads_the_one_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDE_TASKS_FILE", str(tasks_file(tmp_path)))
    loop = LoopSettings.model_validate({"tasks": ["stack_cups"], "max_chunks": 30})
    assert loop.catalogue.get("stack_cups").prompt == "stack the blue cup on the red cup"
    assert (loop.max_chunks_of("stack_cups"), loop.max_chunks_of("put_tape_on_top_rack")) == (12, 30)
    assert SupervisorSettings(tasks=["stack_cups"]).tasks_file == str(tmp_path / "tasks.toml")
    assert UISettings().catalogue.get("stack_cups").reset_instructions.startswith("Red cup")


@pytest.mark.parametrize("make", [LoopSettings, SupervisorSettings])
def test_loop_and_supervisor_stop_on_an_unknown_task(make: type, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"unknown task\(s\) \['stack_cup'\].*stack_cups"):
        make(tasks=["stack_cup"], tasks_file=str(tasks_file(tmp_path)))


@pytest.mark.parametrize("make", [LoopSettings, SupervisorSettings, UISettings])
def test_every_service_stops_on_a_bad_file(make: type, tmp_path: Path) -> None:
    path = tasks_file(tmp_path, '[tasks.a]\nprompt = "x"\nmax_chunks = -1\n')
    with pytest.raises(ValidationError, match=r"tasks\.a\.max_chunks"):
        make(tasks_file=str(path))
