"""``pde record``: demonstrations of a task on the arm, take by take.

    pde record TASK --source spacemouse|keyboard|guiding [--takes N] [--demos DIR] [--cmd ENDPOINT]
    pde record --counts [--demos DIR]                   kept / discarded takes per task
    pde record --export-lerobot OUT [--demos DIR]       the demonstrations as a LeRobotDataset

Per take: Enter resets the arm to the task's pose (the sim also lays out the scene; on the FR3
reset the scene by hand first), the take records until the operator ends it (the SpaceMouse's end
button, Enter on the keyboard or while guiding), then keep or discard, with a note. Files:
``teleop/takes.py``, by default in ``<data dir>/demos`` where ``pde learner sft`` reads.

The operator page offers the same per take (its "Record demonstrations" panel, driven by the page's
keys or a gamepad): ``operator_ui/record_session.py``, with this recorder and these files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from pde_contract.settings import tasks_file_field
from pde_contract.tasks import TaskSpec, load_tasks
from teleop.base import TeleopError, TeleopSource
from teleop.page import PageCommand
from teleop.recorder import Recorder
from teleop.settings import TeleopSettings

Ask = Callable[[str], str]
Say = Callable[[str], None]
SOURCES = ("spacemouse", "keyboard", "guiding")
# How the operator ends a take, per source (the keys and buttons: teleop/keyboard.py, settings).
END_HINT = {
    "spacemouse": "press the SpaceMouse's end button",
    "keyboard": "press Enter (w/s a/d r/f move, j/l i/k u/o turn, space toggles the gripper)",
    "guiding": "press Enter (FR3: hold the pilot's guiding button to move the arm)",
}


def _parser(settings: TeleopSettings) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pde record", description="record demonstrations on the arm")
    p.add_argument("task", nargs="?", help="the task to demonstrate (the tasks file's or the built-in ten)")
    p.add_argument("--source", choices=SOURCES, default="spacemouse", help="how the operator demonstrates")
    p.add_argument("--takes", type=int, default=10, help="takes to offer (q at the prompt stops early)")
    p.add_argument(
        "--demos",
        type=Path,
        default=settings.demos,
        help="where takes are written (default: <data dir>/demos)",
    )
    p.add_argument("--cmd", default=settings.cmd_endpoint, help="the robot server's command endpoint")
    p.add_argument("--seed", type=int, default=None, help="sim: scene seed of the first take (then +1)")
    p.add_argument("--max-take-s", type=float, default=settings.max_take_s, help="a take's longest length")
    p.add_argument("--counts", action="store_true", help="print kept / discarded takes per task and exit")
    p.add_argument(
        "--export-lerobot", type=Path, metavar="OUT", help="write the kept takes as a LeRobotDataset"
    )
    p.add_argument("--vcodec", choices=["libsvtav1", "h264"], default="libsvtav1", help="export video codec")
    p.add_argument("--overwrite", action="store_true", help="export: replace a non-empty OUT")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        settings = TeleopSettings()
    except ValueError as e:
        print(f"pde record: bad PDE_TELEOP_* setting: {e}", file=sys.stderr)
        return 2
    args = _parser(settings).parse_args(argv)
    if args.counts:
        return _print_counts(args.demos, print)
    if args.export_lerobot is not None:
        return _export(args.demos, args.export_lerobot, args.vcodec, args.overwrite)
    if not args.task:
        print("pde record: name the TASK to demonstrate (or --counts / --export-lerobot)", file=sys.stderr)
        return 2
    if args.takes < 1:
        print(f"pde record: --takes {args.takes} must be at least 1", file=sys.stderr)
        return 2
    try:
        task = load_tasks(_tasks_file()).get(args.task)
        settings = settings.model_copy(update={"max_take_s": args.max_take_s})
    except ValueError as e:
        print(f"pde record: {e}", file=sys.stderr)
        return 2
    from pde_contract.client import RobotClient, RobotServerError
    from pde_contract.link import client_curve_for_command

    curve = client_curve_for_command("pde record")  # PDE_ROBOT_LINK_*: the robot link's CURVE keys

    try:
        source = _make_source(args.source, settings)
        with RobotClient(args.cmd, name="pde-record", timeout_s=5.0, curve=curve) as client:
            recorder = Recorder(client, settings)
            return run_session(recorder, source, task, args.takes, args.demos, input, print, args.seed)
    except (TeleopError, RobotServerError) as e:
        print(f"pde record: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, EOFError):
        print("\npde record: stopped; kept takes are on disk", file=sys.stderr)
        return 130


def _tasks_file() -> str:
    from pydantic_settings import BaseSettings

    class _Tasks(BaseSettings):
        tasks_file: str = tasks_file_field()

    return _Tasks().tasks_file


def person_source(
    settings: TeleopSettings, page_commands: Callable[[], PageCommand | None] | None = None
) -> TeleopSource | None:
    """Who may take over from the policy during RL (``PDE_TELEOP_PERSON``), connected; None for
    ``none``. Raises TeleopError saying what to fix when the device is missing. ``page``: the
    page's keys and gamepad, as ``page_commands`` reads them (learner/loop/takeover.py)."""
    if settings.person == "page":
        from teleop.page import PageSource

        if page_commands is None:
            raise TeleopError(
                "PDE_TELEOP_PERSON=page needs the page's commands (the loop reads the database)"
            )
        source = PageSource(page_commands, settings)
        source.connect()
        return source
    return None if settings.person == "none" else _make_source(settings.person, settings)


def _make_source(name: str, settings: TeleopSettings) -> TeleopSource:
    from teleop.guiding import HandGuidingSource
    from teleop.keyboard import KeyboardSource, TerminalKeys
    from teleop.spacemouse import SpaceMouseSource

    if name == "spacemouse":
        source = SpaceMouseSource(settings)
        source.connect()  # now, so that a missing device is said before the first reset
        return source
    if name == "keyboard":
        return KeyboardSource(TerminalKeys, settings)
    return HandGuidingSource(TerminalKeys)


def run_session(
    recorder: Recorder,
    source: TeleopSource,
    task: TaskSpec,
    takes: int,
    demos_dir: Path,
    ask: Ask,
    say: Say,
    seed: int | None = None,
) -> int:
    """Offer ``takes`` takes of ``task``: reset, record, keep or discard with a note, counts."""
    from teleop.takes import counts_per_task, save_take

    instructions = f" ({task.reset_instructions})" if task.reset_instructions else ""
    for i in range(takes):
        if (
            ask(f"take {i + 1}/{takes} of {task.name}{instructions}: Enter resets the arm, q quits ").strip()
            == "q"
        ):
            break
        take_seed = None if seed is None else seed + i
        recorder.reset(task, take_seed)
        say(f"recording: {END_HINT.get(source.name, 'the source ends the take')}")
        with source:
            take = recorder.record(source, task, take_seed)
        st = take.stats
        say(
            f"{st.rows_recorded} rows in {st.duration_s:.1f} s: {st.rows_expected} control ticks, "
            f"{st.rows_dropped} dropped, {st.rows_stale_observation} with an older camera frame"
            + ("" if st.rows_executed is None else f", {st.rows_executed} executed by the server")
            + (f", {st.rows_clipped} clipped by its safety limits" if st.rows_clipped else "")
            + (f", {st.rows_watchdog_dropped} watchdog trips" if st.rows_watchdog_dropped else "")
            + (f", {st.rows_repeated} repeated (the next row came late)" if st.rows_repeated else "")
            + ("" if take.task_success is None else f"; the simulator's check: {take.task_success}")
        )
        keep = ask("keep this take? [y/N] ").strip().lower().startswith("y")
        note = ask("note (Enter for none): ").strip()
        paths = save_take(demos_dir, take, keep, note)
        kept, discarded = counts_per_task(demos_dir).get(task.name, (0, 0))
        say(f"{'kept' if keep else 'discarded'}: {paths[0]}; {task.name}: {kept} kept, {discarded} discarded")
    return 0


def _print_counts(demos_dir: Path, say: Say) -> int:
    from teleop.takes import counts_per_task

    counts = counts_per_task(demos_dir)
    if not counts:
        say(f"no takes under {demos_dir}")
    for task, (kept, discarded) in counts.items():
        say(f"{task:<50} {kept:4d} kept {discarded:4d} discarded")
    return 0


def _export(demos_dir: Path, out: Path, vcodec: str, overwrite: bool) -> int:
    try:
        from pde_storage.lerobot_export import ExportConfig, ExportError, export_lerobot
    except ImportError as e:
        print(f"pde record: {e}; install the storage extra: pip install -e '.[storage]'", file=sys.stderr)
        return 2
    try:
        report = export_lerobot(
            demos_dir,
            out,
            ExportConfig(vcodec=vcodec, only_success=True, overwrite=overwrite),
        )
    except ExportError as e:
        print(f"pde record: {e}", file=sys.stderr)
        return 2
    print(f"wrote {report.episodes} takes, {report.frames} rows, {report.tasks} tasks to {report.out_dir}")
    return 0
