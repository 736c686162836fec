"""The names of everything ``ecache deploy`` creates for a cluster, derived from the
cluster's name, the account and the region, so that deploy, status and destroy find the
same resources again without keeping any state on the user's machine."""

from __future__ import annotations

from dataclasses import dataclass

from elastic_cache.aws.ec2 import CLUSTER_TAG, ROLE_TAG
from elastic_cache.config import check_cluster_name

__all__ = ["ClusterNames", "tls_cert_parameter_of", "token_parameter_of"]


def token_parameter_of(cluster: str) -> str:
    """SSM parameter (SecureString) of the cluster token of ``cluster``."""
    return f"/ecache/{check_cluster_name(cluster)}/token"


def tls_cert_parameter_of(cluster: str) -> str:
    """SSM parameter (String: it is public) of the TLS certificate of ``cluster``."""
    return f"/ecache/{check_cluster_name(cluster)}/tls-cert"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterNames:
    """Resource names and ARNs of one cluster.

    Attributes:
        cluster: the cluster's name (validated by `check_cluster_name`).
        account: the AWS account id.
        region: the AWS region.
    """

    cluster: str
    account: str
    region: str

    def __post_init__(self) -> None:
        check_cluster_name(self.cluster)

    @property
    def prefix(self) -> str:
        """Name prefix of roles, profiles and security groups."""
        return f"ecache-{self.cluster}"

    @property
    def bucket(self) -> str:
        """The S3 bucket (globally unique: account and region are part of the name)."""
        return f"ecache-{self.cluster}-{self.account}-{self.region}"

    @property
    def bucket_arn(self) -> str:
        return f"arn:aws:s3:::{self.bucket}"

    @property
    def bundle_prefix(self) -> str:
        """Object key prefix of the package bundles."""
        return f"{self.cluster}/bundles/"

    @property
    def tier_prefix(self) -> str:
        """Object key prefix of the cold tier, the only part of the bucket nodes may use."""
        return f"{self.cluster}/tier/"

    @property
    def state_key(self) -> str:
        """Object key of the coordinator's copy of the cluster state (``state_s3``)."""
        return f"{self.cluster}/state/cluster.json"

    @property
    def state_url(self) -> str:
        """``s3://`` URL of that object, the coordinator's ``state_s3``."""
        return f"s3://{self.bucket}/{self.state_key}"

    def role(self, kind: str) -> str:
        """IAM role (and instance profile) of ``coordinator`` or ``node`` instances."""
        return f"{self.prefix}-{kind}"

    def role_arn(self, kind: str) -> str:
        return f"arn:aws:iam::{self.account}:role/{self.role(kind)}"

    def security_group(self, kind: str) -> str:
        """Security group name of ``coordinator`` or ``node`` instances."""
        return f"{self.prefix}-{kind}"

    @property
    def token_parameter(self) -> str:
        """SSM parameter (SecureString) of the cluster token."""
        return token_parameter_of(self.cluster)

    @property
    def token_parameter_arn(self) -> str:
        return f"arn:aws:ssm:{self.region}:{self.account}:parameter{self.token_parameter}"

    @property
    def tls_key_parameter(self) -> str:
        """SSM parameter (SecureString) of the coordinator's TLS private key."""
        return f"/ecache/{self.cluster}/tls-key"

    @property
    def tls_cert_parameter(self) -> str:
        """SSM parameter (String) of the coordinator's TLS certificate."""
        return tls_cert_parameter_of(self.cluster)

    def parameter_arn(self, name: str) -> str:
        """ARN of the SSM parameter ``name`` (a path starting with ``/``)."""
        return f"arn:aws:ssm:{self.region}:{self.account}:parameter{name}"

    def ec2_arn(self, resource: str) -> str:
        """ARN of an EC2 resource in this account and region, e.g. ``instance/*``."""
        return f"arn:aws:ec2:{self.region}:{self.account}:{resource}"

    def tags(self, role: str) -> list[dict[str, str]]:
        """The tags of a resource with ``role`` (``coordinator``, ``node``)."""
        return [
            {"Key": CLUSTER_TAG, "Value": self.cluster},
            {"Key": ROLE_TAG, "Value": role},
            {"Key": "Name", "Value": f"{self.prefix}-{role}"},
        ]
