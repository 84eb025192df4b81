"""A request its client reported as failed (timed out) is never acted on later: the deadline
travels in the Envelope on the server's monotonic clock (issue 15: a "failed" release of the e-stop
that unlatched the robot once a stuck command thread came back)."""

from __future__ import annotations

import threading
import time

import pytest

from pde_contract.client import RobotClient, RobotServerError, ServerClock
from pde_contract.messages import ErrorCode, GetStatus, Status
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from tests.helpers import free_port
from tests.robot_server.fakes import FakeRobot

# The page's requests that must succeed (connect, estop, the second release, its status) get this
# long: 0.5 s left a loaded machine little room. The release that must fail waits behind the stuck
# request for as long as the test holds it, so it times out whatever the timeout.
PAGE_TIMEOUT_S = 3.0


def test_server_clock_keeps_the_shortest_round_trip_and_follows_an_old_one() -> None:
    clock = ServerClock(max_age_s=10.0)
    assert clock.server_deadline_s(1.0, now_s=5.0) == 0.0  # nothing known: no deadline
    clock.observe(sent_s=100.0, received_s=100.2, server_s=1000.1)  # offset 900, rtt 0.2
    clock.observe(sent_s=101.0, received_s=101.02, server_s=1001.01)  # offset 900, rtt 0.02: wins
    assert clock.offset_s == pytest.approx(900.0) and clock.rtt_s == pytest.approx(0.02)
    clock.observe(sent_s=102.0, received_s=102.5, server_s=1050.0)  # slower and young: ignored
    assert clock.offset_s == pytest.approx(900.0)
    clock.observe(sent_s=120.0, received_s=120.5, server_s=1070.25)  # the best is 19 s old: taken
    assert clock.offset_s == pytest.approx(950.0)
    assert clock.server_deadline_s(1.0, now_s=121.0) == pytest.approx(121.0 + 950.0 + 1.0)
    clock.observe(sent_s=130.0, received_s=130.01, server_s=0.0)  # a server without the field
    assert clock.offset_s == pytest.approx(950.0)


def test_a_timed_out_release_never_unlatches_the_estop_when_the_stuck_thread_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = RobotServerSettings(
        cmd_port=free_port(), obs_port=free_port(), control_rate_hz=20.0, heartbeat_timeout_s=0.0
    )
    srv = RobotServer(FakeRobot(), [], settings)
    srv.start()
    release = threading.Event()
    status = srv.status

    def stuck_status() -> Status:
        release.wait(30.0)  # the command thread hangs here until the test lets it go
        return status()

    try:
        with (
            RobotClient(
                settings.cmd_endpoint, name="page", timeout_s=PAGE_TIMEOUT_S, expire_unanswered=True
            ) as page,
            RobotClient(settings.cmd_endpoint, name="other", timeout_s=2.0) as other,
        ):
            page.connect()  # a reply: the page's client knows the server's clock
            assert page.server_clock.offset_s is not None
            page.estop("operator")
            monkeypatch.setattr(srv, "status", stuck_status)
            with pytest.raises(RobotServerError) as stuck:
                other.request(GetStatus(), timeout_s=0.2)
            assert stuck.value.code is ErrorCode.TIMEOUT
            deadline = time.monotonic() + 20.0
            while srv._handling != "GetStatus":  # the command thread is in the stuck request
                assert time.monotonic() < deadline, "the status request never reached the server"
                time.sleep(0.01)
            with pytest.raises(RobotServerError) as failed:  # queued behind the stuck request
                page.release_estop()
            assert failed.value.code is ErrorCode.TIMEOUT  # reported failed to the operator
            release.set()
            monkeypatch.setattr(srv, "status", status)
            deadline = time.monotonic() + 20.0
            while srv.executor.counters.commands_expired < 1:  # the server reached it, too late
                assert time.monotonic() < deadline, "the queued release was never answered"
                time.sleep(0.01)
            st = page.status()
            assert st.estopped, "a release reported failed unlatched the e-stop later"
            assert st.counters.commands_expired == 1
            page.release_estop()  # sent again, in time: it works
            assert not page.status().estopped
    finally:
        release.set()
        srv.close()


def test_the_operator_pages_link_sends_its_commands_with_a_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from operator_ui.robot_link import RobotLink

    settings = RobotServerSettings(
        cmd_port=free_port(), obs_port=free_port(), control_rate_hz=20.0, heartbeat_timeout_s=0.0
    )
    srv = RobotServer(FakeRobot(), [], settings)
    srv.start()
    link = RobotLink(settings.cmd_endpoint, timeout_s=PAGE_TIMEOUT_S, status_period_s=0.1)
    link.start()
    release = threading.Event()
    status = srv.status
    try:
        deadline = time.monotonic() + 20.0
        while link._watch_client.server_clock.offset_s is None:  # its status polls show the clock
            assert time.monotonic() < deadline, "the link never got a status reply"
            time.sleep(0.05)
        link.estop("operator")  # a fresh command client: the deadline uses the view's clock
        monkeypatch.setattr(srv, "status", lambda: (release.wait(30.0), status())[1])
        deadline = time.monotonic() + 20.0
        while srv._handling != "GetStatus":  # the link's own status poll is now stuck
            assert time.monotonic() < deadline, "the status poll never reached the server"
            time.sleep(0.01)
        with pytest.raises(RobotServerError):
            link.release_estop()
        release.set()
        monkeypatch.setattr(srv, "status", status)
        deadline = time.monotonic() + 20.0
        while srv.executor.counters.commands_expired < 1:
            assert time.monotonic() < deadline, "the late release was never reached"
            time.sleep(0.01)
        assert srv.executor.snapshot().estopped, "a release the page reported failed ran later"
    finally:
        release.set()
        link.close()
        srv.close()
