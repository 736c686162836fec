"""The coordinator instance: its configuration, its launch, and waiting for it."""

from __future__ import annotations

import base64
import binascii
import json
import logging
import ssl
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from elastic_cache.aws.deploy.created import uninterrupted
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.ec2 import (
    UNTERMINATED_STATES,
    cluster_filters,
    instance_params,
    new_client_token,
    without_public_ip,
)
from elastic_cache.aws.errors import CAPACITY_CODES, AwsCapacityError, AwsError, aws_call
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.config import ROOT_VOLUME_GB, ClusterSettings
from elastic_cache.errors import ConfigError, ElasticCacheError, ProvisionError

if TYPE_CHECKING:
    from elastic_cache.aws.deploy.created import Created

log = logging.getLogger("elastic_cache.deploy")

__all__ = [
    "PORT_TAG",
    "SCHEME_TAG",
    "coordinator_config",
    "coordinator_instances",
    "endpoint_of",
    "http_ok",
    "is_tls",
    "refuse_drift",
    "run_coordinator",
    "running_config",
    "settings_drift",
    "start_again",
    "to_toml",
    "wait_running",
]

PORT_TAG = "ecache:port"
#: ``https`` on a coordinator that serves TLS (`endpoint_of`); absent: plain HTTP (one
#: deployed before TLS was built).
SCHEME_TAG = "ecache:scheme"

#: The inline policy name on both roles.

Sleep = Callable[[float], None]


def to_toml(data: Mapping[str, Mapping[str, Any]]) -> str:
    """Tables of scalars, lists and nested tables (written inline, as ``[cost] prices``
    needs) as TOML: the only shapes the config uses."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, Mapping):
            return "{" + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + "}"
        raise TypeError(f"cannot write {v!r} as TOML")

    lines = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {value(v)}" for k, v in values.items() if v is not None)
        lines.append("")
    return "\n".join(lines)


def coordinator_config(
    settings: DeploySettings,
    names: ClusterNames,
    *,
    subnets: Sequence[str],
    node_group: str,
    image: str,
    bundle_key: str,
    capacity_bytes: int,
    instance_type: str | None = None,
    tls: bool = False,
) -> str:
    """The coordinator's ``config.toml``, validated by parsing it back; ``instance_type``
    is the coordinator's own (default ``settings.coordinator_instance_type``), which its
    cost counts. ``tls``: the public port serves the certificate and key kept in SSM
    (`elastic_cache.aws.deploy.certificate`), which the coordinator reads at start."""
    text = to_toml(
        {
            "coordinator": {
                "host": "0.0.0.0",
                "port": settings.port,
                "state_dir": "/var/lib/ecache",
                "initial_nodes": settings.initial_nodes,
                "provisioner": "ec2",
                "price_region": settings.region,
                "admin_token_parameter": names.token_parameter,
                # A replacement coordinator (new instance, new disk) resumes from here.
                "state_s3": names.state_url,
                "tls_cert_parameter": names.tls_cert_parameter if tls else None,
                "tls_key_parameter": names.tls_key_parameter if tls else None,
            },
            "cluster": {"replication": settings.replication},
            "nodes": {
                "index": settings.index,
                "capacity_bytes": capacity_bytes,
                "on_full": str(settings.on_full),
                # The cluster's S3 prefix, the one the node role may use: values a full
                # node demotes (past the budget; docs/aws.md, "Scale") and values too
                # large for memory live there, and survive the loss of every node. None
                # (left out) with warm re-integration, which needs nodes without a tier.
                "tier": f"s3://{names.bucket}/{names.tier_prefix.rstrip('/')}"
                if settings.cold_tier
                else None,
                # Bounds what S3 holds, and so bills (the budget counts it at the cap).
                "tier_max_bytes": settings.tier_max_bytes,
            },
            "scaler": {
                "max_nodes": settings.max_nodes,
                "min_nodes": settings.min_nodes,
                "max_usd_per_hour": settings.max_usd_per_hour,
                "warm_reintegration": settings.warm_reintegration,
            },
            "ec2": {
                "cluster": names.cluster,
                "region": settings.region,
                "instance_types": list(settings.instance_types),
                "subnets": list(subnets),
                "security_groups": [node_group],
                "instance_profile": names.role("node"),
                "image": image,
                "node_port": settings.node_port,
                "bundle_bucket": names.bucket,
                "bundle_key": bundle_key,
                "coordinator_instance_type": instance_type or settings.coordinator_instance_type,
                "az_spread": settings.az_spread,
                # Reserved in the budget; the scaler stops growing above it.
                "max_cross_zone_gb_per_hour": settings.cross_zone_allowance,
                "tags": list(settings.tags),
                "spot": settings.spot,
                "private": settings.private,
                # Node processes per instance (docs/aws.md, "Several nodes per instance").
                "nodes_per_instance": settings.slots_setting,
            },
            # The prices deploy checked the budget with, for the coordinator's cost and
            # budget, and for `ecache status` (it reads them back from the user data).
            "cost": {
                "table": settings.cost.table,
                "prices": settings.cost.prices,
                "fetched": settings.cost.fetched,
                "spot": settings.cost.spot,
            },
        }
    )
    ClusterSettings.from_mapping(tomllib.loads(text))
    return text


def coordinator_instances(ec2: Any, cluster: str) -> list[dict[str, Any]]:
    """The cluster's coordinator instances that are not ending: running ones first, then
    pending, stopping, stopped.

    A stopped coordinator counts: its shutdown behaviour is ``stop`` (docs/aws.md) so that
    it can be started again with its state, and deploy does that rather than launch a
    second one. A shutting-down or terminated one does not. More than one is found only
    when something other than deploy launched one.
    """
    order = ("running", "pending", "stopping", "stopped")
    reply = aws_call(
        ec2,
        "DescribeInstances",
        doing=f"looking for the coordinator of {cluster}",
        Filters=cluster_filters(cluster, "coordinator", states=UNTERMINATED_STATES),
    )
    found = [i for r in reply["Reservations"] for i in r["Instances"]]
    return sorted(found, key=lambda i: (order.index(i["State"]["Name"]), i["InstanceId"]))


def running_config_text(ec2: Any, instance_id: str) -> str | None:
    """The ``config.toml`` a coordinator instance was launched with (from its user
    data), or None when it cannot be read (no permission, not deploy's user data)."""
    try:
        raw = aws_call(
            ec2,
            "DescribeInstanceAttribute",
            doing="reading the coordinator's configuration",
            InstanceId=instance_id,
            Attribute="userData",
        )["UserData"].get("Value")
        return coordinator_config_of(base64.b64decode(raw).decode()) if raw else None
    except (ElasticCacheError, binascii.Error, ValueError):
        return None


def running_config(ec2: Any, instance_id: str) -> ClusterSettings | None:
    """`running_config_text`, parsed (None when it cannot be read or parsed)."""
    return _parsed(running_config_text(ec2, instance_id))


def _parsed(text: str | None) -> ClusterSettings | None:
    try:
        return None if text is None else ClusterSettings.from_mapping(tomllib.loads(text))
    except (ElasticCacheError, ValueError, tomllib.TOMLDecodeError):
        return None


def declares_slots(config: str) -> bool:
    """Whether a coordinator's ``config.toml`` sets ``[ec2] nodes_per_instance``: one
    deployed before the setting existed does not (it runs one node an instance), and
    deploy's default (``auto``) is then no change asked for."""
    try:
        return "nodes_per_instance" in tomllib.loads(config).get("ec2", {})
    except tomllib.TOMLDecodeError:
        return True


def settings_drift(
    settings: DeploySettings, running: ClusterSettings, *, slots_declared: bool = True
) -> list[str]:
    """The settings a running coordinator holds from its first boot that differ from
    ``settings``, one ``"name: running X, asked Y"`` each (empty: none). Deploy cannot
    change them in place. ``slots_declared``: `declares_slots` of its configuration."""
    ec2 = running.ec2
    scaler = running.scaler
    pairs: list[tuple[str, Any, Any]] = [
        ("--max-nodes", scaler.max_nodes, settings.max_nodes),
        ("--min-nodes", scaler.min_nodes, settings.min_nodes),
        ("--max-usd-per-hour", scaler.max_usd_per_hour, settings.max_usd_per_hour),
        ("--port", running.coordinator.port, settings.port),
        ("--on-full", str(running.nodes.on_full), str(settings.on_full)),
        ("--warm-reintegration", scaler.warm_reintegration, settings.warm_reintegration),
    ]
    if running.nodes.tier_max_bytes is not None and settings.tier_max_bytes is not None:
        # A cluster deployed before the cap existed has none; it keeps running so.
        pairs.append(
            (
                "--max-demoted-gb",
                _gb(running.nodes.tier_max_bytes),
                _gb(settings.tier_max_bytes),
            )
        )
    if ec2 is not None:
        pairs += [
            ("--instance-type", list(ec2.instance_types), list(settings.instance_types)),
            ("--az-spread", ec2.az_spread, settings.az_spread),
            ("--spot", ec2.spot, settings.spot),
            ("--tag", sorted(ec2.tags), sorted(settings.tags)),
            ("--private", ec2.private, settings.private),
        ]
        if slots_declared and not (scaler.warm_reintegration or settings.warm_reintegration):
            # The node group's ports and both roles follow it: a redeploy with another
            # rewrote them under the running coordinator (found in review). Warm
            # re-integration forces 1, and `--update` turning it off keeps the running
            # value (`new_config`).
            pairs.append(
                (
                    "--nodes-per-instance",
                    str(ec2.nodes_per_instance),
                    str(settings.slots_setting),
                )
            )
        if settings.subnets:  # none given: the default subnets, whichever they are
            pairs.append(("--subnet", sorted(ec2.subnets), sorted(settings.subnets)))
        if ec2.max_cross_zone_gb_per_hour is not None or not ec2.az_spread:
            # A spread cluster deployed before the allowance has none and keeps none.
            pairs.append(
                (
                    "--max-cross-zone-gb-per-hour",
                    ec2.max_cross_zone_gb_per_hour,
                    settings.cross_zone_allowance,
                )
            )
        if ec2.coordinator_instance_type not in settings.coordinator_types:
            pairs.append(
                (
                    "--coordinator-instance-type",
                    ec2.coordinator_instance_type,
                    list(settings.coordinator_types),
                )
            )
    return [f"{name}: running {old}, asked {new}" for name, old, new in pairs if old != new]


def _gb(max_bytes: int | None) -> str:
    """A cold-tier cap as ``--max-demoted-gb`` shows it."""
    return "none" if max_bytes is None else f"{max_bytes / 1e9:g}"


def refuse_drift(settings: DeploySettings, ec2: Any, names: ClusterNames) -> None:
    """Refuse, before anything changes, a deploy whose settings differ from those the
    cluster's coordinator runs with: it could not apply them, and printing them as if
    it had would mislead (``deploy --update`` changes some of them, `update_cluster`).

    Raises:
        ConfigError: the running settings differ; the message lists them.
    """
    existing = coordinator_instances(ec2, names.cluster)
    if not existing:
        return
    text = running_config_text(ec2, existing[0]["InstanceId"])
    running = _parsed(text)
    if text is None or running is None:
        # Not known to match: a redeploy rewrites the firewall and the roles for the
        # asked settings, under a coordinator that may run with others.
        raise ConfigError(
            f"cannot read the configuration of cluster {names.cluster}'s coordinator "
            f"{existing[0]['InstanceId']} (DescribeInstanceAttribute userData refused or "
            "failed, or not deploy's user data), so whether the asked settings match it "
            "is unknown: try again, or check the caller's ec2:DescribeInstanceAttribute "
            "permission. Nothing was changed"
        )
    drift = settings_drift(settings, running, slots_declared=declares_slots(text))
    if drift:
        raise ConfigError(
            f"cluster {names.cluster} runs (coordinator {existing[0]['InstanceId']}) with "
            f"other settings than asked: {'; '.join(drift)}. A plain deploy does not change "
            "a running cluster's settings: pass --update to change --max-nodes, "
            "--min-nodes, --max-usd-per-hour, --instance-type, --tag and "
            "--warm-reintegration in place, deploy "
            "again with the running values, or destroy and deploy again. Nothing was changed"
        )


def _state_of(ec2: Any, instance_id: str) -> dict[str, Any]:
    reply = aws_call(
        ec2, "DescribeInstances", doing="waiting for the coordinator", InstanceIds=[instance_id]
    )
    instance: dict[str, Any] = reply["Reservations"][0]["Instances"][0]
    return instance


def start_again(
    ec2: Any,
    instance_id: str,
    *,
    sleep: Sleep,
    clock: Callable[[], float],
    timeout: float,
    polled: Callable[[str], None] = lambda state: None,
) -> None:
    """Start a stopped or stopping coordinator instance again; returns once AWS has taken
    the start (then `wait_running` waits for it to run, as for a new instance).

    A stopping instance cannot be started (``IncorrectInstanceState``), so this waits
    until it has stopped. An instance that runs already is left alone.

    Raises:
        ProvisionError: the instance did not stop within ``timeout``.
        AwsError: AWS refused the start (for example no capacity for its type).
    """
    deadline = clock() + timeout
    while True:
        state = _state_of(ec2, instance_id)["State"]["Name"]
        if state not in ("stopping", "stopped"):
            return  # running, pending, or ending: wait_running tells which
        if state == "stopped":
            try:
                aws_call(
                    ec2,
                    "StartInstances",
                    doing="starting the stopped coordinator",
                    InstanceIds=[instance_id],
                )
                break
            except AwsError as exc:
                # Between states as AWS sees it (it was stopping a moment ago): ask again.
                if exc.aws_code != "IncorrectInstanceState":
                    raise
        if clock() > deadline:
            raise ProvisionError(f"the coordinator instance {instance_id} is still {state}")
        polled(state)
        sleep(5)
    # DescribeInstances is eventually consistent: it may still say "stopped" for a moment
    # after the start, which wait_running would take for a failed start.
    grace = clock() + 30
    while _state_of(ec2, instance_id)["State"]["Name"] == "stopped" and clock() < grace:
        polled("stopped")
        sleep(5)


def run_coordinator(
    ec2: Any,
    names: ClusterNames,
    settings: DeploySettings,
    *,
    image: str,
    root_device: str,
    subnets: Sequence[str],
    group: str,
    user_data: Callable[[str], str],
    sleep: Sleep,
    client_token: Callable[[], str] = new_client_token,
    created: Created | None = None,
    tls: bool = False,
) -> dict[str, Any]:
    """Launch the coordinator, falling back as node launches do: over ``subnets`` on a
    capacity shortage, then over ``settings.coordinator_types``.

    Each attempt carries its own ``ClientToken``, kept while the same request is sent
    again (a new instance profile takes a few seconds to reach EC2), so AWS launches
    at most one instance per attempt. The instance is added to ``created``.

    Args:
        user_data: the boot script for an instance type (its configuration names it).
        tls: it serves HTTPS (tagged `SCHEME_TAG`, so status finds the scheme).

    Raises:
        AwsCapacityError: no type had capacity in any subnet.
        AwsError: AWS refused the launch otherwise.
    """
    tags = [
        *names.tags("coordinator"),
        {"Key": PORT_TAG, "Value": str(settings.port)},
        *([{"Key": SCHEME_TAG, "Value": "https"}] if tls else []),
        *settings.user_tags(),
    ]
    misses: list[str] = []
    for instance_type in settings.coordinator_types:
        script = user_data(instance_type)
        for subnet in subnets:
            params = instance_params(
                image=image,
                instance_type=instance_type,
                user_data=script,
                tags=tags,
                root_device=root_device,
                volume_gb=ROOT_VOLUME_GB,
            )
            params["SubnetId"] = subnet
            params["SecurityGroupIds"] = [group]
            params["IamInstanceProfile"] = {"Name": names.role("coordinator")}
            params["ClientToken"] = client_token()
            if settings.private:
                params = without_public_ip(params)
            try:
                instance = _run_once(ec2, params, sleep=sleep, created=created)
            except AwsError as exc:
                if exc.aws_code not in CAPACITY_CODES:
                    raise
                misses.append(f"{instance_type} in {subnet}: {exc.aws_code}")
                log.warning("no capacity for the coordinator as %s in %s", instance_type, subnet)
                continue
            return instance
    raise AwsCapacityError(
        f"launching the coordinator: no capacity for any of its types in any subnet "
        f"({'; '.join(misses)}); add --coordinator-instance-type fall-backs or --subnet "
        "values in other zones",
        aws_code="InsufficientInstanceCapacity",
        operation="RunInstances",
    )


def _run_once(
    ec2: Any, params: dict[str, Any], *, sleep: Sleep, created: Created | None = None
) -> dict[str, Any]:
    """One launch request, sent again (same parameters, same token) while the new
    instance profile has not reached EC2; the instance is added to ``created``."""
    for attempt in range(12):
        try:
            with uninterrupted():
                reply = aws_call(ec2, "RunInstances", doing="launching the coordinator", **params)
                instance: dict[str, Any] = reply["Instances"][0]
                if created is not None:
                    created.instances.append(str(instance["InstanceId"]))
            return instance
        except AwsError as exc:
            fresh_profile = exc.aws_code == "InvalidParameterValue" and "nstance" in str(exc)
            if not fresh_profile or attempt == 11:
                raise
            sleep(5)
    raise AssertionError("unreachable")  # pragma: no cover


def wait_running(
    ec2: Any,
    instance_id: str,
    *,
    sleep: Sleep,
    clock: Callable[[], float],
    timeout: float,
    polled: Callable[[str], None] = lambda state: None,
) -> dict[str, Any]:
    """Wait until the instance runs; ``polled`` hears its state after every poll."""
    deadline = clock() + timeout
    while True:
        instance = _state_of(ec2, instance_id)
        state = instance["State"]["Name"]
        if state == "running":
            return instance
        if state in ("shutting-down", "terminated", "stopped"):
            reason = instance.get("StateReason", {}).get("Message", "")
            raise ProvisionError(f"the coordinator instance {instance_id} went {state}: {reason}")
        if clock() > deadline:
            raise ProvisionError(f"the coordinator instance {instance_id} is still {state}")
        polled(state)
        sleep(5)


def http_ok(url: str, *, tls: ssl.SSLContext | None = None) -> bool:
    """Whether ``GET url`` answers 200 within a few seconds; ``tls`` is whom an
    ``https://`` URL is trusted by (the deployment's pinned certificate)."""
    try:
        with urllib.request.urlopen(url, timeout=5, context=tls) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def is_tls(instance: Mapping[str, Any]) -> bool:
    """Whether a coordinator instance serves HTTPS (its `SCHEME_TAG`)."""
    return any(
        t.get("Key") == SCHEME_TAG and t.get("Value") == "https" for t in instance.get("Tags", ())
    )


def endpoint_of(instance: Mapping[str, Any], port: int) -> str:
    """The coordinator's URL: its public address, else (``--private``) its private one;
    ``https`` when it is tagged so (`is_tls`)."""
    ip = instance.get("PublicIpAddress") or instance.get("PrivateIpAddress")
    return f"{'https' if is_tls(instance) else 'http'}://{ip}:{port}"
