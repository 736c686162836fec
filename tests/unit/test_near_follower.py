"""The near cache's stream task across event loops (`NearFollower`)."""

from __future__ import annotations

import asyncio

from elastic_cache.client.changes import NearFollower
from elastic_cache.nearcache import NearCache


def test_a_follower_on_a_second_event_loop_runs_one_stream() -> None:
    """An `AsyncClient` used in a second ``asyncio.run``: a read started the stream on
    the new loop, then the client noticed the loop change and forgot that task too; the
    next read started another, and `stop` cancelled only the second (review: two
    streams, one outliving close)."""
    follower = NearFollower(NearCache(10), "", lambda: None, "http://127.0.0.1:1")  # type: ignore[arg-type,return-value]

    async def forever() -> None:
        await asyncio.Event().wait()

    follower._run = forever  # type: ignore[method-assign]

    async def first() -> None:
        follower.follow()
        await asyncio.sleep(0)

    asyncio.run(first())  # its task is cancelled as the loop ends

    async def second() -> tuple[int, int]:
        follower.follow()  # a read starts the stream
        follower.moved()  # the client then notices the new loop
        follower.follow()  # and the next read
        me = asyncio.current_task()
        running = len([t for t in asyncio.all_tasks() if t is not me])
        await follower.stop()
        await asyncio.sleep(0)
        return running, len([t for t in asyncio.all_tasks() if t is not me])

    assert asyncio.run(second()) == (1, 0)
