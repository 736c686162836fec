"""EC2 user data: the boot scripts of node and coordinator instances.

The scripts are package data next to this module (``common.sh`` then ``node.sh`` or
``coordinator.sh``) with ``__NAME__`` placeholders. `render` fills every placeholder with
a shell-quoted value (a string, or a command as a list of words) and refuses a template
with a placeholder left over or a value with no placeholder, so a typo cannot ship a
script that silently does something else. Nothing secret goes in: see docs/aws.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.aws.userdata.scripts import (
        MAX_USER_DATA_BYTES,
        NODE_STATE_DIR,
        SLOT_NODE_ID,
        SLOT_PORT,
        VENV_BIN,
        coordinator_config_of,
        coordinator_user_data,
        node_user_data,
        node_writable_dir,
        render,
    )

__all__ = [
    "MAX_USER_DATA_BYTES",
    "NODE_STATE_DIR",
    "SLOT_NODE_ID",
    "SLOT_PORT",
    "VENV_BIN",
    "coordinator_config_of",
    "coordinator_user_data",
    "node_user_data",
    "node_writable_dir",
    "render",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "MAX_USER_DATA_BYTES": "elastic_cache.aws.userdata.scripts",
        "NODE_STATE_DIR": "elastic_cache.aws.userdata.scripts",
        "SLOT_NODE_ID": "elastic_cache.aws.userdata.scripts",
        "SLOT_PORT": "elastic_cache.aws.userdata.scripts",
        "VENV_BIN": "elastic_cache.aws.userdata.scripts",
        "coordinator_config_of": "elastic_cache.aws.userdata.scripts",
        "coordinator_user_data": "elastic_cache.aws.userdata.scripts",
        "node_user_data": "elastic_cache.aws.userdata.scripts",
        "node_writable_dir": "elastic_cache.aws.userdata.scripts",
        "render": "elastic_cache.aws.userdata.scripts",
    },
)
