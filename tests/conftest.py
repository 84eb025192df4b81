"""Shared test setup. MuJoCo must know its GL backend before it is first imported."""

import os
import threading
import time

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
# Nothing may be fetched from a model hub at run time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# CI (`.ci/run` sets PDE_CI=1) installs every Debian and Python package, so a test that skips there
# hides a broken install or import (PostgreSQL, Chromium, docker-compose missing): it fails the run.
# Only tests that need hardware or a GPU may skip.
_MAY_SKIP = {"hardware", "gpu"}
_unexpected_skips: list[str] = []


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    return str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)


def _note_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if (
        os.environ.get("PDE_CI")
        and report.skipped
        and not hasattr(report, "wasxfail")
        and not _MAY_SKIP & set(getattr(report, "keywords", {}))
    ):
        _unexpected_skips.append(f"{report.nodeid}: {_skip_reason(report)}")


# Tests marked `images` build and run the container images (tests/compose/test_images.py): root,
# podman and half an hour. Left out of the selection (not skipped) unless PDE_CHECK_IMAGES=1.
OPT_IN_IMAGES = "PDE_CHECK_IMAGES"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(OPT_IN_IMAGES) == "1":
        return
    left_out = [item for item in items if item.get_closest_marker("images")]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not item.get_closest_marker("images")]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_skip(report)


# A thread a test leaves running lives on into interpreter shutdown, where a daemon thread inside
# native code (libzmq, MuJoCo, franky-sim's simulator) can crash the process after every test passed
# (seen in CI: "1277 passed", then a segmentation fault). Every test stops what it starts; this
# names what is still running and fails the run. Allowed: library threads that only sleep in Python.
_HARMLESS_THREADS = ("tqdm_monitor", "process_request_thread")  # tqdm; http.server's handlers
_LEFTOVER_GRACE_S = 10.0
_leftover_threads: list[str] = []


def _threads_left_running() -> list[str]:
    deadline = time.monotonic() + _LEFTOVER_GRACE_S
    left = []
    for t in threading.enumerate():
        if t is threading.main_thread() or any(name in t.name for name in _HARMLESS_THREADS):
            continue
        t.join(max(0.0, deadline - time.monotonic()))  # one that is stopping gets the grace
        if t.is_alive():
            left.append(f"{t.name} (daemon={t.daemon})")
    return left


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _leftover_threads.extend(_threads_left_running())
    if (_unexpected_skips or _leftover_threads) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _unexpected_skips:
        terminalreporter.section("skipped under PDE_CI=1 (fails the run)", red=True)
        for line in _unexpected_skips:
            terminalreporter.line(line)
        terminalreporter.line("install what the reason names (scripts/system-deps.sh, make install)")
    if _leftover_threads:
        terminalreporter.section("threads left running after the last test (fails the run)", red=True)
        for name in _leftover_threads:
            terminalreporter.line(name)
        terminalreporter.line(
            "a test started it and never stopped it: close the server, link or simulator it made"
        )
