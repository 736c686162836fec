"""The cluster's S3 bucket: created private and encrypted, TLS only; the bundle in it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from botocore.config import Config

from elastic_cache import __version__
from elastic_cache.awserrors import AwsError, aws_call
from elastic_cache.deploy.bundle import build_bundle
from elastic_cache.deploy.names import ClusterNames
from elastic_cache.deploy.policies import bucket_policy
from elastic_cache.errors import ConfigError
from elastic_cache.provisioner.ec2 import CLUSTER_TAG

__all__ = [
    "deny_insecure_transport",
    "empty_prefix",
    "ensure_bucket",
    "presign",
    "s3_client",
    "upload_bundle",
]


def s3_client(session: Any, region: str) -> Any:
    return session.client(
        "s3",
        region_name=region,
        config=Config(signature_version="s3v4"),
    )


def ensure_bucket(s3: Any, names: ClusterNames) -> str:
    bucket = names.bucket
    params: dict[str, Any] = {"Bucket": bucket}
    if names.region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": names.region}
    try:
        aws_call(s3, "CreateBucket", doing=f"creating bucket {bucket}", **params)
    except AwsError as exc:
        if exc.aws_code == "BucketAlreadyExists":
            raise ConfigError(f"bucket {bucket} belongs to another account") from exc
        if exc.aws_code != "BucketAlreadyOwnedByYou":
            raise
    doing = f"securing bucket {bucket}"
    aws_call(
        s3,
        "PutPublicAccessBlock",
        doing=doing,
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    aws_call(
        s3,
        "PutBucketEncryption",
        doing=doing,
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [
                {
                    "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"},
                    "BucketKeyEnabled": True,
                }
            ]
        },
    )
    aws_call(
        s3,
        "PutBucketTagging",
        doing=doing,
        Bucket=bucket,
        Tagging={"TagSet": [{"Key": CLUSTER_TAG, "Value": names.cluster}]},
    )
    return bucket


def deny_insecure_transport(s3: Any, names: ClusterNames) -> None:
    """Set the TLS-only bucket policy; deploy does it after the upload (see below)."""
    aws_call(
        s3,
        "PutBucketPolicy",
        doing=f"securing bucket {names.bucket}",
        Bucket=names.bucket,
        Policy=json.dumps(bucket_policy(names)),
    )


def upload_bundle(
    s3: Any,
    names: ClusterNames,
    arch: str,
    wheelhouse: Path,
) -> str:
    with tempfile.TemporaryDirectory(prefix="ecache-bundle-") as work:
        data, digest = build_bundle(wheelhouse, work=Path(work))
    key = f"{names.bundle_prefix}elastic_cache-{__version__}-{digest}-{arch}.tar.gz"
    # A listing rather than HeadObject: moto (5.x) applies a bucket policy's Deny to
    # every object request whatever its condition (it treats the absent
    # aws:SecureTransport as a match), so under moto the TLS-only policy refuses
    # HeadObject and PutObject; bucket-level calls are not affected. Deploy also sets
    # that policy after the upload. tests/aws/test_deploy.py pins the moto behaviour.
    listed = aws_call(
        s3, "ListObjectsV2", doing="checking the bundle", Bucket=names.bucket, Prefix=key
    )
    if any(o["Key"] == key for o in listed.get("Contents", [])):
        return key  # the same bytes are there already
    aws_call(
        s3,
        "PutObject",
        doing="uploading the package bundle",
        Bucket=names.bucket,
        Key=key,
        Body=data,
        ServerSideEncryption="AES256",
    )
    return key


def presign(s3: Any, bucket: str, key: str, seconds: int = 3600) -> str:
    url: str = s3.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=seconds
    )
    return url


def empty_prefix(s3: Any, bucket: str, prefix: str) -> int:
    """Delete every object version under ``prefix``; returns how many."""
    deleted = 0
    marker: dict[str, str] = {}
    while True:
        page = aws_call(
            s3,
            "ListObjectVersions",
            doing=f"listing s3://{bucket}/{prefix}",
            Bucket=bucket,
            Prefix=prefix,
            **marker,
        )
        objects = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
        ]
        for start in range(0, len(objects), 1000):
            reply = aws_call(
                s3,
                "DeleteObjects",
                doing=f"emptying s3://{bucket}/{prefix}",
                Bucket=bucket,
                Delete={"Objects": objects[start : start + 1000], "Quiet": True},
            )
            errors = reply.get("Errors", [])
            if errors:
                first = errors[0]
                raise AwsError(
                    f"emptying s3://{bucket}/{prefix}: {len(errors)} object(s) not deleted, "
                    f"e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}",
                    aws_code=str(first.get("Code", "")),
                    operation="DeleteObjects",
                )
        deleted += len(objects)
        if not page.get("IsTruncated"):
            return deleted
        marker = {
            "KeyMarker": page["NextKeyMarker"],
            "VersionIdMarker": page["NextVersionIdMarker"],
        }
