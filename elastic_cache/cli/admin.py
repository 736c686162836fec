"""``ecache nodes add`` and ``ecache nodes remove``: change a running cluster from the
command line and watch what the change causes.

The admin API answers ``POST /v1/cluster/nodes`` and ``DELETE /v1/cluster/nodes/{id}``
only once the launch and the live migrations are over, which can take minutes on EC2
with a full node. While the call runs, `watch_call` polls ``GET /v1/cluster`` twice a
second and reports new events as lines ("launching node-3", "node-3 up ...") and each
running migration as a progress bar (`elastic_cache.progress.Progress`) fed by the
source node's count of records sent.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TextIO

from elastic_cache.adminapi import NodeRemoved, NodesAdded, events_of, migrations_of
from elastic_cache.cli.status import fetch_cluster
from elastic_cache.errors import ConfigError, ElasticCacheError, NodeUnavailable, error_from_json
from elastic_cache.progress import Progress

__all__ = ["ClusterWatcher", "add_nodes", "admin_call", "remove_node", "watch_call"]


def admin_call(
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    *,
    timeout: float = 3600.0,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """One admin API request; returns the JSON answer.

    Args:
        method: the HTTP method.
        url: the whole URL.
        body: a JSON body, if any.
        timeout: seconds.
        token: the cluster token (a cluster with a token needs it); sent as
            ``Authorization: Bearer TOKEN``.
        tls: whom an ``https://`` coordinator is trusted by
            (`elastic_cache.tls.client_context`; None: the system's CAs).

    Raises:
        NodeUnavailable: the coordinator did not answer.
        ElasticCacheError: the typed error the coordinator answered with.
        ConfigError: ``url`` is not a URL.
    """
    data = None if body is None else json.dumps(body).encode()
    try:
        request = urllib.request.Request(url, data=data, method=method)
    except ValueError as exc:  # "notaurl/v1/...", "http://[::1/v1/..."
        raise ConfigError(f"--url: {url!r} is not a coordinator's URL: {exc}") from exc
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls) as resp:
            answer: dict[str, Any] = json.load(resp)
            return answer
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = {"message": raw[:200].decode("utf-8", "replace")}
        if not isinstance(payload, dict):
            payload = {"message": str(payload)}
        raise error_from_json(exc.code, payload) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NodeUnavailable(f"the coordinator at {url} did not answer: {exc}") from exc


class ClusterWatcher:
    """Reports what happens in a cluster, one `poll` at a time.

    Args:
        fetch: returns the cluster view (``GET /v1/cluster``).
        stream: where lines and bars go.
        tty: draw bars in place; default: whether ``stream`` is a terminal.
        clock: seconds, monotonic (for the bars).
    """

    def __init__(
        self,
        fetch: Callable[[], dict[str, Any]],
        stream: TextIO,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self.stream = stream
        self.tty = tty
        self._clock = clock
        self._seq: int | None = None
        self.bars: dict[str, Progress] = {}

    def _line(self, text: str) -> None:
        active = [b for b in self.bars.values() if not b.finished]
        if active:
            active[-1].note(text)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    @property
    def answered(self) -> bool:
        """Whether the coordinator answered a poll."""
        return self._seq is not None

    def poll(self) -> dict[str, Any]:
        """Fetch the view once; report new events and migration progress.

        The first poll only remembers the newest event, so earlier history is not
        replayed.

        Raises:
            MalformedAnswer: an event or a migration of the view is malformed
                (`elastic_cache.adminapi`).
        """
        view = self._fetch()
        events = events_of(view)
        if self._seq is None:
            self._seq = max((e.seq for e in events), default=0)
        else:
            for event in events:
                if event.seq > self._seq:
                    self._seq = event.seq
                    self._line(f"  {event.message}")
        for mig in migrations_of(view):
            bar = self.bars.get(mig.id)
            if mig.state == "running":
                if bar is None:
                    label = f"moving {mig.source} -> {mig.destination}"
                    bar = Progress(
                        label,
                        total=mig.total or None,
                        unit="records",
                        stream=self.stream,
                        tty=self.tty,
                        clock=self._clock,
                    )
                    self.bars[mig.id] = bar
                bar.update(mig.sent or 0, total=mig.total or None)
            elif bar is not None and not bar.finished:
                bar.update(mig.records)
                bar.finish(mig.state)
        return view

    def close(self, *, failed: bool = False) -> None:
        """Finish any bar still open: its migration ended between two polls, or, when
        the watched request ``failed`` (the coordinator stopped answering), its outcome
        is not known here (a move the coordinator died under was shown "ended", and
        its next life abandoned it: review)."""
        for bar in self.bars.values():
            bar.finish("outcome unknown (ecache status shows it)" if failed else "ended")


def watch_call(
    call: Callable[[], dict[str, Any]],
    watcher: ClusterWatcher,
    *,
    period: float = 0.5,
) -> dict[str, Any]:
    """Run ``call`` in a thread and ``watcher.poll()`` every ``period`` seconds until it
    returns; returns its result or raises its error.

    A poll that fails (the coordinator is busy) is skipped, not fatal.
    """
    result: dict[str, Any] = {}
    error: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            result.update(call())
        except BaseException as exc:  # handed to the caller below
            error.append(exc)
        finally:
            done.set()

    with_poll = True
    try:
        watcher.poll()
    except ElasticCacheError:
        with_poll = False
    thread = threading.Thread(target=run, name="ecache-admin-call", daemon=True)
    thread.start()
    while not done.wait(period):
        if with_poll:
            with contextlib.suppress(ElasticCacheError):
                watcher.poll()
    thread.join()
    if with_poll:
        with contextlib.suppress(ElasticCacheError):
            watcher.poll()
    watcher.close(failed=bool(error))
    if error:
        raise error[0]
    return result


def _watcher(
    url: str, stream: TextIO, tty: bool | None, token: str | None, tls: ssl.SSLContext | None
) -> ClusterWatcher:
    return ClusterWatcher(
        lambda: fetch_cluster(url, timeout=5.0, token=token, tls=tls), stream, tty=tty
    )


def add_nodes(
    url: str,
    count: int = 1,
    *,
    stream: TextIO,
    tty: bool | None = None,
    period: float = 0.5,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """``POST /v1/cluster/nodes`` while reporting the launches and migrations.

    Raises:
        ElasticCacheError: as the admin API answers (Conflict at ``max_nodes``, ...).
    """
    base = url.rstrip("/")
    stream.write(f"adding {count} node(s) to {base}\n")
    answer = watch_call(
        lambda: admin_call(
            "POST", f"{base}/v1/cluster/nodes", {"count": count}, token=token, tls=tls
        ),
        _watcher(base, stream, tty, token, tls),
        period=period,
    )
    added = NodesAdded.from_json(answer)
    for node in added.added:
        line = f"added {node.id} at {node.address} (up in {node.boot_seconds:.2f} s)"
        mig = node.migration
        if mig is not None:
            line += f"; moved {mig.records:,} records from {mig.source} in {mig.seconds:.2f} s"
        stream.write(line + "\n")
    stream.write(f"ring epoch {added.epoch}\n")
    return answer


def remove_node(
    url: str,
    node_id: str,
    *,
    stream: TextIO,
    tty: bool | None = None,
    period: float = 0.5,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """``DELETE /v1/cluster/nodes/{id}`` while reporting the migrations (``force``: even
    when fewer nodes than copies of each key would stay).

    Raises:
        ElasticCacheError: as the admin API answers (UnknownNode, Conflict, ...).
    """
    base = url.rstrip("/")
    stream.write(f"removing {node_id} from {base}\n")
    watcher = _watcher(base, stream, tty, token, tls)
    try:
        answer = watch_call(
            lambda: admin_call(
                "DELETE",
                f"{base}/v1/cluster/nodes/{node_id}" + ("?force=true" if force else ""),
                token=token,
                tls=tls,
            ),
            watcher,
            period=period,
        )
    except NodeUnavailable as exc:
        if not watcher.answered:
            raise  # no coordinator there to begin with
        # The coordinator died under the removal: its next life finishes it from the
        # state file (event removal_resumed), which the error alone did not say.
        raise NodeUnavailable(
            f"{exc}; a restarted coordinator finishes a removal under way: "
            "`ecache status` shows whether it did"
        ) from exc
    removed = NodeRemoved.from_json(answer)
    moved = sum(m.records for m in removed.migrations)
    stream.write(
        f"removed {node_id}; moved {moved:,} records to its successors; "
        f"ring epoch {removed.epoch}\n"
    )
    return answer
