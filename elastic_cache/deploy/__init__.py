"""Elastic cache on AWS: ``ecache deploy``, ``ecache status --name`` and ``ecache destroy``.

`deploy` creates (or finds) a cluster's bucket, package bundle, security groups, IAM roles,
token and coordinator instance; `destroy` removes them; `status_by_name` shows what AWS
and the coordinator know. See docs/aws.md for the walk-through, the IAM permissions the
deploying user needs, and the costs.
"""

from __future__ import annotations

from elastic_cache.deploy.names import ClusterNames
from elastic_cache.deploy.settings import DeployResult, DeploySettings
from elastic_cache.deploy.stack import deploy, destroy
from elastic_cache.deploy.status import ClusterNotFound, status_by_name

__all__ = [
    "ClusterNames",
    "ClusterNotFound",
    "DeployResult",
    "DeploySettings",
    "deploy",
    "destroy",
    "status_by_name",
]
