"""Durable namespaces on one node: writes that reach its cold tier before they are
acknowledged (docs/namespaces.md).

A namespace whose ``durability`` is ``disk`` or ``s3`` needs the node's cold tier to be
of that kind. Each write of such a namespace is submitted to the tier in memory's order,
right after the store took it, and awaited before the node answers; the tier's byte cap
never sweeps such a value away. `DurableWrites` is that part of
`elastic_cache.node.service.NodeService`: the node keeps whether any namespace is durable
(its ``_durable``, read on every write) and binds `DurableWrites.start` and
`DurableWrites.wait` as its ``_write_through`` and ``_written_through``, which its
migration roles use too.
"""

from __future__ import annotations

import asyncio
import contextlib

from elastic_cache.errors import ConfigError
from elastic_cache.namespaces import Durability, NamespaceTable
from elastic_cache.store import Store
from elastic_cache.tiers.layer import ColdLayer

__all__ = ["DurableWrites"]


class DurableWrites:
    """The durable namespaces of one node.

    Args:
        node_id: the node's id, for error messages.
        store: its records (and their namespace table).
        cold: its cold tier (None: memory only, where no namespace can be durable).
    """

    def __init__(self, node_id: str, store: Store, cold: ColdLayer | None) -> None:
        self.node_id = node_id
        self.store = store
        self.cold = cold

    def check(self, table: NamespaceTable) -> None:
        """Raises ConfigError when a namespace's durability has no tier here."""
        cold = self.cold
        for policy in table.policies:
            if policy.durability is Durability.MEMORY:
                continue
            kind = str(policy.durability)
            if cold is None or cold.tier.kind != kind:
                have = "no cold tier" if cold is None else f"a {cold.tier.kind} tier"
                raise ConfigError(
                    f"namespaces.{policy.name}.durability = {str(policy.durability)!r} "
                    f"needs the node's {policy.durability} tier; node {self.node_id} has "
                    f"{have}"
                )

    def keep(self, durable: bool) -> None:
        """Tell the tier's byte cap which values its sweeps must leave: a durable
        namespace's (nothing to ask while no namespace is durable, ``durable`` false)."""
        cap = self.cold.cap if self.cold is not None else None
        if cap is None:
            return
        namespaces = self.store.namespaces
        cap.keep = (
            (lambda key: namespaces.policy_of(key).durability is not Durability.MEMORY)
            if durable
            else None
        )

    def start(self, key: str, token: int) -> asyncio.Future[None] | None:
        """Start writing ``key``'s memory record to the tier when its namespace is
        durable; call right after the store took it (see `ColdLayer.write_through`)."""
        cold = self.cold
        if cold is None or self.store.namespaces.policy_of(key).durability is Durability.MEMORY:
            return None
        rec = self.store.peek(key)
        if rec is None:
            return None
        return cold.write_through(key, token, rec)

    async def wait(
        self, key: str, token: int, future: asyncio.Future[None], *, keep_cold: bool = False
    ) -> None:
        """Wait for a write-through; when it failed, make sure no older cold copy can be
        read (the key is held until the tier answers), then raise. With ``keep_cold`` the
        older copy stays: the caller takes the failed write back from memory, so that
        copy is again the key's last acknowledged value (a client's write).

        Raises:
            ColdTierError: the tier failed; the write must not be acknowledged.
        """
        try:
            await asyncio.shield(future)
        except Exception:
            assert self.cold is not None
            if not keep_cold:
                with contextlib.suppress(Exception):
                    await self.cold.invalidate(key, token)
            raise
