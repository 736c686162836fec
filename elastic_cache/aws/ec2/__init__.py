"""Cache nodes as EC2 instances: the provisioner the coordinator calls (`provisioner`),
its launch requests (`launches`) and the subnets it tries (`placement`), what it asks EC2
for (`instances`: tags, filters, image, launch parameters), what runs on an instance
(`runner`) and Spot launches and interruptions (`spot`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.aws.ec2.instances import (
        BURSTABLE_FAMILIES,
        CLUSTER_TAG,
        LIVE_STATES,
        NODE_TAG,
        ROLE_TAG,
        SAVED_STATE_DIR,
        STOPPED_STATES,
        UNTERMINATED_STATES,
        cluster_filters,
        credit_specification,
        instance_params,
        new_client_token,
        node_args,
        resolve_image,
        spread_order,
        without_public_ip,
        zone_of,
    )
    from elastic_cache.aws.ec2.provisioner import (
        Ec2Provisioner,
    )
    from elastic_cache.aws.ec2.runner import (
        InstanceRunner,
        PrivateAddress,
    )

__all__ = [
    "BURSTABLE_FAMILIES",
    "CLUSTER_TAG",
    "LIVE_STATES",
    "NODE_TAG",
    "ROLE_TAG",
    "SAVED_STATE_DIR",
    "STOPPED_STATES",
    "UNTERMINATED_STATES",
    "Ec2Provisioner",
    "InstanceRunner",
    "PrivateAddress",
    "cluster_filters",
    "credit_specification",
    "instance_params",
    "new_client_token",
    "node_args",
    "resolve_image",
    "spread_order",
    "without_public_ip",
    "zone_of",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BURSTABLE_FAMILIES": "elastic_cache.aws.ec2.instances",
        "CLUSTER_TAG": "elastic_cache.aws.ec2.instances",
        "Ec2Provisioner": "elastic_cache.aws.ec2.provisioner",
        "InstanceRunner": "elastic_cache.aws.ec2.runner",
        "LIVE_STATES": "elastic_cache.aws.ec2.instances",
        "NODE_TAG": "elastic_cache.aws.ec2.instances",
        "PrivateAddress": "elastic_cache.aws.ec2.runner",
        "ROLE_TAG": "elastic_cache.aws.ec2.instances",
        "SAVED_STATE_DIR": "elastic_cache.aws.ec2.instances",
        "STOPPED_STATES": "elastic_cache.aws.ec2.instances",
        "UNTERMINATED_STATES": "elastic_cache.aws.ec2.instances",
        "cluster_filters": "elastic_cache.aws.ec2.instances",
        "credit_specification": "elastic_cache.aws.ec2.instances",
        "instance_params": "elastic_cache.aws.ec2.instances",
        "new_client_token": "elastic_cache.aws.ec2.instances",
        "node_args": "elastic_cache.aws.ec2.instances",
        "resolve_image": "elastic_cache.aws.ec2.instances",
        "spread_order": "elastic_cache.aws.ec2.instances",
        "without_public_ip": "elastic_cache.aws.ec2.instances",
        "zone_of": "elastic_cache.aws.ec2.instances",
    },
)
