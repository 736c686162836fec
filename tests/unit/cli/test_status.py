"""The ``ecache status`` table, from a canned cluster view."""

from __future__ import annotations

from elastic_cache.cli.status import render_status


def test_table_shows_nodes_moves_and_launches() -> None:
    node = {
        "id": "node-1",
        "address": "http://127.0.0.1:4001",
        "index": "sorted",
        "records": 1500,
        "bytes": 3 * 1024 * 1024,
        "capacity": 2000,
        "fill": 0.75,
        "threshold": 1000.0,
        "request_rate": 3.5,
        "state": "active",
    }
    view = {
        "epoch": 4,
        "nodes": [node],
        "launching": ["node-2"],
        "launches_in_flight": [{"node": "node-2", "seconds": 2.5}],
        "unterminated": [{"node": "node-5", "ref": "i-0abc", "instance_type": "t3.small"}],
        "migrations": [
            {
                "source": "node-1",
                "destination": "node-3",
                "state": "running",
                "records": 0,
                "sent": 400,
                "total": 1000,
            },
            {
                "source": "node-1",
                "destination": "node-4",
                "state": "done",
                "records": 9,
                "sent": 9,
                "total": 9,
            },
        ],
        "hit_rate": 0.5,
        "request_rate": 12.0,
        "cost_per_hour": 0.0416,
        "price_region": "us-east-1",
    }
    lines = render_status(view).splitlines()
    assert lines[0].split() == [
        "NODE",
        "ADDRESS",
        "INDEX",
        "RECORDS",
        "BYTES",
        "FILL",
        "T",
        "REQ/S",
        "STATE",
    ]
    assert lines[1].split() == [
        "node-1",
        "http://127.0.0.1:4001",
        "sorted",
        "1,500",
        "3.0",
        "MiB",
        "75.0%",
        "50%",
        "3.5",
        "active",
    ]
    assert lines[2].split()[0] == "node-2" and lines[2].split()[-1] == "launching"
    assert "epoch 4" in lines[4] and "hit rate 50.0%" in lines[4] and "$0.0416/h" in lines[4]
    assert "moving node-1 -> node-3: 400/1,000 records" in lines
    assert "launching node-2 for 2.5 s" in lines
    assert any(line.startswith("still to terminate: node-5 (i-0abc)") for line in lines)
    assert not any("node-4" in line for line in lines)


def test_a_suspect_node_shows_as_suspect_with_its_event() -> None:
    node = {
        "id": "node-1",
        "address": "http://127.0.0.1:4001",
        "records": 10,
        "capacity": 100,
        "fill": 0.1,
        "state": "active",
        "suspect": True,
    }
    event = {"seq": 1, "time": 0.0, "kind": "node_suspect", "message": "node-1 does not answer"}
    text = render_status({"epoch": 1, "nodes": [node], "events": [event]})
    row = next(line for line in text.splitlines() if line.startswith("node-1"))
    assert row.rstrip().endswith("suspect")
    assert "node-1 does not answer" in text


def test_replication_shows_copies_and_repair() -> None:
    view: dict[str, object] = {"epoch": 3, "nodes": []}
    assert "replication" not in render_status(view)  # one copy: nothing to say
    view["replication"] = {
        "factor": 2,
        "write_quorum": 2,
        "buckets": 4,
        "under_replicated": 1,
        "repairing": True,
        "copies_made": 5,
    }
    assert (
        "replication 2 (writes wait for 2): 1 of 4 ranges under-replicated, repairing; "
        "5 range copies made"
    ) in render_status(view)
    view["replication"] = {**view["replication"], "under_replicated": 0}  # type: ignore[dict-item]
    assert "every range has its copies" in render_status(view)


def test_status_shows_primaries_and_hot_answers() -> None:
    view = {
        "epoch": 2,
        "nodes": [],
        "migrations": [],
        "hit_rate": None,
        "replication": {
            "factor": 2,
            "write_quorum": 2,
            "under_replicated": 0,
            "nodes": 3,
            "placement": "primaries",
            "primaries": ["node-1", "node-2"],
        },
        "read_through": {
            "hot": {"hits": 1200, "answers": 30, "bytes": 40960, "max_bytes": 33554432}
        },
    }
    lines = render_status(view).splitlines()
    assert "placement primaries: node-1, node-2 hold a copy of every key" in lines
    assert (
        "hot answers: 1,200 read-through hits from the coordinator's memory; 30 kept, "
        "40.0 KiB of 32.0 MiB"
    ) in lines
    quiet = render_status({**view, "read_through": {"hot": None}})
    assert "hot answers" not in quiet


def test_status_shows_stopped_nodes_and_their_dirty_lists() -> None:
    view = {
        "epoch": 9,
        "nodes": [],
        "migrations": [],
        "stopped": [
            {"node": "node-3", "ref": "1234", "complete": True, "dirty_keys": 1200},
            {
                "node": "node-4",
                "ref": "i-0abc",
                "complete": False,
                "dirty_keys": 0,
                "incomplete": "the coordinator restarted while it was stopped",
            },
        ],
    }
    lines = render_status(view).splitlines()
    assert (
        "stopped with its records: node-3 (1234); restarted before any launch, 1,200 changed "
        "key(s) to move back"
    ) in lines
    assert any(
        line.startswith("stopped with its records: node-4") and "full copy: the coordinator" in line
        for line in lines
    )


def test_traffic_between_zones_shows_when_there_is_some_or_an_allowance() -> None:
    quiet = {"epoch": 1, "nodes": [], "cross_zone": {"bytes_total": 0}}
    assert "between zones" not in render_status(quiet)  # one zone, nothing crossed
    metered = {
        "bytes_total": 10**9,
        "gb_per_hour": 6.0,
        "usd_per_hour": 0.12,
        "allowance_gb_per_hour": 5.0,
        "over_allowance": True,
    }
    text = render_status({"epoch": 1, "nodes": [], "cross_zone": metered})
    assert (
        "traffic between zones 6.000 GB/h ($0.1200/h, in the cost), allowance 5 GB/h: "
        "OVER it, no more launches"
    ) in text
    under = {**metered, "gb_per_hour": 0.5, "usd_per_hour": 0.01, "over_allowance": False}
    text = render_status({"epoch": 1, "nodes": [], "cross_zone": under})
    assert "0.500 GB/h ($0.0100/h, in the cost), allowance 5 GB/h" in text
    assert "OVER" not in text
