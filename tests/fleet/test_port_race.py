"""A fleet's server port, picked free, can be bound by another process before the server binds it (it happened
under xdist: the server exited with "address already in use" and the fleet test failed; bound before Prefect's own
check, it says "Port N is already in use"). The fleet picks another
port and starts again; a port the caller chose is never changed. The same holds for the single server
``local_prefect_server`` starts (``make ui-check`` and the deployment tests)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillflow.cli import uicheck
from skillflow.lab import fleet as fleet_module
from skillflow.lab.fleet import LocalFleet

pytestmark = [pytest.mark.slow, pytest.mark.prefect]


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another process holds, as the racing process did."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_picked_port_taken_in_between_is_picked_again(
    taken: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = iter([taken])
    real = fleet_module.free_port
    monkeypatch.setattr(fleet_module, "free_port", lambda: next(ports, None) or real())
    with LocalFleet(tmp_path / "prefect") as fleet:
        assert fleet.port != taken and fleet._get("/health") is True
    assert b"already in use" in (tmp_path / "prefect" / "server.log").read_bytes()  # the first attempt's exit


def test_a_port_the_caller_chose_is_not_changed(taken: int, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="prefect server exited"), LocalFleet(tmp_path / "prefect", port=taken):
        pass


def test_the_ui_check_server_picks_again_too(taken: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ports = iter([taken])
    real = uicheck.free_port
    monkeypatch.setattr(uicheck, "free_port", lambda: next(ports, None) or real())
    with uicheck.local_prefect_server(tmp_path / "prefect", timeout=120) as api_url:
        assert f":{taken}/" not in api_url and uicheck._healthy(api_url)
    assert b"already in use" in (tmp_path / "prefect" / "server.log").read_bytes()
    assert not uicheck._healthy(api_url)  # stopped on the way out


def test_the_ui_check_server_keeps_a_port_the_caller_chose(taken: int, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="already in use"), uicheck.local_prefect_server(tmp_path / "p", port=taken):
        pass
