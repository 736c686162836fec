"""The arithmetic of worker reports: what a worker sends and how the coordinator folds it
into its rates and its scaler (the processes themselves: tests/integration/test_workers.py)."""

from __future__ import annotations

import asyncio
import json
import os
from types import SimpleNamespace
from typing import Any

import pytest

from elastic_cache.cli import build_parser
from elastic_cache.cli.options import cluster_settings
from elastic_cache.config import ClusterSettings
from elastic_cache.config.coordinator import MAX_WORKERS, ProvisionerKind, auto_workers
from elastic_cache.coordinator.cachedanswers import Counters
from elastic_cache.coordinator.crosszone import CrossZoneMeter
from elastic_cache.coordinator.scaler import RateMeter
from elastic_cache.coordinator.workers import LeaderControl, WorkerView, _CountingMeter
from elastic_cache.errors import ConfigError
from elastic_cache.metrics.meter import RequestMeter


class FakeScaler:
    def __init__(self) -> None:
        self.writes: list[tuple[str, int, int, int]] = []
        self.helped: list[str] = []

    def observe_write(self, node: str, used: int, capacity: int, size: int) -> None:
        self.writes.append((node, used, capacity, size))

    def request_help(self, node: str, *, full: bool) -> bool:
        self.helped.append(node)
        return True

    def at_cap(self) -> str | None:
        return None


def leader() -> tuple[LeaderControl, Any]:
    zones = {"a": "us-east-1a", "b": "us-east-1b"}
    nodes = {
        n: SimpleNamespace(requests=RateMeter(10.0), handle=SimpleNamespace(zone=zones[n]))
        for n in ("a", "b")
    }
    coord: Any = SimpleNamespace(
        rate=RateMeter(10.0),
        cluster=SimpleNamespace(nodes=nodes),
        scaler=FakeScaler(),
        cross_zone=CrossZoneMeter(home_zone="us-east-1a", clock=lambda: 0.0),
        readthrough=SimpleNamespace(counts=Counters(), hot=SimpleNamespace(hits=1)),
        metrics=SimpleNamespace(worker_requests=RequestMeter()),
    )
    return LeaderControl(coord), coord


def test_a_report_feeds_the_rates_and_the_scaler() -> None:
    control, coord = leader()
    control.apply(
        {
            "worker": 1,
            "pid": 42,
            "total": 7,
            "requests": {"a": 5, "b": 2, "gone": 9},
            "fills": {"a": [10, 100, 3072], "gone": [1, 1, 1]},
            "help": ["b", "gone"],
            "bytes": {"a": 1000, "b": 300, "gone": 5000},
            "answered": 70,
        }
    )
    # Only b is in another zone than the coordinator; a node that left is ignored.
    assert coord.cross_zone.total == 300
    assert coord.rate._count == 7
    assert coord.cluster.nodes["a"].requests._count == 5
    assert coord.cluster.nodes["b"].requests._count == 2
    assert coord.scaler.writes == [("a", 10, 100, 3072)]  # nodes no longer members: ignored
    assert coord.scaler.helped == ["b"]
    assert control.workers[1]["pid"] == 42 and control.workers[1]["answered"] == 70


def test_a_report_adds_the_workers_read_through_hits_and_answers() -> None:
    control, coord = leader()
    meter = RequestMeter()
    meter.record("svc", "GET", 200, 0.001)
    report = {
        "worker": 1,
        "read_through": {"hits": 4, "not_modified": 1, "hot_hits": 3, "misses": 9},
        "meter": RequestMeter.added_since(meter.export(), {}),
    }
    control.apply(report)
    control.apply({**report, "meter": {"svc GET": "not a series"}, "read_through": []})
    control.apply({**report, "meter": [], "read_through": {"hits": "x", "not_modified": -4}})
    counts = coord.readthrough.counts
    # A worker answers hits only: anything else it names is not taken.
    # Malformed figures are left out, the rest taken; the report is never refused.
    assert (counts.hits, counts.not_modified, counts.misses) == (4, 1, 0)
    assert coord.readthrough.hot.hits == 4
    assert coord.metrics.worker_requests.count("svc", "GET", 200) == 1


async def test_a_worker_reports_each_count_once_and_the_last_fill() -> None:
    settings = ClusterSettings.from_mapping({})
    view = WorkerView(settings, control=None)  # type: ignore[arg-type]
    try:
        client = SimpleNamespace(bytes_exchanged=0)
        view.nodes = {"a": SimpleNamespace(requests=_CountingMeter(), client=client)}  # type: ignore[dict-item]
        rate = _CountingMeter()
        for _ in range(3):
            rate.hit()
            view.nodes["a"].requests.hit()
        view.observe_write("a", 5, 100, 1024)
        view.observe_write("a", 6, 100, 1024)
        view.observe_write("a", -1, -1, 0)  # no fill reported: ignored
        assert view.request_help("a", full=True)
        client.bytes_exchanged = 4096
        first = view.report(1, rate, answered=3)
        assert first["bytes"] == {"a": 4096}
        assert first["total"] == 3 and first["requests"] == {"a": 3}
        assert first["fills"] == {"a": [6, 100, 2048]} and first["help"] == ["a"]
        second = view.report(1, rate, answered=3)
        assert second["bytes"] == {}  # each byte is reported once
        client.bytes_exchanged = 5000
        assert view.report(1, rate, answered=3)["bytes"] == {"a": 904}
        # A new client for the node (a new address) counts from 0.
        view.nodes["a"].client = SimpleNamespace(bytes_exchanged=10)
        assert view.report(1, rate, answered=3)["bytes"] == {"a": 10}
        assert second["total"] == 0 and second["requests"] == {}
        assert second["fills"] == {} and second["help"] == []
    finally:
        view.nodes = {}
        await view.close()


class FakeLeader:
    """The leader's control socket answering ``GET /follow`` with ``view``."""

    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view

    def get(self, url: str) -> Any:
        leader = self

        class Answer:
            async def __aenter__(self) -> Any:
                return self

            async def __aexit__(self, *exc: object) -> None:
                return None

            def raise_for_status(self) -> None:
                return None

            async def json(self) -> dict[str, Any]:
                return leader.view

            async def read(self) -> bytes:
                return b"{}"

        return Answer()


async def test_a_worker_follows_the_leaders_namespace_table() -> None:
    from elastic_cache.namespaces import NamespaceTable

    settings = ClusterSettings.from_mapping(
        {"cluster": {"replication": 2}, "namespaces": {"a": {"prefix": "a/"}}}
    )
    live = settings.namespaces.changed("a", {"write_quorum": 1})
    from elastic_cache.hashing import make_hasher
    from elastic_cache.ring import HashRing

    ring = HashRing(make_hasher("murmur3")).to_dict()
    view = WorkerView(settings, control=FakeLeader({"ring": ring, "nodes": {}}))  # type: ignore[arg-type]
    heard: list[NamespaceTable] = []
    view.namespace_listeners.append(heard.append)
    try:
        await view.follow()  # an older leader sends no table: nothing changes
        assert heard == [] and view.namespaces == settings.namespaces
        view._control = FakeLeader({"ring": ring, "nodes": {}, "namespaces": live.to_json()})  # type: ignore[assignment]
        await view.follow()
        await view.follow()  # the same table again: heard once
        assert heard == [live] and view.namespaces.policy_of("a/1").write_quorum == 1
    finally:
        await view.close()


async def test_a_421_makes_a_worker_read_the_ring_again_at_once() -> None:
    """A node's 421 means the worker's copy of the ring is older than the node's: it is
    read again then, not at the next periodic refresh half a second later (requests
    through a worker answered 421 to clients meanwhile), and once for the requests that
    meet it together."""
    from elastic_cache.hashing import make_hasher
    from elastic_cache.ring import HashRing

    settings = ClusterSettings.from_mapping({})
    old = HashRing(make_hasher("murmur3"))
    old.add_node("a")
    new = old.copy()
    new.add_node("b")
    view = WorkerView(settings, control=FakeLeader({"ring": old.to_dict(), "nodes": {}}))  # type: ignore[arg-type]
    try:
        await view.follow()
        assert view.ring.epoch == old.epoch
        leader = FakeLeader({"ring": new.to_dict(), "nodes": {}})
        asked = [0]
        real_get = leader.get

        def counted(url: str) -> Any:
            asked[0] += 1
            return real_get(url)

        leader.get = counted  # type: ignore[method-assign]
        view._control = leader  # type: ignore[assignment]
        await asyncio.gather(view.ring_moved(), view.ring_moved(), view.ring_moved())
        assert view.ring.epoch == new.epoch and asked[0] == 1
    finally:
        await view.close()


class CheckingLeader(FakeLeader):
    """A leader that, asked to check a node (``POST /check``), drops it from its view."""

    def __init__(self, view: dict[str, Any]) -> None:
        super().__init__(view)
        self.checked: list[str] = []

    def post(self, url: str, json: dict[str, Any]) -> Any:
        assert url == "http://leader/check"
        self.checked.append(json["node"])
        self.view = {**self.view, "nodes": {}}
        return super().get(url)


async def test_a_worker_has_the_leader_check_a_node_it_cannot_reach() -> None:
    """A worker's write to a node just SIGKILLed: the worker read the ring again 0.2 s
    later and, unless the leader had noticed by itself, answered 503 (review: 1 to 5
    of 300 writes after a kill). It now asks the leader to check the node, which drops
    it, so the write goes to the copies left."""
    from elastic_cache.hashing import make_hasher
    from elastic_cache.ring import HashRing

    settings = ClusterSettings.from_mapping({"cluster": {"replication": 2}})
    ring = HashRing(make_hasher("murmur3"))
    ring.add_node("a")
    leader = CheckingLeader({"ring": ring.to_dict(), "nodes": {"a": "http://127.0.0.1:1"}})
    view = WorkerView(settings, control=leader)  # type: ignore[arg-type]
    try:
        await view.follow()
        assert "a" in view.nodes
        first, again = view.suspect("a"), view.suspect("a")
        assert first is again  # one check per node at a time
        assert first is not None and await first
        assert leader.checked == ["a"] and "a" not in view.nodes
    finally:
        await view.close()


async def test_the_leader_checks_a_node_a_worker_names() -> None:
    control, coord = leader()
    dropped: list[str] = []

    async def check(node: str) -> bool:
        dropped.append(node)
        return True

    coord.cluster.suspect = lambda node: asyncio.ensure_future(check(node))
    request = SimpleNamespace(json=lambda: _done({"node": "a"}))
    answer = await control._check(request)  # type: ignore[arg-type]
    assert json.loads(answer.body) == {"dropped": True} and dropped == ["a"]
    coord.cluster.suspect = lambda node: None  # no such node: gone already
    assert json.loads((await control._check(request)).body) == {"dropped": True}  # type: ignore[arg-type]
    bad = SimpleNamespace(json=lambda: _done({"node": 3}))
    assert (await control._check(bad)).status == 400  # type: ignore[arg-type]


async def _done(value: Any) -> Any:
    return value


# -- how many processes: `workers = "auto"` -------------------------------------------------


def _cpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(count)), raising=False)


@pytest.mark.parametrize(
    ("cpus", "provisioner", "initial_nodes", "expected"),
    [
        (2, ProvisionerKind.LOCAL, 1, 1),  # this machine with `ecache up`: one process
        (8, ProvisionerKind.LOCAL, 1, 7),
        (8, ProvisionerKind.LOCAL, 3, 5),
        (8, ProvisionerKind.LOCAL, 0, 7),  # a local cluster grows nodes here: keep one core
        (4, ProvisionerKind.LOCAL, 6, 1),
        (2, ProvisionerKind.EC2, 1, 2),  # the nodes have instances of their own
        (96, ProvisionerKind.EC2, 1, MAX_WORKERS),
    ],
)
def test_auto_gives_routing_the_cpus_the_nodes_do_not_take(
    monkeypatch: pytest.MonkeyPatch,
    cpus: int,
    provisioner: ProvisionerKind,
    initial_nodes: int,
    expected: int,
) -> None:
    _cpus(monkeypatch, cpus)
    assert auto_workers(provisioner, initial_nodes) == expected


def test_auto_is_the_default_and_resolves_when_the_settings_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cpus(monkeypatch, 6)
    assert ClusterSettings().coordinator.workers == 5
    assert ClusterSettings.from_mapping({}).coordinator.workers == 5
    file = {"coordinator": {"workers": "auto", "initial_nodes": 2}}
    assert ClusterSettings.from_mapping(file).coordinator.workers == 4
    assert ClusterSettings.from_mapping({"coordinator": {"workers": 3}}).coordinator.workers == 3


@pytest.mark.parametrize("value", [0, -1, 65, "many", 2.5, True])
def test_a_bad_workers_value_is_an_error_naming_it(value: object) -> None:
    with pytest.raises(ConfigError, match="workers"):
        ClusterSettings.from_mapping({"coordinator": {"workers": value}})


def test_the_command_line_takes_a_number_or_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    _cpus(monkeypatch, 4)
    parser = build_parser()
    for argv, expected in (([], 3), (["--workers", "auto"], 3), (["--workers", "2"], 2)):
        args = parser.parse_args(["up", *argv])
        assert cluster_settings(args).coordinator.workers == expected
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--workers", "lots"])
