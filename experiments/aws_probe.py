"""What runs on a calibration instance: report in, time S3 GETs and EBS reads, report out.

``experiments/aws_calibrate.py`` puts this file, with a JSON configuration, in the user
data of every instance it launches; cloud-init runs it as root once the instance has
booted; on an instance the kit restarts, a per-boot script runs it again at each later
boot with a configuration that only reports the restart. It needs only the Python 3.9
standard library (Amazon Linux 2023's ``python3``) and no credentials: it talks to S3
through presigned URLs only. In the kit's dry run the same file runs as a local process
against moto's server.

1. PUT a small marker object (``marker_url``): the kit times the boot until it appears.
2. When ``measure`` is set: for each S3 object (``objects``: size and presigned GET URL),
   one untimed GET to open the connection, then ``repetitions`` timed GETs of the whole
   object on that kept-alive connection; for each size, a file of that size written to
   ``ebs_dir`` (the root volume, EBS on every current AMI), then ``repetitions`` timed
   reads of the whole file, each after dropping the page cache when it can (root only).
3. PUT the measurements as JSON (``results_url``): ``{"rows": [[kind, size, repetition,
   seconds, cold], ...], "error": null}``; on failure the error text instead.

Run: ``python3 aws_probe.py CONFIG.json``.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
import traceback
import urllib.parse
from typing import Any

_CHUNK = 1 << 20


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.netloc, timeout=120)
    return http.client.HTTPConnection(parts.netloc, timeout=120)


def _target(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts.path + ("?" + parts.query if parts.query else "")


def put(url: str, body: bytes) -> None:
    """PUT ``body`` to a presigned URL (a fresh connection)."""
    conn = _connection(url)
    try:
        conn.request("PUT", _target(url), body=body, headers={"Content-Length": str(len(body))})
        reply = conn.getresponse()
        reply.read()
        if reply.status >= 300:
            raise RuntimeError(f"PUT answered {reply.status}")
    finally:
        conn.close()


def timed_get(conn: http.client.HTTPConnection, url: str) -> tuple[float, int]:
    """GET the whole object on ``conn``: (seconds from request to last byte, bytes)."""
    start = time.perf_counter()
    conn.request("GET", _target(url))
    reply = conn.getresponse()
    got = 0
    while True:
        chunk = reply.read(_CHUNK)
        if not chunk:
            break
        got += len(chunk)
    seconds = time.perf_counter() - start
    if reply.status != 200:
        raise RuntimeError(f"GET answered {reply.status}")
    return seconds, got


def drop_page_cache() -> bool:
    """Flush and drop the page cache, so the next read comes from the volume; False
    when not allowed (not root, or not Linux)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
    except OSError:
        return False
    return True


def timed_read(path: str) -> float:
    """Seconds to read the whole file at ``path``."""
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.read(_CHUNK):
            pass
    return time.perf_counter() - start


def measure(config: dict[str, Any]) -> list[list[Any]]:
    """The timed GETs and reads the configuration asks for, as result rows."""
    rows: list[list[Any]] = []
    reps = int(config["repetitions"])
    for size, url in config["objects"]:
        conn = _connection(url)
        try:
            _, got = timed_get(conn, url)  # opens the connection (DNS, TCP, TLS)
            if got != size:
                raise RuntimeError(f"GET of a {size}-byte object returned {got} bytes")
            for rep in range(1, reps + 1):
                seconds, _ = timed_get(conn, url)
                rows.append(["s3_get", size, rep, seconds, None])
        finally:
            conn.close()
    directory = config["ebs_dir"]
    os.makedirs(directory, exist_ok=True)
    for size, _ in config["objects"]:
        path = os.path.join(directory, f"value-{size}")
        with open(path, "wb") as fh:
            left = size
            while left:
                n = min(left, _CHUNK)
                fh.write(os.urandom(n))
                left -= n
            fh.flush()
            os.fsync(fh.fileno())
        for rep in range(1, reps + 1):
            cold = drop_page_cache()
            rows.append(["ebs_read", size, rep, timed_read(path), cold])
        os.remove(path)
    return rows


def main(argv: list[str]) -> int:
    with open(argv[1]) as fh:
        config = json.load(fh)
    put(config["marker_url"], b"up\n")
    if not config["measure"]:
        return 0
    try:
        result: dict[str, Any] = {"rows": measure(config), "error": None}
    except Exception:
        result = {"rows": [], "error": traceback.format_exc()}
    put(config["results_url"], json.dumps(result).encode())
    return 0 if result["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
