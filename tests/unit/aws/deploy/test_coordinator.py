"""`start_again`: deploy starting a stopped coordinator, through the states moto skips
(it stops and starts instances at once), with a scripted EC2 client."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from elastic_cache.aws.deploy.coordinator import start_again
from elastic_cache.aws.errors import AwsCapacityError
from elastic_cache.errors import ProvisionError


class ScriptedEc2:
    """Answers ``DescribeInstances`` with the next of ``states`` (the last one repeats)
    and counts ``StartInstances``; the first ``refusals`` starts fail with their codes."""

    meta = SimpleNamespace(service_model=SimpleNamespace(service_name="ec2"))

    def __init__(self, states: list[str], refusals: tuple[str, ...] = ()) -> None:
        self.states = states
        self.refusals = list(refusals)
        self.starts = 0

    def describe_instances(self, *, InstanceIds: list[str]) -> dict[str, Any]:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        instance = {"InstanceId": InstanceIds[0], "State": {"Name": state}}
        return {"Reservations": [{"Instances": [instance]}]}

    def start_instances(self, *, InstanceIds: list[str]) -> dict[str, Any]:
        if self.refusals:
            code = self.refusals.pop(0)
            raise ClientError({"Error": {"Code": code, "Message": code}}, "StartInstances")
        self.starts += 1
        return {"StartingInstances": [{"InstanceId": InstanceIds[0]}]}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.polled: list[str] = []

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def time(self) -> float:
        return self.now


def start(ec2: ScriptedEc2, clock: Clock, timeout: float = 600) -> None:
    start_again(
        ec2,
        "i-1",
        sleep=clock.sleep,
        clock=clock.time,
        timeout=timeout,
        polled=clock.polled.append,
    )


def test_a_stopping_coordinator_is_started_once_it_has_stopped() -> None:
    ec2 = ScriptedEc2(["stopping", "stopping", "stopped", "pending"])
    clock = Clock()
    start(ec2, clock)
    assert ec2.starts == 1
    assert clock.polled == ["stopping", "stopping"]


def test_a_start_refused_between_states_is_asked_again() -> None:
    ec2 = ScriptedEc2(["stopped", "stopped", "pending"], refusals=("IncorrectInstanceState",))
    clock = Clock()
    start(ec2, clock)
    assert ec2.starts == 1
    assert clock.now == 5


def test_a_stale_stopped_after_the_start_is_waited_out() -> None:
    """DescribeInstances is eventually consistent: "stopped" right after the start."""
    ec2 = ScriptedEc2(["stopped", "stopped", "pending"])
    clock = Clock()
    start(ec2, clock)
    assert ec2.starts == 1
    assert clock.polled == ["stopped"]


def test_a_running_coordinator_is_not_started() -> None:
    ec2 = ScriptedEc2(["running"])
    start(ec2, Clock())
    assert ec2.starts == 0


def test_a_coordinator_that_never_stops_is_an_error() -> None:
    ec2 = ScriptedEc2(["stopping"])
    with pytest.raises(ProvisionError, match="still stopping"):
        start(ec2, Clock(), timeout=30)
    assert ec2.starts == 0


def test_no_capacity_to_start_it_is_the_typed_error() -> None:
    ec2 = ScriptedEc2(["stopped"], refusals=("InsufficientInstanceCapacity",))
    with pytest.raises(AwsCapacityError) as err:
        start(ec2, Clock())
    assert err.value.aws_code == "InsufficientInstanceCapacity"
