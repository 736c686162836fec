"""The cluster's S3 bucket: created private and encrypted, TLS only; the bundle in it."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.config import Config

from elastic_cache.aws.deploy.bundle import build_bundle
from elastic_cache.aws.deploy.created import uninterrupted
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.policies import bucket_policy
from elastic_cache.aws.ec2 import CLUSTER_TAG
from elastic_cache.aws.errors import AwsError, aws_call
from elastic_cache.errors import ConfigError
from elastic_cache.version import __version__

if TYPE_CHECKING:
    from elastic_cache.aws.deploy.created import Created

__all__ = [
    "INCOMPLETE_UPLOAD_DAYS",
    "SUPERSEDED_BUNDLE_DAYS",
    "SUPERSEDED_TAG",
    "delete_bucket",
    "deny_insecure_transport",
    "empty_prefix",
    "ensure_bucket",
    "lifecycle_rules",
    "mark_superseded_bundles",
    "presign",
    "s3_client",
    "set_lifecycle",
    "upload_bundle",
]

#: The object tag deploy puts on a bundle no coordinator of the cluster uses any more.
SUPERSEDED_TAG = "ecache:superseded"

#: Days after its upload that S3 deletes a superseded bundle: at once, in effect (S3
#: acts once a day), since no coordinator launches from it any more.
SUPERSEDED_BUNDLE_DAYS = 1

#: Days after which S3 aborts a multipart upload that never completed (a node that died
#: while demoting a large value), whose parts are billed but never seen in a listing.
INCOMPLETE_UPLOAD_DAYS = 2


def s3_client(session: Any, region: str) -> Any:
    return session.client(
        "s3",
        region_name=region,
        config=Config(signature_version="s3v4"),
    )


def _bucket_exists(s3: Any, bucket: str) -> bool:
    try:
        aws_call(s3, "HeadBucket", doing="looking for the bucket", Bucket=bucket)
    except AwsError as exc:
        if exc.aws_code in ("404", "NoSuchBucket", "NotFound"):
            return False
        if exc.aws_code in ("403", "AccessDenied"):
            raise ConfigError(f"bucket {bucket} belongs to another account") from exc
        raise
    return True


def ensure_bucket(
    s3: Any,
    names: ClusterNames,
    *,
    tags: Sequence[dict[str, str]] = (),
    created: Created | None = None,
) -> str:
    """The cluster's bucket, created unless it exists (a HeadBucket first: in us-east-1
    CreateBucket answers success for a bucket the account has already), then made
    private, encrypted and tagged with the cluster's tag and ``tags``."""
    bucket = names.bucket
    params: dict[str, Any] = {"Bucket": bucket}
    if names.region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": names.region}
    if not _bucket_exists(s3, bucket):
        try:
            with uninterrupted():
                aws_call(s3, "CreateBucket", doing=f"creating bucket {bucket}", **params)
                if created is not None:
                    created.bucket = bucket
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
        Tagging={"TagSet": [{"Key": CLUSTER_TAG, "Value": names.cluster}, *tags]},
    )
    return bucket


def lifecycle_rules(
    names: ClusterNames, *, demoted_expiry_days: int | None
) -> list[dict[str, Any]]:
    """The bucket's lifecycle: superseded bundles expire, incomplete multipart uploads are
    aborted, and with ``demoted_expiry_days`` the demoted values expire too."""
    rules: list[dict[str, Any]] = [
        {
            "ID": "ecache-superseded-bundles",
            "Status": "Enabled",
            "Filter": {
                "And": {
                    "Prefix": names.bundle_prefix,
                    "Tags": [{"Key": SUPERSEDED_TAG, "Value": "true"}],
                }
            },
            "Expiration": {"Days": SUPERSEDED_BUNDLE_DAYS},
        },
        {
            "ID": "ecache-incomplete-uploads",
            "Status": "Enabled",
            "Filter": {"Prefix": f"{names.cluster}/"},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": INCOMPLETE_UPLOAD_DAYS},
        },
    ]
    if demoted_expiry_days is not None:
        rules.append(
            {
                "ID": "ecache-demoted-values",
                "Status": "Enabled",
                "Filter": {"Prefix": names.tier_prefix},
                "Expiration": {"Days": demoted_expiry_days},
            }
        )
    return rules


def set_lifecycle(s3: Any, names: ClusterNames, *, demoted_expiry_days: int | None) -> None:
    """Replace the bucket's lifecycle configuration with `lifecycle_rules`."""
    aws_call(
        s3,
        "PutBucketLifecycleConfiguration",
        doing=f"setting the lifecycle of {names.bucket}",
        Bucket=names.bucket,
        LifecycleConfiguration={
            "Rules": lifecycle_rules(names, demoted_expiry_days=demoted_expiry_days)
        },
    )


def mark_superseded_bundles(s3: Any, names: ClusterNames, in_use: Collection[str]) -> list[str]:
    """Tag every bundle of the cluster but those ``in_use`` as superseded (`SUPERSEDED_TAG`)
    so that the lifecycle deletes them; returns their keys. A bundle in use that carries
    the tag (used again after a downgrade) loses it."""
    listed = aws_call(
        s3,
        "ListObjectsV2",
        doing="listing the bundles",
        Bucket=names.bucket,
        Prefix=names.bundle_prefix,
    ).get("Contents", [])
    keys = [str(o["Key"]) for o in listed]
    old = [k for k in keys if k not in in_use]
    if not old:
        return []  # no object call at all in the usual case of one bundle
    for key in old:
        aws_call(
            s3,
            "PutObjectTagging",
            doing=f"marking {key} superseded",
            Bucket=names.bucket,
            Key=key,
            Tagging={"TagSet": [{"Key": SUPERSEDED_TAG, "Value": "true"}]},
        )
    for key in keys:
        if key in in_use:
            aws_call(
                s3,
                "DeleteObjectTagging",
                doing=f"keeping {key}",
                Bucket=names.bucket,
                Key=key,
            )
    return old


def delete_bucket(s3: Any, bucket: str) -> int:
    """Delete ``bucket`` with everything in it; returns how many objects it held.

    Its TLS-only policy goes first: under moto that policy refuses every object request
    (see `upload_bundle`); on AWS this changes nothing.
    """
    aws_call(s3, "DeleteBucketPolicy", doing="deleting the bucket", Bucket=bucket)
    count = empty_prefix(s3, bucket, "")
    aws_call(s3, "DeleteBucket", doing="deleting the bucket", Bucket=bucket)
    return count


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
    *,
    created: Created | None = None,
) -> str:
    """Upload the bundle unless the same bytes are there; an upload into a bucket this
    run did not create is added to ``created`` (a created bucket goes as a whole)."""
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
    with uninterrupted():
        aws_call(
            s3,
            "PutObject",
            doing="uploading the package bundle",
            Bucket=names.bucket,
            Key=key,
            Body=data,
            ServerSideEncryption="AES256",
        )
        if created is not None and created.bucket != names.bucket:
            created.objects.append((names.bucket, key))
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
