"""In-process nodes: `NodeService` objects reached by direct calls instead of HTTP.

`LocalNetwork` holds the services by address (``local://ID``); `LocalNodeClient` is the
coordinator's `NodeClient` over one of them and `LocalPeerLink` a source's link to a
destination. The simulator and fast tests use these, so the scaler, the cluster and the
migration protocol run unchanged without sockets.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any

from elastic_cache.errors import ElasticCacheError, KeyNotFound, NodeUnavailable, ValueTooLarge
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.node.migration import FORWARD_TIMEOUT
from elastic_cache.node.protocol import Answer, NodeStats
from elastic_cache.node.service import NodeService
from elastic_cache.node.wire import (
    WireRecord,
    decode_digests,
    decode_frame,
    encode_digests,
    encode_frame,
)
from elastic_cache.tiers.layer import ColdHit, read_chunks

__all__ = ["LocalNetwork", "LocalNodeClient", "LocalPeerLink"]


class LocalNetwork:
    """In-process node services by address; a removed (or "killed") node is unreachable."""

    def __init__(self) -> None:
        self._services: dict[str, NodeService] = {}

    @staticmethod
    def address_of(node_id: str) -> str:
        return f"local://{node_id}"

    def add(self, service: NodeService) -> str:
        address = self.address_of(service.node_id)
        self._services[address] = service
        return address

    def remove(self, address: str) -> None:
        self._services.pop(address, None)

    def service(self, address: str) -> NodeService:
        try:
            return self._services[address]
        except KeyError:
            raise NodeUnavailable(f"no node answers at {address}") from None

    def peer(self, address: str) -> LocalPeerLink:
        """A `PeerLink` factory for the services of this network."""
        return LocalPeerLink(self, address)


class LocalPeerLink:
    """A source's link to a destination in the same process.

    Frames are encoded and decoded as over HTTP, so the wire format is exercised too.
    """

    def __init__(self, network: LocalNetwork, address: str) -> None:
        self._network = network
        self.address = address

    async def ingest(self, migration: str, frame: bytes) -> None:
        await self._network.service(self.address).receive_frame(migration, frame)

    async def forward(self, migration: str, record: WireRecord) -> None:
        target = self._network.service(self.address)
        for wire in decode_frame(encode_frame([record])):
            await target.receive_forward(migration, wire)

    async def digests(self, migration: str) -> dict[str, int]:
        digests = self._network.service(self.address).digests(migration)
        return decode_digests(encode_digests(list(digests), list(digests.values())))

    async def same(self, migration: str, frame: bytes) -> None:
        self._network.service(self.address).receive_same(migration, frame)

    async def close(self) -> None:
        return None


def _error_body(err: ElasticCacheError) -> bytes:
    """``json.dumps(err.to_json())``, encoded, byte for byte.

    An error without details (a miss: most queries of a simulated run) is written from
    its two strings directly; ``json.dumps`` builds an encoder on every call, which cost
    the simulator more than the miss itself (docs/results.md, "Running time").
    """
    if err.details:
        return json.dumps(err.to_json()).encode()
    code, message = _json_string(err.code), _json_string(err.message)
    return f'{{"error": {code}, "message": {message}}}'.encode()


def _error_answer(err: ElasticCacheError, epoch: int) -> Answer:
    retry = err.details.get("retry_after")
    return Answer(
        err.status,
        _error_body(err),
        "application/json",
        epoch,
        retry_after="" if retry is None else str(retry),
    )


class LocalNodeClient:
    """`NodeClient` over a `NodeService` of a `LocalNetwork`."""

    def __init__(self, node_id: str, address: str, network: LocalNetwork) -> None:
        self.node_id = node_id
        self.address = address
        self._network = network

    @property
    def _svc(self) -> NodeService:
        return self._network.service(self.address)

    async def get(self, key: str, *, head: bool = False, stream_above: int = -1) -> Answer:
        # In-process, every body is read whole (``stream_above`` is a wish, not a rule).
        svc = self._svc
        try:
            found = svc.get(key) if svc.cold is None else await svc.lookup(key)
        except ElasticCacheError as err:
            return _error_answer(err, svc.epoch)
        if isinstance(found, ColdHit):
            value = found.value
            if value is None:  # too large for memory: read it whole here (in-process)
                assert found.reader is not None and svc.cold is not None
                value = b"".join([c async for c in read_chunks(svc.cold, found.reader)])
            body = b"" if head else value
            return Answer(
                200,
                body,
                found.entry.content_type,
                svc.epoch,
                cache="HIT-COLD",
                ttl="" if head else svc.ttl_header(found.entry),
            )
        body = b"" if head else found.value
        ttl = "" if head else svc.ttl_header(found)
        return Answer(200, body, found.content_type, svc.epoch, ttl=ttl)

    async def put(
        self,
        key: str,
        value: bytes,
        content_type: str,
        ttl: float | None,
        epoch: int = 0,
        *,
        alone: bool = False,
        copy: bool = False,
        write: int = 0,
    ) -> Answer:
        svc = self._svc
        try:
            svc.fence(epoch)
            await svc.put(key, value, content_type, ttl, follow=copy, write=write)
        except ElasticCacheError as err:
            store = svc.store
            answer = _error_answer(err, svc.epoch)
            return answer._replace(used=store.used, capacity=store.capacity.limit)
        store = svc.store
        return Answer(204, b"", "", svc.epoch, store.used, store.capacity.limit)

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterator[bytes],
        content_type: str,
        ttl: float | None,
        length: int | None,
        epoch: int = 0,
        *,
        write: int = 0,
    ) -> tuple[Answer, bool]:
        raise ValueTooLarge(
            "value exceeds max_value_bytes, and in-process nodes take large values only over HTTP"
        )

    async def delete(
        self, key: str, epoch: int = 0, *, alone: bool = False, write: int = 0
    ) -> Answer:
        svc = self._svc
        try:
            svc.fence(epoch)
            existed = await svc.delete(key, write)
        except ElasticCacheError as err:
            return _error_answer(err, svc.epoch)
        used, limit = svc.store.used, svc.store.capacity.limit
        if not existed:  # the JSON miss the HTTP node answers
            miss = _error_answer(KeyNotFound("no value for this key"), svc.epoch)
            return miss._replace(used=used, capacity=limit)
        return Answer(204, b"", "", svc.epoch, used, limit)

    async def stats(self) -> NodeStats:
        return NodeStats.from_json(self._svc.stats())

    async def healthy(self) -> bool:
        try:
            self._svc  # noqa: B018 - reachability is the check
        except NodeUnavailable:
            return False
        return True

    async def set_ownership(
        self, epoch: int, ranges: list[list[int]], peers: dict[str, str] | None = None
    ) -> int:
        svc = self._svc
        svc.set_ownership(epoch, ranges)  # in-process nodes exchange no heartbeats
        return svc.epoch

    async def set_namespaces(self, table: dict[str, Any]) -> str:
        parsed = NamespaceTable.from_json(table)
        self._svc.set_namespaces(parsed)
        return parsed.version

    async def count_ranges(self, ranges: list[tuple[int, int]]) -> list[int]:
        svc = self._svc
        return [svc.store.count_range(lo, hi) for lo, hi in ranges]

    async def median_token(self, lo: int, hi: int) -> int | None:
        return self._svc.store.median_token(lo, hi)

    async def begin_migration(
        self,
        migration: str,
        role: str,
        lo: int,
        hi: int,
        peer: str | None = None,
        *,
        warm: bool = False,
        resume: str | None = None,
        reconcile: bool = False,
        forward_timeout: float | None = None,
    ) -> None:
        svc = self._svc
        if role == "destination" and resume is not None:
            svc.resume_incoming(migration, resume)
        elif role == "destination":
            svc.begin_incoming(migration, lo, hi, warm=warm)
        else:
            assert peer is not None
            svc.begin_outgoing(
                migration,
                lo,
                hi,
                peer,
                reconcile=reconcile,
                forward_timeout=forward_timeout or FORWARD_TIMEOUT,
            )

    async def send_migration(self, migration: str, keys: list[str] | None = None) -> dict[str, Any]:
        return (await self._svc.send(migration, keys)).to_json()

    async def forget_keys(self, migration: str, keys: list[str]) -> int:
        return self._svc.forget_changed(migration, keys)

    async def commit_migration(
        self, migration: str, epoch: int, ranges: list[list[int]], *, keep: bool = False
    ) -> dict[str, Any]:
        svc = self._svc
        if migration in svc.incoming:
            inc = svc.commit_incoming(migration, epoch, ranges)
            return {
                "role": "destination",
                "epoch": svc.epoch,
                "reused": inc.reused,
                "dropped": inc.dropped,
            }
        dropped = await svc.commit_outgoing(migration, epoch, ranges, keep=keep)
        return {"role": "source", "epoch": svc.epoch, "dropped": dropped}

    async def abort_migration(self, migration: str, *, kept: bool = True) -> None:
        svc = self._svc
        svc.abort_incoming(migration)
        await svc.abort_outgoing(migration, kept=kept)

    async def drop_range(self, lo: int, hi: int) -> int:
        return await self._svc.drop_range(lo, hi)

    async def close(self) -> None:
        """Nothing to release: no connections in-process."""
        return None
