"""The shared HTTP endpoint server (``sparktap/endpoints.py``) and the collector's health body: bearer tokens,
generic 500 bodies, the listen queue, socket timeouts, and components' liveness in ``/healthz``."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter
from pydantic import SecretStr

from sparktap.collector.health import HealthState
from sparktap.endpoints import BACKLOG, HttpEndpoints

TOKEN = "t0ken-canary"  # noqa: S105 - a test value


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def endpoints() -> Iterator[HttpEndpoints]:
    registry = CollectorRegistry()
    Counter("sparktap_test_things", "things", registry=registry).inc(3)

    def broken(query: dict[str, list[str]]) -> tuple[int, object]:
        raise RuntimeError("secret internal detail /var/lib/x")

    server = HttpEndpoints(
        "127.0.0.1", 0, registries=[registry], health=lambda: (200, {"status": "ok"}), socket_timeout=0.5
    )
    server.route("/private", lambda q: (200, {"got": q.get("a", [])}), SecretStr(TOKEN))
    server.route("/broken", broken)
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_metrics_come_from_the_registry_and_health_from_its_probe(endpoints: HttpEndpoints) -> None:
    base = f"http://127.0.0.1:{endpoints.port}"
    code, body = _get(base + "/metrics")
    assert code == 200 and "sparktap_test_things_total 3.0" in body.decode()
    assert _get(base + "/healthz") == (200, b'{"status":"ok"}')
    code, body = _get(base + "/readyz")  # no readiness probe given: not served
    assert code == 404 and json.loads(body)["error"] == "not found: try /metrics, /healthz, /broken, /private"


def test_a_route_with_a_token_refuses_requests_without_it(endpoints: HttpEndpoints) -> None:
    url = f"http://127.0.0.1:{endpoints.port}/private?a=1"
    assert _get(url)[0] == 401
    assert _get(url, "wrong")[0] == 401
    assert _get(url, TOKEN) == (200, b'{"got":["1"]}')


def test_a_failing_route_answers_a_generic_500(endpoints: HttpEndpoints, caplog: pytest.LogCaptureFixture) -> None:
    code, body = _get(f"http://127.0.0.1:{endpoints.port}/broken")
    assert code == 500 and json.loads(body) == {"error": "internal error; see the service's log"}
    assert "secret internal detail" in caplog.text  # the cause is logged, never sent


def test_a_silent_client_is_dropped_after_the_socket_timeout(endpoints: HttpEndpoints) -> None:
    assert endpoints._server.request_queue_size == BACKLOG == 128
    with socket.create_connection(("127.0.0.1", endpoints.port), timeout=10) as silent:
        assert silent.recv(1) == b""  # the server closed it (after 0.5 s), not our 10 s timeout


def test_a_components_failed_liveness_makes_healthz_503_with_its_reason() -> None:
    state = HealthState(checks={"alerter": lambda: "the alerter thread has ended"})
    code, body = state.snapshot()
    assert code == 503
    assert (body["status"], body["reason"]) == ("component_stalled", "alerter: the alerter thread has ended")
    assert HealthState(checks={"alerter": lambda: ""}).snapshot()[0] == 200


def test_a_request_arriving_in_pieces_is_answered_and_an_oversized_one_dropped(endpoints: HttpEndpoints) -> None:
    """Requests are read by the server's loop, not a thread per connection (issue 41): a request split over
    several sends is answered once its headers end; one larger than MAX_REQUEST_BYTES is closed unanswered."""
    from sparktap.endpoints import MAX_REQUEST_BYTES

    with socket.create_connection(("127.0.0.1", endpoints.port), timeout=10) as client:
        for piece in (b"GET /heal", b"thz HTTP/1.0\r\n", b"Host: x\r\n", b"\r\n"):
            client.sendall(piece)
        answer = b""
        while chunk := client.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200 OK\r\n") and answer.endswith(b'\r\n\r\n{"status":"ok"}')
    with socket.create_connection(("127.0.0.1", endpoints.port), timeout=10) as client:
        try:
            client.sendall(b"GET /healthz HTTP/1.0\r\nX-Big: " + b"a" * MAX_REQUEST_BYTES)
            closed = client.recv(1)
        except ConnectionResetError:
            closed = b""
    assert closed == b""
    from sparktap.local.ports import wait_until

    wait_until(lambda: endpoints.open_connections == 0, 5, "both connections released")
