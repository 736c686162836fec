"""Any region, any type: deploy's prices from the AWS Price List API (cached on disk and
labelled with the fetch date), memory from EC2, the built-in tables as the fallback, and
an unknown price that warns without a budget and refuses with one.

moto does not implement the Price List API (``GetProducts`` answers 404 "Not yet
implemented"), so its answers are injected at the boto3 level (`inject`)."""

from __future__ import annotations

import base64
import json
import tomllib
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.aws.deploy import plan
from elastic_cache.aws.deploy.status import aws_view, render_aws_view
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.config import ClusterSettings
from elastic_cache.cost.pricelist import PriceCache
from elastic_cache.errors import UnknownPrice

from .test_deploy import NOTHING, run_deploy, settings, what_exists
from .test_deploy_plan import inject

MUMBAI = "ap-south-1"
DAY = date(2026, 11, 26)


def price_list(usd: str, instance_type: str = "c7i.large") -> dict[str, Any]:
    """A ``GetProducts`` reply in the API's documented shape: one product, one on-demand
    term, one hourly dimension."""
    doc = {
        "product": {"attributes": {"instanceType": instance_type, "regionCode": MUMBAI}},
        "terms": {
            "OnDemand": {
                "SKU.TERM": {
                    "priceDimensions": {
                        "SKU.TERM.RATE": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}
                    }
                }
            }
        },
    }
    return {"FormatVersion": "aws_v1", "PriceList": [json.dumps(doc)]}


def config_in(session: Any, region: str, instance_id: str) -> ClusterSettings:
    raw = session.client("ec2", region_name=region).describe_instance_attribute(
        InstanceId=instance_id, Attribute="userData"
    )["UserData"]["Value"]
    config = coordinator_config_of(base64.b64decode(raw).decode())
    assert config is not None
    return ClusterSettings.from_mapping(tomllib.loads(config))


def asked(session: Any, reply: dict[str, Any]) -> list[dict[str, Any]]:
    """Answer ``GetProducts`` with ``reply`` and record each request's parameters (the
    API speaks JSON, so `inject`'s own record is empty)."""
    calls: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(json.loads(params["body"]))

    session.events.register("before-call.pricing.GetProducts", record)
    inject(session, "pricing", "GetProducts", reply=reply)
    return calls


def mumbai(**overrides: Any) -> Any:
    return settings(
        region=MUMBAI,
        instance_types=("c7i.large",),
        coordinator_instance_type="c7i.large",
        **overrides,
    )


def test_a_type_and_region_the_tables_lack_deploy_with_fetched_prices(
    session: Any, tmp_path: Path
) -> None:
    calls = asked(session, price_list("0.0893000000"))
    cache = PriceCache(tmp_path / "prices.json")
    lines: list[str] = []
    s = mumbai()
    result = run_deploy(session, tmp_path, s, out=lines.append, prices=cache, today=lambda: DAY)
    text = "\n".join(lines)
    assert "price: c7i.large in ap-south-1: $0.0893/h (fetched 2026-11-26)" in text
    # Coordinator + 2 nodes (replication 2: an instance each, so that each copy of a key
    # has its own), and the maximum of 4 nodes, two per c7i.large node instance (2
    # vCPUs); each instance with its public IPv4 and 8 GB volume, and S3 at its 50 GB
    # cap (storage at us-east-1's prices: the tables have none for ap-south-1).
    each, s3 = 0.0893 + 0.005 + 8 * 0.08 / 730, 50 * 0.023 / 730
    assert f"cost: ${3 * each + s3:.4f}/h at the minimum" in text
    assert f"${3 * each + s3:.4f}/h at the maximum" in text
    # One call for the one type, filtered on the region and the type.
    assert len(calls) == 1
    filters = {f["Field"]: f["Value"] for f in calls[0]["Filters"]}
    assert filters["regionCode"] == MUMBAI and filters["instanceType"] == "c7i.large"
    assert filters["operatingSystem"] == "Linux" and filters["tenancy"] == "Shared"
    # The coordinator gets the same prices, with the date, and memory from EC2 (4 GiB).
    cost = config_in(session, MUMBAI, result.coordinator_instance)
    inst = cost.cost.price_table().instance("c7i.large", MUMBAI)
    assert (inst.usd_per_hour, inst.memory_gb, inst.fetched) == (0.0893, 4.0, DAY)
    # Half of 4 GiB, shared by the two nodes of a 2-vCPU instance.
    assert cost.nodes.capacity_bytes == 1 << 30
    # ecache status labels them.
    view = aws_view(session.client("ec2", region_name=MUMBAI), s.name, MUMBAI)
    assert view["instances"][0]["usd_per_hour"] == 0.0893
    assert "instance prices fetched 2026-11-26 (AWS Price List API)" in render_aws_view(view)
    # Cached on disk: a second plan within the week asks AWS nothing.
    assert json.loads((tmp_path / "prices.json").read_text())[MUMBAI]["c7i.large"] == {
        "usd_per_hour": 0.0893,
        "fetched": "2026-11-26",
    }
    again: list[str] = []
    plan(s, session=session, out=again.append, prices=PriceCache(tmp_path / "prices.json"))
    assert len(calls) == 1
    assert any("$0.0893/h (fetched 2026-11-26)" in line for line in again)


def test_an_old_cached_price_is_fetched_again(session: Any, tmp_path: Path) -> None:
    calls = asked(session, price_list("0.0900000000"))
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps({MUMBAI: {"c7i.large": {"usd_per_hour": 0.08, "fetched": "2026-11-01"}}})
    )
    lines: list[str] = []
    plan(mumbai(), session=session, out=lines.append, prices=PriceCache(path), today=lambda: DAY)
    assert len(calls) == 1
    assert any("$0.0900/h (fetched 2026-11-26)" in line for line in lines)


def test_without_the_price_list_api_the_built_in_table_is_the_fallback(
    session: Any, tmp_path: Path
) -> None:
    """moto's own answer (404, not implemented) stands for an unreachable API."""
    lines: list[str] = []
    plan(settings(), session=session, out=lines.append, today=lambda: DAY)
    text = "\n".join(lines)
    assert "the AWS Price List API failed" in text
    assert "price: t3.small in us-east-1: $0.0208/h (current table of 2026-11-22" in text


def test_an_unknown_price_warns_without_a_budget(session: Any, tmp_path: Path) -> None:
    """Goal of issue 21: --region ap-south-1 --instance-type c7i.large with no budget
    deploys even when no price can be found; the plan says the cost is unknown."""
    inject(session, "pricing", "GetProducts", code="AccessDeniedException")
    lines: list[str] = []
    result = run_deploy(session, tmp_path, mumbai(), out=lines.append)
    text = "\n".join(lines)
    assert "price: c7i.large in ap-south-1: unknown" in text
    assert "cost: WARNING: unknown" in text
    assert result.coordinator_instance.startswith("i-")


def test_an_unknown_price_with_a_budget_is_refused_saying_why(session: Any, tmp_path: Path) -> None:
    inject(session, "pricing", "GetProducts", code="AccessDeniedException")
    with pytest.raises(UnknownPrice, match="the coordinator must price every instance"):
        run_deploy(session, tmp_path, mumbai(max_usd_per_hour=1.0))
    assert what_exists(session) == NOTHING


def test_a_fetched_price_holds_the_budget(session: Any, tmp_path: Path) -> None:
    inject(session, "pricing", "GetProducts", reply=price_list("0.5"))
    with pytest.raises(Exception, match=r"cannot pay for the coordinator \(\$0\.5075/h"):
        run_deploy(session, tmp_path, mumbai(max_usd_per_hour=1.0))
