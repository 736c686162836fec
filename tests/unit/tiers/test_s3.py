"""The S3 tier on moto: object names, multipart uploads, and AWS errors as typed errors."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from elastic_cache.tiers.base import ColdEntry, ColdTierError, ColdTierUnavailable
from elastic_cache.tiers.s3 import PART_BYTES, S3Tier


def test_object_names_are_ring_ordered(s3_tier: S3Tier, s3_client: Any, bucket: str) -> None:
    s3_tier.put(ColdEntry("a/b c", 0x10, 3, "text/plain", 99.0, 1), b"v")
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["cache/v1/0000000000000010/a%2Fb%20c"]
    head = s3_client.head_object(Bucket=bucket, Key=keys[0])
    assert head["Metadata"]["ecache-type"] == "text%2Fplain"
    assert head["Metadata"]["ecache-version"] == "3"
    got = s3_tier.head("a/b c", 0x10)
    assert got is not None and got.content_type == "text/plain"


def test_long_key_gets_a_hashed_name(s3_tier: S3Tier) -> None:
    key = "\u2603" * 341  # 1023 UTF-8 bytes, 3069 when quoted
    name = s3_tier.name_of(key, 1)
    assert "/~" in name and len(name.encode()) < 1024
    s3_tier.put(ColdEntry(key, 1, 1, "t", 0.0, 1), b"v")
    got = s3_tier.get(key, 1)
    assert got is not None and got[0].key == key


def test_bucket_root_prefix(s3_client: Any, bucket: str) -> None:
    tier = S3Tier(s3_client, bucket, "")
    tier.put(ColdEntry("k", 5, 1, "t", 0.0, 1), b"v")
    assert list(tier.names(0, 0)) == ["0000000000000005/k"]
    assert tier.describe() == f"s3://{bucket}/"


def test_multipart_upload_for_large_values(s3_tier: S3Tier, s3_client: Any, bucket: str) -> None:
    e = ColdEntry("large", 9, 1, "application/octet-stream", 0.0, 0)
    writer = s3_tier.writer(e)
    block = b"0123456789abcdef" * (1 << 16)  # 1 MiB
    total = PART_BYTES + 3 * len(block)
    for _ in range(total // len(block)):
        writer.write(block)
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    writer.commit(5)
    head = s3_tier.head("large", 9)
    assert head is not None and head.length == total
    reader = s3_tier.open("large", 9)
    assert reader is not None
    size = 0
    while chunk := reader.read(1 << 20):
        size += len(chunk)
    reader.close()
    assert size == total


def test_aborted_multipart_upload_leaves_nothing(
    s3_tier: S3Tier, s3_client: Any, bucket: str
) -> None:
    writer = s3_tier.writer(ColdEntry("x", 9, 1, "t", 0.0, 0))
    writer.write(b"y" * (PART_BYTES + 10))
    writer.abort()
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert s3_tier.get("x", 9) is None


def test_missing_bucket_is_a_500_with_the_aws_code(s3_client: Any) -> None:
    tier = S3Tier(s3_client, "no-such-bucket-ecache", "p")
    with pytest.raises(ColdTierError) as info:
        tier.put(ColdEntry("k", 1, 1, "t", 0.0, 1), b"v")
    err = info.value
    assert type(err) is ColdTierError and err.status == 500
    assert err.to_json()["aws_code"] == "NoSuchBucket"
    assert err.__cause__ is not None


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": "nope"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "GetObject",
    )


@pytest.mark.parametrize(
    ("exc", "cls", "status", "code"),
    [
        (_client_error("SlowDown", 503), ColdTierUnavailable, 503, "SlowDown"),
        (_client_error("InternalError", 500), ColdTierUnavailable, 503, "InternalError"),
        (_client_error("AccessDenied", 403), ColdTierError, 500, "AccessDenied"),
        (
            EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
            ColdTierUnavailable,
            503,
            "EndpointConnectionError",
        ),
    ],
)
def test_errors_carry_status_and_code(
    exc: Exception, cls: type[ColdTierError], status: int, code: str
) -> None:
    client = mock.Mock()
    client.get_object.side_effect = exc
    client.head_object.side_effect = exc
    tier = S3Tier(client, "bucket", "p")
    for call in (lambda: tier.get("k", 1), lambda: tier.head("k", 1)):
        with pytest.raises(cls) as info:
            call()
        assert info.value.status == status
        assert info.value.to_json()["aws_code"] == code


def test_delete_names_reports_objects_s3_refused(s3_client: Any, bucket: str) -> None:
    tier = S3Tier(s3_client, bucket, "p")
    tier.put(ColdEntry("a", 42, 1, "t", 0.0, 1), b"1")
    names = list(tier.names(0, 0))
    assert tier.delete_names(names) == 1
    # S3 answers 200 and lists what it could not delete under Errors.
    client = mock.Mock()
    client.delete_objects.return_value = {
        "Deleted": [{"Key": "p/1"}],
        "Errors": [{"Key": "p/2", "Code": "AccessDenied", "Message": "no"}],
    }
    with pytest.raises(ColdTierError) as info:
        S3Tier(client, bucket, "p").delete_names(["p/1", "p/2"])
    assert info.value.to_json()["aws_code"] == "AccessDenied"
    assert "refused 1 of 2" in str(info.value)
    client.delete_objects.return_value = {"Errors": [{"Key": "p/1", "Code": "SlowDown"}]}
    with pytest.raises(ColdTierUnavailable):
        S3Tier(client, bucket, "p").delete_names(["p/1"])
