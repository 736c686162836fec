"""`S3StateStore`: the cluster state in one S3 object (`statestore` has the protocol).

The boto3 client is passed in; every method blocks.
"""

from __future__ import annotations

from typing import Any

from elastic_cache.aws.errors import AwsError, aws_call

__all__ = ["S3StateStore"]


class S3StateStore:
    """The state in one S3 object (a PUT replaces an object atomically).

    Args:
        client: a boto3 S3 client.
        bucket: the bucket (deploy's own, encrypted and TLS-only).
        key: the object key; `discard` moves it to ``key`` with ``.stale.json``.
    """

    def __init__(self, client: Any, bucket: str, key: str) -> None:
        self.client = client
        self.bucket = bucket
        self.key = key

    def load(self) -> bytes | None:
        try:
            reply = aws_call(
                self.client,
                "GetObject",
                doing="reading the cluster state",
                Bucket=self.bucket,
                Key=self.key,
            )
        except AwsError as exc:
            if exc.aws_code in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        body: bytes = reply["Body"].read()
        return body

    def save(self, data: bytes) -> None:
        aws_call(
            self.client,
            "PutObject",
            doing="saving the cluster state",
            Bucket=self.bucket,
            Key=self.key,
            Body=data,
            ContentType="application/json",
        )

    def sibling(self, name: str) -> S3StateStore:
        prefix = self.key.rsplit("/", 1)[0] + "/" if "/" in self.key else ""
        return S3StateStore(self.client, self.bucket, prefix + name)

    def discard(self) -> None:
        data = self.load()
        if data is None:
            return
        stale = self.key.removesuffix(".json") + ".stale.json"
        aws_call(
            self.client,
            "PutObject",
            doing="setting the old cluster state aside",
            Bucket=self.bucket,
            Key=stale,
            Body=data,
        )
        aws_call(
            self.client,
            "DeleteObject",
            doing="setting the old cluster state aside",
            Bucket=self.bucket,
            Key=self.key,
        )

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.key}"
