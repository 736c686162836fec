"""`RunCommand`: shell commands on a node instance through SSM Run Command, as
`Ec2Provisioner` starts and stops the node of a slot (`elastic_cache.aws.ec2.slots`).

A command is ``SendCommand`` of the ``AWS-RunShellScript`` document to one instance, then
``GetCommandInvocation`` until it ends. Right after sending, SSM may not know the
invocation yet (``InvocationDoesNotExist``): that is polled again, like a pending one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from elastic_cache.aws.errors import AwsError, aws_call

__all__ = ["RUN_SHELL_DOCUMENT", "RunCommand"]

#: The SSM document that runs shell commands on Linux.
RUN_SHELL_DOCUMENT = "AWS-RunShellScript"

#: Invocation statuses after which nothing changes.
_DONE = frozenset({"Success", "Failed", "Cancelled", "TimedOut", "Undeliverable", "Terminated"})


class RunCommand:
    """Runs shell commands on an instance and waits for them.

    Args:
        ssm: an SSM client.
        poll_interval: seconds between looks at a command's status.
        sleep: how to wait between looks.
        clock: seconds, monotonic.
    """

    def __init__(
        self,
        ssm: Any,
        *,
        poll_interval: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ssm = ssm
        self.poll_interval = poll_interval
        self._sleep = sleep
        self._clock = clock

    async def _call(self, operation: str, doing: str, **params: Any) -> Any:
        return await asyncio.to_thread(aws_call, self.ssm, operation, doing=doing, **params)

    async def run(
        self, instance_id: str, commands: Sequence[str], *, doing: str, deadline: float
    ) -> None:
        """Run ``commands`` on ``instance_id`` and wait until they succeed.

        Raises:
            AwsError: SSM refused the command (a permission, an instance its agent does
                not manage), or it failed, or it did not end by ``deadline``
                (``aws_code`` the invocation's status).
        """
        sent = await self._call(
            "SendCommand",
            doing,
            InstanceIds=[instance_id],
            DocumentName=RUN_SHELL_DOCUMENT,
            Parameters={"commands": list(commands)},
            Comment=doing[:100],
            TimeoutSeconds=max(30, min(int(deadline - self._clock()), 2_592_000)),
        )
        command_id = str(sent["Command"]["CommandId"])
        status = "Pending"
        while True:
            try:
                reply = await self._call(
                    "GetCommandInvocation", doing, CommandId=command_id, InstanceId=instance_id
                )
            except AwsError as exc:
                if exc.aws_code != "InvocationDoesNotExist":
                    raise
            else:
                status = str(reply.get("Status", "Pending"))
                if status in _DONE:
                    if status == "Success":
                        return
                    detail = str(reply.get("StandardErrorContent", "")).strip()[-300:]
                    raise AwsError(
                        f"{doing}: the command on {instance_id} ended {status}"
                        + (f": {detail}" if detail else ""),
                        aws_code=status,
                        operation="SendCommand",
                    )
            if self._clock() > deadline:
                raise AwsError(
                    f"{doing}: the command on {instance_id} did not end in time ({status})",
                    aws_code="TimedOut",
                    operation="SendCommand",
                )
            await self._sleep(self.poll_interval)
