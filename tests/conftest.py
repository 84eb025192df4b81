"""Shared test setup. MuJoCo must know its GL backend before it is first imported."""

import os

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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected_skips and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _unexpected_skips:
        terminalreporter.section("skipped under PDE_CI=1 (fails the run)", red=True)
        for line in _unexpected_skips:
            terminalreporter.line(line)
        terminalreporter.line("install what the reason names (scripts/system-deps.sh, make install)")
