"""Elastic cache on AWS: ``ecache deploy``, ``ecache status --name`` and ``ecache destroy``.

`plan` checks and prints what deploy would create (``--dry-run``); `deploy` checks,
then creates (or finds) a cluster's bucket, package bundle, security groups, IAM roles,
token and coordinator instance; `destroy` removes them; `status.aws_view` is what AWS
knows of a cluster (``ecache status --name``); `read_cluster_token` reads the token
(``ecache token``). See docs/aws.md for the walk-through, the IAM permissions the
deploying user needs, and the costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.aws.deploy.names import ClusterNames
    from elastic_cache.aws.deploy.settings import DeployResult, DeploySettings
    from elastic_cache.aws.deploy.stack import deploy, plan, update
    from elastic_cache.aws.deploy.status import (
        ClusterNotFound,
        read_cluster_certificate,
        read_cluster_token,
    )
    from elastic_cache.aws.deploy.teardown import cluster_exists, destroy

__all__ = [
    "ClusterNames",
    "ClusterNotFound",
    "DeployResult",
    "DeploySettings",
    "cluster_exists",
    "deploy",
    "destroy",
    "plan",
    "read_cluster_certificate",
    "read_cluster_token",
    "update",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ClusterNames": "elastic_cache.aws.deploy.names",
        "ClusterNotFound": "elastic_cache.aws.deploy.status",
        "DeployResult": "elastic_cache.aws.deploy.settings",
        "DeploySettings": "elastic_cache.aws.deploy.settings",
        "cluster_exists": "elastic_cache.aws.deploy.teardown",
        "deploy": "elastic_cache.aws.deploy.stack",
        "destroy": "elastic_cache.aws.deploy.teardown",
        "plan": "elastic_cache.aws.deploy.stack",
        "read_cluster_certificate": "elastic_cache.aws.deploy.status",
        "read_cluster_token": "elastic_cache.aws.deploy.status",
        "update": "elastic_cache.aws.deploy.stack",
    },
)
