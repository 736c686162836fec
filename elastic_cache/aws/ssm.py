"""Parameters in SSM Parameter Store that a deployed coordinator and its nodes read at
start: the cluster token (`fetch_token`; docs/aws.md) and the TLS key.

The client is passed in (a ``boto3`` SSM client); the calls block, so async callers run
them in a thread.
"""

from __future__ import annotations

from typing import Any

from elastic_cache.aws.errors import aws_call

__all__ = ["fetch_parameter", "fetch_token"]


def fetch_token(ssm: Any, parameter: str) -> str:
    """Read the token from SSM Parameter Store (blocking).

    Raises:
        AwsError: the parameter cannot be read (for example the role may not).
    """
    return fetch_parameter(ssm, parameter, what="the cluster token")


def fetch_parameter(ssm: Any, parameter: str, *, what: str) -> str:
    """Read ``parameter`` from SSM Parameter Store, decrypted (blocking); ``what`` names
    it in errors. The coordinator reads the token and its TLS key this way.

    Raises:
        AwsError: the parameter cannot be read (for example the role may not).
    """
    reply = aws_call(
        ssm,
        "GetParameter",
        doing=f"reading {what} {parameter}",
        Name=parameter,
        WithDecryption=True,
    )
    return str(reply["Parameter"]["Value"])
