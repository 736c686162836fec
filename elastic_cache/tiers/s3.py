"""`S3Tier`: cold values as objects in an S3 bucket shared by the whole cluster.

Object names are ``{prefix}/{token:016x}/{quoted key}``: the token in fixed-width hex
first, so a listing (which S3 returns in byte order) is in ring order and a token range
is one ``ListObjectsV2`` from ``StartAfter``. A key is percent-quoted (``/`` too), so a
key is one path segment. A name that would pass S3's 1024-byte limit uses
``{prefix}/{token:016x}/~{sha256(key)}`` instead. The key itself travels in the object's
metadata (base64) and is checked on every read, so a hashed name can never answer for
another key.

Metadata: ``ecache-key`` (base64url of the UTF-8 key), ``ecache-version``,
``ecache-expires`` (wall-clock seconds, 0 for never) and ``ecache-type`` (the value's
content type, percent-quoted). The object's own ``Content-Type`` is always
``application/octet-stream``: moto's server (the local demo's S3) parses a body sent as
``application/x-www-form-urlencoded`` -- what ``curl --data-binary`` sends by default --
as a form and stores an empty object (tests/integration/test_tiers_modes.py).

Large values are written with a multipart upload in `PART_BYTES` parts as they stream
in; the object appears only when the upload completes, so a reader never sees a torn
value. The boto3 client is passed in (its credentials, region and endpoint are the
caller's business; ``endpoint_url`` points it at moto's server for a local demo).
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

from botocore.exceptions import BotoCoreError, ClientError

from elastic_cache.tiers.base import (
    ColdEntry,
    ColdTierError,
    ColdTierUnavailable,
    Stored,
    error_details,
    stored_content_type,
)

__all__ = ["PART_BYTES", "S3Tier", "translate_error"]

log = logging.getLogger("elastic_cache.tiers.s3")

#: Multipart part size (S3's minimum is 5 MiB for every part but the last).
PART_BYTES = 8 * 1024 * 1024

#: S3's limit on an object name, in UTF-8 bytes.
MAX_NAME_BYTES = 1024

#: Error codes that mean "later": S3 is throttling or had an internal failure.
RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "503",
        "500",
    }
)

_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})


def translate_error(exc: Exception, what: str) -> ColdTierError:
    """A botocore error as a typed tier error carrying the AWS error code.

    Throttling, internal errors and connection failures become `ColdTierUnavailable`
    (503); anything else (AccessDenied, NoSuchBucket, ...) `ColdTierError` (500).
    """
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = f"S3 {what} failed: {code}: {error.get('Message', '')}".rstrip(": ")
        cls = ColdTierUnavailable if code in RETRYABLE_CODES or status >= 500 else ColdTierError
        return cls(message, **error_details("s3", aws_code=code))
    code = type(exc).__name__
    return ColdTierUnavailable(f"S3 {what} failed: {exc}", **error_details("s3", aws_code=code))


def _key_b64(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii")


def _key_from_b64(raw: str) -> str:
    return base64.urlsafe_b64decode(raw.encode("ascii")).decode("utf-8")


class _ObjectReader:
    """An S3 object body read in chunks."""

    def __init__(self, entry: ColdEntry, body: Any) -> None:
        self.entry = entry
        self._body = body

    def read(self, size: int) -> bytes:
        try:
            data: bytes = self._body.read(size)
        except BotoCoreError as exc:
            raise translate_error(exc, "GetObject") from exc
        return data

    def close(self) -> None:
        self._body.close()


class _MultipartWriter:
    """A value uploaded in parts as it arrives; ``put_object`` when it stays small."""

    def __init__(self, tier: S3Tier, entry: ColdEntry) -> None:
        self._tier = tier
        self._entry = entry
        self._name = tier.name_of(entry.key, entry.token)
        self._buf = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._done = False

    def _send_part(self, data: bytes) -> None:
        tier = self._tier
        try:
            if self._upload_id is None:
                answer = tier.client.create_multipart_upload(
                    Bucket=tier.bucket, Key=self._name, **tier._put_args(self._entry)
                )
                self._upload_id = str(answer["UploadId"])
            number = len(self._parts) + 1
            answer = tier.client.upload_part(
                Bucket=tier.bucket,
                Key=self._name,
                UploadId=self._upload_id,
                PartNumber=number,
                Body=data,
            )
            self._parts.append({"ETag": answer["ETag"], "PartNumber": number})
        except (ClientError, BotoCoreError) as exc:
            self.abort()
            raise translate_error(exc, "multipart upload") from exc

    def write(self, chunk: bytes) -> None:
        assert not self._done, "write after commit or abort"
        self._buf += chunk
        while len(self._buf) >= PART_BYTES:
            part = bytes(self._buf[:PART_BYTES])
            del self._buf[:PART_BYTES]
            self._send_part(part)

    def commit(self, version: int) -> None:
        assert not self._done, "commit after commit or abort"
        tier = self._tier
        if self._upload_id is None:
            self._done = True
            tier.put(self._entry._replace(version=version), bytes(self._buf))
            self._buf.clear()
            return
        if self._buf:
            self._send_part(bytes(self._buf))
            self._buf.clear()
        try:
            tier.client.complete_multipart_upload(
                Bucket=tier.bucket,
                Key=self._name,
                UploadId=self._upload_id,
                MultipartUpload={"Parts": self._parts},
            )
        except (ClientError, BotoCoreError) as exc:
            self.abort()
            raise translate_error(exc, "complete multipart upload") from exc
        self._done = True

    def abort(self) -> None:
        self._done = True
        self._buf.clear()
        upload, self._upload_id = self._upload_id, None
        if upload is not None:
            try:
                self._tier.client.abort_multipart_upload(
                    Bucket=self._tier.bucket, Key=self._name, UploadId=upload
                )
            except (ClientError, BotoCoreError) as exc:  # a lifecycle rule cleans up
                log.warning("could not abort multipart upload of %s: %s", self._name, exc)


class S3Tier:
    """Cold values in ``s3://bucket/prefix``.

    Args:
        client: a boto3 S3 client (thread-safe; the node calls it from a thread pool).
        bucket: the bucket; it must exist (``ecache up --hybrid`` creates one on moto).
        prefix: key prefix without leading or trailing ``/`` ("" for the bucket root).
    """

    kind = "s3"
    shared = True

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._base = f"{self.prefix}/" if self.prefix else ""

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    # -- names -----------------------------------------------------------------------

    def name_of(self, key: str, token: int) -> str:
        """``{prefix}/{token:016x}/{quoted key}`` (hashed when too long). Cost: O(len(key))."""
        name = f"{self._base}{token:016x}/{quote(key, safe='')}"
        if len(name.encode("utf-8")) > MAX_NAME_BYTES:
            digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
            name = f"{self._base}{token:016x}/~{digest}"
        return name

    def token_of_name(self, name: str) -> int:
        start = len(self._base)
        return int(name[start : start + 16], 16)

    def _put_args(self, entry: ColdEntry) -> dict[str, Any]:
        return {
            "ContentType": "application/octet-stream",  # see the module docstring
            "Metadata": {
                "ecache-key": _key_b64(entry.key),
                "ecache-version": str(entry.version),
                "ecache-expires": repr(float(entry.expires_at)),
                "ecache-type": quote(entry.content_type, safe=""),
            },
        }

    def _entry(self, name: str, answer: dict[str, Any]) -> ColdEntry | None:
        meta = answer.get("Metadata") or {}
        try:
            key = _key_from_b64(meta["ecache-key"])
            version = int(meta.get("ecache-version", "0"))
            expires = float(meta.get("ecache-expires", "0"))
            ctype = stored_content_type(
                unquote(meta.get("ecache-type", "application%2Foctet-stream"))
            )
        except (KeyError, ValueError, UnicodeDecodeError):
            return None  # not an object we wrote
        return ColdEntry(
            key,
            self.token_of_name(name),
            version,
            ctype,
            expires,
            int(answer.get("ContentLength", 0)),
        )

    # -- values ----------------------------------------------------------------------

    def put(self, entry: ColdEntry, value: bytes) -> None:
        """One ``PutObject``. Raises `ColdTierError` / `ColdTierUnavailable`."""
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=self.name_of(entry.key, entry.token),
                Body=value,
                **self._put_args(entry),
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate_error(exc, "PutObject") from exc

    def writer(self, entry: ColdEntry) -> _MultipartWriter:
        return _MultipartWriter(self, entry)

    def _get_object(self, name: str) -> dict[str, Any] | None:
        try:
            answer: dict[str, Any] = self.client.get_object(Bucket=self.bucket, Key=name)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _NOT_FOUND:
                return None
            raise translate_error(exc, "GetObject") from exc
        except BotoCoreError as exc:
            raise translate_error(exc, "GetObject") from exc
        return answer

    def open(self, key: str, token: int) -> _ObjectReader | None:
        """``GetObject``, body not yet read."""
        answer = self._get_object(self.name_of(key, token))
        if answer is None:
            return None
        entry = self._entry(self.name_of(key, token), answer)
        if entry is None or entry.key != key:
            answer["Body"].close()
            return None
        return _ObjectReader(entry, answer["Body"])

    def _read_whole(self, reader: _ObjectReader) -> bytes:
        try:
            data: bytes = reader._body.read()
        except BotoCoreError as exc:
            raise translate_error(exc, "GetObject") from exc
        finally:
            reader.close()
        return data

    def get(self, key: str, token: int) -> tuple[ColdEntry, bytes] | None:
        """One ``GetObject``, body read whole."""
        reader = self.open(key, token)
        if reader is None:
            return None
        return reader.entry, self._read_whole(reader)

    def read_name(self, name: str) -> tuple[ColdEntry, bytes] | None:
        answer = self._get_object(name)
        if answer is None:
            return None
        entry = self._entry(name, answer)
        if entry is None:
            answer["Body"].close()
            return None
        return entry, self._read_whole(_ObjectReader(entry, answer["Body"]))

    def head(self, key: str, token: int) -> ColdEntry | None:
        """One ``HeadObject``."""
        entry = self._head_entry(self.name_of(key, token))
        return entry if entry is not None and entry.key == key else None

    def key_of_name(self, name: str) -> str | None:
        """Decoded from the name; a hashed name (a long key) costs a ``HeadObject``."""
        quoted = name[len(self._base) + 17 :]
        if not quoted.startswith("~"):
            return unquote(quoted)
        entry = self._head_entry(name)
        return None if entry is None else entry.key

    def _head_entry(self, name: str) -> ColdEntry | None:
        """The entry ``HeadObject`` describes for object ``name`` (None: no such object,
        or not one of ours)."""
        try:
            answer = self.client.head_object(Bucket=self.bucket, Key=name)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _NOT_FOUND:
                return None
            raise translate_error(exc, "HeadObject") from exc
        except BotoCoreError as exc:
            raise translate_error(exc, "HeadObject") from exc
        return self._entry(name, answer)

    def delete(self, key: str, token: int) -> None:
        """One ``DeleteObject`` (S3 answers the same whether or not it existed)."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.name_of(key, token))
        except (ClientError, BotoCoreError) as exc:
            raise translate_error(exc, "DeleteObject") from exc

    def delete_names(self, names: list[str]) -> int:
        """``DeleteObjects``, a thousand names per request.

        Raises:
            ColdTierError: the request failed, or S3 refused some of the objects (it
                answers 200 and lists them under ``Errors``): a name that may still be
                there must not be reported removed.
        """
        removed = 0
        for start in range(0, len(names), 1000):
            batch = [{"Key": n} for n in names[start : start + 1000]]
            try:
                answer = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": False}
                )
            except (ClientError, BotoCoreError) as exc:
                raise translate_error(exc, "DeleteObjects") from exc
            removed += len(answer.get("Deleted", []))
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                code = str(first.get("Code", "Unknown"))
                cls = ColdTierUnavailable if code in RETRYABLE_CODES else ColdTierError
                raise cls(
                    f"S3 DeleteObjects refused {len(errors)} of {len(batch)} objects "
                    f"(first {first.get('Key')!r}: {code}: {first.get('Message', '')})",
                    **error_details("s3", aws_code=code),
                )
        return removed

    # -- listing ---------------------------------------------------------------------

    def _list(self, start_after: str | None, stop_above: int) -> Iterator[Stored]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._base}
        if start_after is not None:
            args["StartAfter"] = start_after
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(**args):
                for item in page.get("Contents", []):
                    name = str(item["Key"])
                    try:
                        token = self.token_of_name(name)
                    except ValueError:
                        continue
                    if token > stop_above:
                        return
                    modified = item.get("LastModified")
                    yield Stored(
                        name,
                        int(item.get("Size", 0)),
                        modified.timestamp() if modified is not None else 0.0,
                    )
        except (ClientError, BotoCoreError) as exc:
            raise translate_error(exc, "ListObjectsV2") from exc

    def stored_bytes(self, entry: ColdEntry) -> int:
        """The value (the metadata travels in headers; S3 lists the body's size)."""
        return entry.length

    def inventory(self, lo: int, hi: int) -> Iterator[Stored]:
        """Names, sizes and write times with a token in ``(lo, hi]``, in ring order.
        Cost: one ``ListObjectsV2`` per thousand names (two for a range that wraps past
        zero); the listing carries sizes and times, so nothing else is asked."""
        # "{lo:016x}0" sorts after every "{lo:016x}/..." name and before the next token.
        after = f"{self._base}{lo:016x}0"
        top = (1 << 64) - 1
        if lo == hi:
            yield from self._list(None, top)
        elif lo < hi:
            yield from self._list(after, hi)
        else:
            yield from self._list(after, top)
            yield from self._list(None, hi)

    def names(self, lo: int, hi: int) -> Iterator[str]:
        """Names with a token in ``(lo, hi]`` in ring order (`inventory`'s names)."""
        for stored in self.inventory(lo, hi):
            yield stored.name

    def close(self) -> None:
        return None
