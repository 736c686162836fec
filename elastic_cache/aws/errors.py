"""AWS errors as the package's typed errors, with a message that says what to do.

botocore raises one `ClientError` for everything; `aws_error` turns it into one of::

    ProvisionError                          503 provision_failed
    └── AwsError                            503 aws_error           (the cloud's)
        ├── AwsPermissionDenied             403 aws_permission_denied (the operator's IAM)
        ├── AwsLimitExceeded                503 aws_limit_exceeded  (an account quota)
        └── AwsCapacityError                503 aws_insufficient_capacity
    ConfigError
    └── AwsCredentialsMissing               400 aws_no_credentials

Each carries the AWS error code (``aws_code``) and the API call (``operation``); the
permission error names the IAM action that was refused, and the limit error the quota.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from elastic_cache.errors import ConfigError, ProvisionError

__all__ = [
    "CAPACITY_CODES",
    "AwsCapacityError",
    "AwsCredentialsMissing",
    "AwsError",
    "AwsLimitExceeded",
    "AwsPermissionDenied",
    "aws_call",
    "aws_error",
    "error_code",
    "ignoring",
]

#: Codes that mean "no capacity for this type here now": try another type or subnet.
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "Unsupported",  # the type is not offered in that subnet's availability zone
    }
)

_PERMISSION_CODES = frozenset(
    {
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "AuthFailure",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "UnrecognizedClientException",
    }
)

#: Limit codes and the quota each one means.
_LIMITS = {
    "InstanceLimitExceeded": "the running On-Demand instances quota of the instance family",
    "VcpuLimitExceeded": "the running On-Demand vCPU quota (Service Quotas, EC2)",
    "MaxSpotInstanceCountExceeded": "the Spot instance quota",
    "RequestLimitExceeded": "the EC2 API request rate (retry later)",
    "Throttling": "the API request rate (retry later)",
    "ThrottlingException": "the API request rate (retry later)",
    "LimitExceeded": "an IAM quota (roles, instance profiles or policies per account)",
    "LimitExceededException": "a quota of the service",
    "VpcLimitExceeded": "the VPCs per region quota",
    "SecurityGroupLimitExceeded": "the security groups per VPC quota",
    "RulesPerSecurityGroupLimitExceeded": "the rules per security group quota",
    "TooManyBuckets": "the S3 buckets per account quota",
    "ParameterLimitExceeded": "the SSM parameters per account quota",
}

_S3_ACTIONS = {
    "HeadObject": "GetObject",
    "HeadBucket": "ListBucket",
    "ListObjectsV2": "ListBucket",
    "ListObjectVersions": "ListBucketVersions",
    "PutBucketEncryption": "PutEncryptionConfiguration",
    "GetBucketEncryption": "GetEncryptionConfiguration",
    "DeleteObjects": "DeleteObject",
}


class AwsError(ProvisionError):
    """An AWS API call failed (the cloud's fault, or a state AWS refuses)."""

    code = "aws_error"

    def __init__(self, message: str = "", *, aws_code: str = "", operation: str = "") -> None:
        super().__init__(message, aws_code=aws_code, operation=operation)
        self.aws_code = aws_code
        self.operation = operation


class AwsPermissionDenied(AwsError):
    """The credentials in use may not make this call: an IAM permission is missing."""

    status = 403
    code = "aws_permission_denied"


class AwsLimitExceeded(AwsError):
    """An account quota or the API rate limit stopped the call."""

    code = "aws_limit_exceeded"


class AwsCapacityError(AwsError):
    """No configured instance type had capacity in any configured subnet."""

    code = "aws_insufficient_capacity"


class AwsCredentialsMissing(ConfigError):
    """No AWS credentials were found (environment, profile or instance role)."""

    code = "aws_no_credentials"


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore `ClientError` ("" for anything else)."""
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def aws_error(exc: BaseException, *, service: str, operation: str, doing: str) -> AwsError:
    """The typed error for a failed call; raise it ``from exc``.

    Args:
        exc: what botocore raised.
        service: the client's service name (``ec2``, ``s3``, ...).
        operation: the API operation (``RunInstances``), which is also the IAM action.
        doing: what we were doing, for the message ("launching node-3").
    """
    code = error_code(exc)
    message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", "") or exc)
    if code in _PERMISSION_CODES:
        # The API operation is the IAM action (RunInstances -> ec2:RunInstances); S3's
        # object calls are the exception AWS documents (HeadObject -> s3:GetObject).
        action = (
            f"{service}:{_S3_ACTIONS.get(operation, operation) if service == 's3' else operation}"
        )
        return AwsPermissionDenied(
            f"{doing}: AWS refused {action} ({code}): the credentials in use need the IAM "
            f"permission {action} on this resource. AWS said: {message}",
            aws_code=code,
            operation=operation,
        )
    if code in _LIMITS:
        return AwsLimitExceeded(
            f"{doing}: {code}: you reached {_LIMITS[code]}; raise it in the Service Quotas "
            f"console or lower max_nodes. AWS said: {message}",
            aws_code=code,
            operation=operation,
        )
    if code in CAPACITY_CODES:
        return AwsCapacityError(
            f"{doing}: {code}: AWS has no capacity for this request now. AWS said: {message}",
            aws_code=code,
            operation=operation,
        )
    return AwsError(
        f"{doing}: {service} {operation} failed ({code or type(exc).__name__}): {message}",
        aws_code=code,
        operation=operation,
    )


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def aws_call(client: Any, operation: str, *, doing: str, **params: Any) -> Any:
    """Call ``operation`` (``"RunInstances"``) on a boto3 client; typed errors on failure.

    Blocking: run it in a thread from asyncio code.

    Args:
        client: a boto3 client.
        operation: the API operation, CamelCase as in the AWS docs and IAM.
        doing: what the call is for, for error messages.
        **params: the operation's parameters (boto3 spells them like the API).

    Raises:
        AwsError: the call failed (a subclass says why: permission, limit, capacity).
        AwsCredentialsMissing: no credentials were found.
    """
    service = str(client.meta.service_model.service_name)
    try:
        return getattr(client, _snake(operation))(**params)
    except NoCredentialsError as exc:
        raise AwsCredentialsMissing(
            f"{doing}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or run on an instance with a role"
        ) from exc
    except ClientError as exc:
        raise aws_error(exc, service=service, operation=operation, doing=doing) from exc
    except BotoCoreError as exc:
        raise AwsError(
            f"{doing}: {service} {operation} failed: {exc}", operation=operation
        ) from exc


def ignoring(codes: Sequence[str], fn: Callable[[], Any]) -> bool:
    """Run ``fn``; True if it ran, False if it failed with one of the AWS error ``codes``
    (typically: the thing is already gone)."""
    try:
        fn()
    except AwsError as exc:
        if exc.aws_code in codes:
            return False
        raise
    return True
