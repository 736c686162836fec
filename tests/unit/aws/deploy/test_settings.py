"""`DeploySettings`: the ``--allow-cidr`` guard against opening the API to the internet."""

from __future__ import annotations

import pytest

from elastic_cache.aws.deploy.settings import DeploySettings, check_allow_cidr
from elastic_cache.config import OnFull
from elastic_cache.errors import ConfigError


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("0.0.0.0/0 ", "0.0.0.0/0"),
        (" 0.0.0.0/0.0.0.0", "0.0.0.0/0"),
        ("203.0.113.7/0", "0.0.0.0/0"),  # host bits dropped: still everyone
        ("::/0", "::/0"),
        ("::0/0", "::/0"),
        ("2001:db8::1/0", "::/0"),
    ],
)
def test_the_whole_internet_is_refused_without_public(given: str, shown: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_allow_cidr(given, public=False)
    message = str(err.value)
    assert shown in message and "every address on the internet" in message
    assert "--public" in message


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("0.0.0.0/1", "0.0.0.0/1 admits 2^31 addresses"),  # half the internet
        ("128.0.0.0/1", "128.0.0.0/1 admits 2^31 addresses"),
        ("65.0.0.0/7", "65.0.0.0/7 (64.0.0.0/7) admits 2^25 addresses"),
        ("2000::/3", "2000::/3 admits 2^125 addresses"),  # all global unicast IPv6
        ("2001:db8::/15", "2001:db8::/15 (2000::/15) admits 2^113 addresses"),
    ],
)
def test_a_cidr_broader_than_a_8_or_a_16_is_refused_without_public(given: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_allow_cidr(given, public=False)
    assert says in str(err.value) and "--public" in str(err.value)


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("0.0.0.0/0", "0.0.0.0/0"),
        (" ::0/0 ", "::/0"),
        ("0.0.0.0/1", "0.0.0.0/1"),
    ],
)
def test_public_allows_any_breadth(given: str, normal: str) -> None:
    assert check_allow_cidr(given, public=True) == normal


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("10.0.0.0/8", "10.0.0.0/8"),  # the broadest allowed: a whole private /8
        ("203.0.113.7", "203.0.113.7/32"),
        (" 203.0.113.9/24 ", "203.0.113.0/24"),
        ("2001:db8::/16", "2001::/16"),
        ("2001:0DB8::7/128", "2001:db8::7/128"),
    ],
)
def test_narrower_cidrs_need_no_flag_and_are_normalised(given: str, normal: str) -> None:
    assert check_allow_cidr(given, public=False) == normal
    settings = DeploySettings(name="t-1", region="us-east-1", allow_cidr=given)
    assert settings.allow_cidr == normal


def test_deploy_settings_apply_the_guard() -> None:
    with pytest.raises(ConfigError, match=r"0\.0\.0\.0/0 admits every address.*--public"):
        DeploySettings(name="t-1", region="us-east-1", allow_cidr="0.0.0.0/0")
    opened = DeploySettings(name="t-1", region="us-east-1", allow_cidr="::0/0", public=True)
    assert opened.allow_cidr == "::/0"


@pytest.mark.parametrize("given", ["everyone", "0/0", "", "300.0.0.0/8"])
def test_not_a_cidr(given: str) -> None:
    with pytest.raises(ConfigError, match="must be a CIDR"):
        check_allow_cidr(given, public=True)


def _warm(**overrides: object) -> DeploySettings:
    data: dict[str, object] = {
        "name": "demo",
        "region": "eu-west-1",
        "allow_cidr": "203.0.113.7/32",
        "warm_reintegration": True,
        "replication": 1,
        "on_full": OnFull.EVICT,
    }
    return DeploySettings(**(data | overrides))  # type: ignore[arg-type]


def test_warm_reintegration_drops_the_cold_tier() -> None:
    s = _warm()
    assert not s.cold_tier and s.tier_max_bytes is None
    plain = DeploySettings(name="demo", region="eu-west-1", allow_cidr="203.0.113.7/32")
    assert plain.cold_tier and plain.tier_max_bytes == 50_000_000_000


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"replication": 2}, "needs --replication 1, got 2"),
        ({"on_full": OnFull.DEMOTE}, "--on-full demote cannot be"),
        ({"demoted_expiry_days": 7}, "--expire-demoted-days"),
        ({"spot": True}, "EC2 does not stop Spot instances"),
        ({"warm_reintegration": "yes"}, "must be true or false"),
    ],
)
def test_warm_reintegration_refuses_what_it_cannot_work_with(
    overrides: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment):
        _warm(**overrides)


def test_nodes_per_instance_defaults_to_auto_and_is_one_with_warm_reintegration() -> None:
    plain = DeploySettings(name="demo", region="eu-west-1", allow_cidr="203.0.113.7/32")
    assert plain.nodes_per_instance == "auto" == plain.slots_setting
    assert _warm().slots_setting == 1
    assert _warm(nodes_per_instance=1).slots_setting == 1
    with pytest.raises(ConfigError, match="needs --nodes-per-instance 1"):
        _warm(nodes_per_instance=2)
    for bad in (0, 17, "all"):
        with pytest.raises(ConfigError, match="--nodes-per-instance"):
            DeploySettings(
                name="demo",
                region="eu-west-1",
                allow_cidr="203.0.113.7/32",
                nodes_per_instance=bad,
            )


@pytest.mark.parametrize("given", ["0.0.0.0", "0.0.0.0/32", "::", "::/128"])
def test_the_unspecified_address_alone_is_refused(given: str) -> None:
    """It admits no one: a mistake for 0.0.0.0/0, never what was meant."""
    with pytest.raises(ConfigError, match="admits no one"):
        check_allow_cidr(given, public=True)


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_a_port_that_is_not_one_is_refused(port: int) -> None:
    with pytest.raises(ConfigError, match=f"port.* got {port}"):
        DeploySettings(name="t-1", region="us-east-1", allow_cidr="203.0.113.7", port=port)
