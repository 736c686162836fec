"""The cold layer's bookkeeping in the store under ``on_full = demote``: victims kept for
the cold tier, and demotion paused while the tier refuses writes (`Demotion`). Never on
a request's path.
"""

from __future__ import annotations

from elastic_cache.store.eviction import Eviction
from elastic_cache.store.records import Victim

__all__ = ["Demotion"]


class Demotion(Eviction):
    """`Eviction` with the victims kept for the cold tier and the demotion's pause."""

    @property
    def demotion_paused(self) -> bool:
        """Under ``demote``: whether the cold tier cannot take values now
        (`pause_demotion`); a write that needs room is then refused (``on_cold_full =
        refuse``) or evicts."""
        return self._demotion_paused

    @property
    def demotion_retry_at(self) -> float:
        """While paused: clock time at which demotion is retried."""
        return self._demotion_retry_at

    @property
    def demotion_error(self) -> str:
        """While paused: why ("" when running)."""
        return self._demotion_error

    def pause_demotion(self, reason: str, retry_at: float | None = None) -> bool:
        """The cold tier failed a write: demotion pauses (or stays paused) for
        ``reason``, retried at clock time ``retry_at`` (None: the time already set).
        Both only go into the `StoreFull` a refused write gets. Returns whether
        demotion was running until now. Cost: O(1).
        """
        was_running = not self._demotion_paused
        self._demotion_paused = True
        self._demotion_error = reason
        if retry_at is not None:
            self._demotion_retry_at = retry_at
        return was_running

    def resume_demotion(self) -> None:
        """The cold tier takes values again: writes that need room demote. Cost: O(1)."""
        self._demotion_paused = False
        self._demotion_error = ""

    def cold_value_swept(self, key: str) -> None:
        """The cold tier's cap removed the value of ``key``: an ``evict`` for those who
        follow the changes, unless the key has a value in memory again. Cost: O(1)."""
        self._value_gone("evict", key)

    def victim_expired(self, key: str) -> None:
        """A victim (`take_victims`) of ``key`` was past its TTL when its turn to be
        written came, and was dropped: an ``expire`` for those who follow the changes,
        unless the key has a value in memory again. Cost: O(1)."""
        self._value_gone("expire", key)

    def cold_expired(self, key: str) -> None:
        """A read found the cold tier's value of ``key`` past its TTL (no sweep looks
        at cold values): an ``expire`` for those who follow the changes, unless memory
        holds a value again. Without it a near cache kept serving the value (review).
        Cost: O(1)."""
        self._value_gone("expire", key)

    def count_evicted_victim(self, key: str) -> None:
        """A victim (`take_victims`) of ``key`` was dropped instead of written to the
        cold tier (the tier is at its byte cap, or failed under ``on_cold_full =
        evict``): it counts as an eviction, and is one for those who follow the changes
        (`on_change`), unless the key has a value in memory again. Cost: O(1)."""
        self._evictions += 1
        self._value_gone("evict", key)

    def _value_gone(self, kind: str, key: str) -> None:
        """Tell those who follow the changes (`on_change`) that the value of ``key`` a
        cold tier held or was to hold is gone, unless memory holds a newer one."""
        if self.on_change is not None and self._index.get(key) is None:
            self.on_change(kind, key)

    def take_victims(self) -> list[Victim]:
        """Records that left memory for the cold tier since the last call (``demote``).

        The caller writes them to the tier; until then they are in no index, so the
        caller must keep them reachable (see `elastic_cache.tiers.layer`). Cost: O(1).
        """
        victims, self._victims = self._victims, []
        return victims

    def demote_lru(self, count: int) -> int:
        """Move up to ``count`` least-recently-used records to `take_victims` now (a
        flush before a clean stop, or a test), every namespace in turn. Returns how
        many. Cost: O(count).
        """
        moved = 0
        for part in self._parts:
            while moved < count:
                found = self._lru_victim(part, None)
                if found is None:
                    break
                victim, vrec = found
                token = self._index.token_of(victim)
                assert token is not None
                self._remove(victim, vrec)
                self._victims.append((victim, token, vrec))
                moved += 1
        self.demotions += moved
        return moved
