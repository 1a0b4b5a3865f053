"""S3ArtifactStore: the artifacts and manifest records of sessions kept in S3 (or any
S3-compatible store), for fleets.

Install the ``s3`` extra (boto3). The store keeps the contract of
:class:`toolswap.backends.store.ArtifactStore`; sessions bound to it with ``TOOLSWAP_STORE`` work
through every command. Objects are named like the local files::

    <prefix>/<workspace>/<session>/tool-results/tool_result_NNN.txt
    <prefix>/<workspace>/<session>/manifest/<seq:012d>.jsonl

An artifact carries its full SHA-256 in its metadata (``x-amz-meta-sha256``). The rules of
the local store hold, mapped onto S3's conditional requests instead of a local lock:

- **Never overwrite a name.** An artifact or a manifest record is written only if its name
  is free (``If-None-Match: *`` on the put, or on the multipart completion); a 412 means
  another host took it, and the caller moves on (:mod:`toolswap.backends.replica`).
- **Delete only the version checked.** A delete is conditional on the ETag the caller saw
  (``If-Match``); a replaced object is never deleted.
- **Fail typed.** Every failure of the store is an :class:`~toolswap.errors.ArtifactStoreError`
  (or :class:`~toolswap.errors.ArtifactNotFoundError` for an object that is not there); no
  boto exception reaches the caller.

Configuration: ``TOOLSWAP_STORE=s3://bucket/prefix`` (:meth:`S3ArtifactStore.from_url`);
the endpoint and credentials come from boto3's usual sources (``AWS_ENDPOINT_URL``, ...).
"""

from __future__ import annotations

import base64
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import IO, Any, BinaryIO

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from .._fork import track
from ..artifact import parse_artifact_filename, validate_session_id
from ..errors import (
    ArtifactNotFoundError,
    ArtifactStoreError,
    ConfigurationError,
    InvalidArgumentError,
)
from ..layout import TOOL_RESULTS_DIR
from .store import StoreObject, parse_s3_url

MANIFEST_DIR = "manifest"

__all__ = ["S3ArtifactStore"]

MIN_PART_SIZE = 5 << 20
"""S3's smallest part of a multipart upload (but the last)."""
_RECORD_RE = re.compile(r"([0-9]{12})\.jsonl")
_FETCHERS = 8
"""Record objects fetched at once when a replica catches up on many."""
_CONTROL = Config(
    connect_timeout=3, read_timeout=3, retries={"total_max_attempts": 3, "mode": "standard"}
)
"""Small requests (listings, HEADs, manifest records, deletes): a store that accepts and
never answers is refused in about ten seconds (three attempts), not boto's minutes, so
``run`` refuses before the command and a read falls back on the replica quickly."""
_BODIES = Config(
    connect_timeout=5, read_timeout=30, retries={"total_max_attempts": 3, "mode": "standard"}
)
"""Artifact and snapshot bodies: a large upload may wait longer for its reply (a multipart
completion), and a stalled transfer still ends within minutes."""
RECORD_MAX = 8 << 20
"""The largest manifest record object read (a record is one line of JSON)."""
SNAPSHOT_DIR = "manifest-snapshots"
SNAPSHOT_MAX = 1 << 30
"""The largest manifest snapshot read."""
_SNAPSHOT_WORTH = 64
"""Records behind before a replica starts from a snapshot rather than one GET each."""


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _absent(exc: ClientError) -> bool:
    """Whether a 404 says the object is not there (a missing bucket is a failure of the
    store's configuration, never an absent object)."""
    return _status(exc) == 404 and exc.response.get("Error", {}).get("Code") != "NoSuchBucket"


@contextmanager
def _store_errors(action: str) -> Iterator[None]:
    """A failure of the store (unreachable, refused, throttled) as ArtifactStoreError."""
    try:
        yield
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "?")
        raise ArtifactStoreError(f"S3 refused {action} ({_status(exc)} {code})") from exc
    except BotoCoreError as exc:
        raise ArtifactStoreError(f"S3 failed while {action}: {exc}") from exc


def _client(config: Config, url: str) -> Any:
    """A boto3 S3 client of the default session (its endpoint and credentials come from the
    usual ``AWS_*`` settings).

    Raises:
        ConfigurationError: boto3 refuses those settings (a malformed endpoint, ...).
    """
    try:
        return boto3.client("s3", config=config)
    except (BotoCoreError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot use {url}: {exc}; check AWS_ENDPOINT_URL and the other AWS_* settings"
        ) from None


def _field(reply: dict[str, Any], name: str, what: str) -> Any:
    """A header field of S3's reply about ``what``.

    Raises:
        ArtifactStoreError: the reply lacks it: cut short in its headers by a connection
            that broke, which the HTTP client takes for their end.
    """
    try:
        return reply[name]
    except KeyError:
        raise ArtifactStoreError(
            f"S3's reply about {what} came without its {name} (cut short?); retry"
        ) from None


def _object(filename: str, reply: dict[str, Any]) -> StoreObject:
    """The object a GET or HEAD reply describes."""
    return StoreObject(
        filename,
        int(_field(reply, "ContentLength", filename)),
        int(_field(reply, "LastModified", filename).timestamp() * 1_000_000_000),
        str(_field(reply, "ETag", filename)),
        reply.get("Metadata", {}).get("sha256"),
    )


class S3ArtifactStore:
    """Artifacts and manifest records of many sessions in one bucket (see the module
    docstring).

    Args:
        bucket: the bucket (it must exist).
        prefix: a key prefix ("" for none).
        client: a boto3 S3 client for every request (default: two clients of boto3's
            default session, one with short timeouts for small requests, one for bodies).
        part_size: bytes per part of a multipart upload.
        multipart_threshold: artifacts up to this size are one streamed put (S3 allows
            5 GiB); larger ones go up in parts.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        part_size: int = 8 << 20,
        multipart_threshold: int = 64 << 20,
    ) -> None:
        if not isinstance(part_size, int) or part_size < MIN_PART_SIZE:
            raise InvalidArgumentError(
                f"part_size must be at least {MIN_PART_SIZE} bytes (S3's minimum)"
            )
        if prefix.startswith("/"):
            raise ConfigurationError("the S3 prefix must be a relative key prefix")
        bucket, prefix = parse_s3_url(f"s3://{bucket}/{prefix}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.part_size = part_size
        self.multipart_threshold = max(multipart_threshold, part_size)
        self._control_client = client if client is not None else _client(_CONTROL, self.url)
        self._bodies_client = client
        self._bodies_guard = threading.Lock()
        self._own_clients = client is None
        track(self)

    def _forked(self) -> None:
        """In a forked child: a new lock, and clients of its own, made on first use (a
        client's pooled connections are the parent's; a client given to the store stays
        the caller's)."""
        self._bodies_guard = threading.Lock()
        if self._own_clients:
            self._control_client = self._bodies_client = None

    @property
    def _control(self) -> Any:
        """The client for records, leases and checks."""
        with self._bodies_guard:
            if self._control_client is None:
                self._control_client = _client(_CONTROL, self.url)
            return self._control_client

    @property
    def _bodies(self) -> Any:
        """The client for artifact and snapshot bodies, made on first use (a readiness
        check or a catch-up on records needs only the control client)."""
        with self._bodies_guard:
            if self._bodies_client is None:
                self._bodies_client = _client(_BODIES, self.url)
            return self._bodies_client

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> S3ArtifactStore:
        """A store from ``s3://bucket/prefix`` (the ``TOOLSWAP_STORE`` setting).

        Raises:
            ConfigurationError: not an ``s3://`` URL with a valid bucket name.
        """
        bucket, prefix = parse_s3_url(url)
        return cls(bucket, prefix, **kwargs)

    # -- names -----------------------------------------------------------------------

    def _session_prefix(self, workspace: str, session: str) -> str:
        validate_session_id(workspace)
        validate_session_id(session)
        return "/".join(p for p in (self.prefix, workspace, session) if p) + "/"

    def _dir(self, workspace: str, session: str) -> str:
        return self._session_prefix(workspace, session) + TOOL_RESULTS_DIR + "/"

    def _record_key(self, workspace: str, session: str, seq: int) -> str:
        return f"{self._session_prefix(workspace, session)}{MANIFEST_DIR}/{seq:012d}.jsonl"

    def key(self, workspace: str, session: str, filename: str) -> str:
        """The object key of ``filename`` in a session.

        Raises:
            SourceIdError: the workspace or session is not a valid name.
            ArtifactNotFoundError: ``filename`` is not an artifact name.
        """
        if parse_artifact_filename(filename) is None:
            raise ArtifactNotFoundError(f"{filename!r} is not an artifact name")
        return self._dir(workspace, session) + filename

    # -- writing an artifact ---------------------------------------------------------

    def _write_new(self, key: str, source: IO[bytes], size: int, digest: str) -> str | None:
        """Write ``key`` only if it does not exist; its ETag, or None on a 412."""
        meta = {"sha256": digest}
        try:
            if size <= self.multipart_threshold:
                # One streamed put; the server checks the bytes against the SHA-256 too.
                reply = self._bodies.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=source,
                    ContentLength=size,
                    ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode(),
                    IfNoneMatch="*",
                    Metadata=meta,
                    ContentType="text/plain; charset=utf-8",
                )
                return str(_field(reply, "ETag", key))
            return self._multipart(key, source, meta)
        except ClientError as exc:
            if _status(exc) in (409, 412):  # taken, or a racing conditional write
                return None
            raise

    def _multipart(self, key: str, source: IO[bytes], meta: dict[str, str]) -> str | None:
        upload = self._bodies.create_multipart_upload(
            Bucket=self.bucket, Key=key, Metadata=meta, ContentType="text/plain; charset=utf-8"
        )
        upload_id = upload["UploadId"]
        try:
            parts = []
            number = 1
            while block := source.read(self.part_size):
                reply = self._bodies.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=block
                )
                parts.append({"PartNumber": number, "ETag": _field(reply, "ETag", key)})
                number += 1
            reply = self._bodies.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
            return str(reply["ETag"])
        except BaseException:
            # An upload left behind costs storage, never correctness.
            with suppress(ClientError, BotoCoreError):
                self._bodies.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    # -- the session contract (toolswap.backends.store.ArtifactStore) -----------------------------

    def check_conditional_writes(self) -> None:
        """Refuse a store that ignores ``If-None-Match`` or ``If-Match``: on one, two hosts
        would overwrite each other's artifacts and records without a word.

        One probe object under ``<prefix>/.toolswap-probe/``: written twice (the second
        must be refused), deleted with a wrong ETag (must be refused), then deleted.

        Raises:
            ConfigurationError: the store does not enforce the conditions.
            ArtifactStoreError: the store failed.
        """
        key = "/".join(p for p in (self.prefix, ".toolswap-probe", secrets.token_hex(8)) if p)
        refused = []
        with _store_errors("probing conditional writes"):
            for _ in range(2):
                try:
                    self._control.put_object(Bucket=self.bucket, Key=key, Body=b"", IfNoneMatch="*")
                    refused.append(False)
                except ClientError as exc:
                    if _status(exc) not in (409, 412):
                        raise
                    refused.append(True)
            try:
                self._control.delete_object(Bucket=self.bucket, Key=key, IfMatch='"0"')
                refused.append(False)
            except ClientError as exc:
                if _status(exc) != 412:
                    raise
                refused.append(True)
            self._control.delete_object(Bucket=self.bucket, Key=key)
        if refused != [False, True, True]:
            raise ConfigurationError(
                f"{self.url} ignores conditional writes (If-None-Match / If-Match); hosts "
                "sharing it would overwrite each other, so toolswap does not use it"
            )

    def session_exists(self, workspace: str, session: str) -> bool:
        """Whether the store holds anything of the session."""
        with _store_errors("a listing"):
            reply = self._control.list_objects_v2(
                Bucket=self.bucket, Prefix=self._session_prefix(workspace, session), MaxKeys=1
            )
        return bool(reply.get("KeyCount", 0))

    def manifest_lines(
        self, workspace: str, session: str, after_seq: int, *, snapshot: bool = True
    ) -> list[bytes]:
        """The session's manifest records after ``after_seq``, in order.

        One GET per record; a replica far behind starts from the newest snapshot instead
        (``snapshot=False`` never does), and fetches only the records after it.
        """
        prefix = f"{self._session_prefix(workspace, session)}{MANIFEST_DIR}/"
        keys: list[str] = []
        with _store_errors("listing the manifest"):
            pages = self._control.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket,
                Prefix=prefix,
                StartAfter=self._record_key(workspace, session, after_seq),
            )
            for page in pages:
                for item in page.get("Contents", []):
                    if _RECORD_RE.fullmatch(item["Key"][len(prefix) :]):
                        keys.append(item["Key"])
        lines: list[bytes] = []
        behind = int(keys[-1][len(prefix) : len(prefix) + 12]) - after_seq if keys else 0
        if snapshot and behind > _SNAPSHOT_WORTH:
            newest = self._newest_snapshot(workspace, session)
            data = self._get_snapshot(newest[1]) if newest and newest[0] > after_seq else None
            if newest is not None and data is not None:  # None: replaced by a newer one meanwhile
                snapped = newest[0]
                lines = [line + b"\n" for line in data.split(b"\n")[after_seq:snapped]]
                keys = [k for k in keys if int(k[len(prefix) : len(prefix) + 12]) > snapped]
        if len(keys) <= 1:
            return lines + [self._get_record(key) for key in keys]
        with ThreadPoolExecutor(min(_FETCHERS, len(keys))) as pool:
            return lines + list(pool.map(self._get_record, keys))

    def _snapshot_prefix(self, workspace: str, session: str) -> str:
        return f"{self._session_prefix(workspace, session)}{SNAPSHOT_DIR}/"

    def _newest_snapshot(self, workspace: str, session: str) -> tuple[int, str] | None:
        prefix = self._snapshot_prefix(workspace, session)
        newest: tuple[int, str] | None = None
        with _store_errors("listing manifest snapshots"):
            for page in self._control.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                for item in page.get("Contents", []):
                    match = _RECORD_RE.fullmatch(item["Key"][len(prefix) :])
                    if match and (newest is None or int(match.group(1)) > newest[0]):
                        newest = (int(match.group(1)), item["Key"])
        return newest

    def _unless_absent(self, request: Callable[..., Any], key: str) -> Any:
        """The reply to ``request`` (a GET or a HEAD) for ``key``, or None when there is no
        such object."""
        with _store_errors(f"reading {key}"):
            try:
                return request(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if _absent(exc):
                    return None
                raise

    def _get_snapshot(self, key: str) -> bytes | None:
        reply = self._unless_absent(self._bodies.get_object, key)
        if reply is None:
            return None
        with _store_errors(f"reading {key}"):
            body = reply["Body"]
            data: bytes = body.read(SNAPSHOT_MAX + 1)
            body.close()
        if len(data) > SNAPSHOT_MAX:
            return None  # passed over: the records themselves are read instead
        return data

    def put_manifest_snapshot(self, workspace: str, session: str, seq: int, data: bytes) -> None:
        """Keep records 1..``seq`` as one object (written once), so a new replica reads one
        object instead of ``seq``; older snapshots are deleted."""
        if len(data) > SNAPSHOT_MAX:
            return  # too large to be read back: replicas read the records themselves
        prefix = self._snapshot_prefix(workspace, session)
        key = f"{prefix}{seq:012d}.jsonl"
        with _store_errors(f"writing {key}"):
            try:
                self._bodies.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            except ClientError as exc:
                if _status(exc) not in (409, 412):  # taken: another host wrote the same
                    raise
            for page in self._control.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                for item in page.get("Contents", []):
                    match = _RECORD_RE.fullmatch(item["Key"][len(prefix) :])
                    if match and int(match.group(1)) < seq:
                        self._control.delete_object(Bucket=self.bucket, Key=item["Key"])

    def _get_record(self, key: str) -> bytes:
        with _store_errors(f"reading {key}"):
            body = self._control.get_object(Bucket=self.bucket, Key=key)["Body"]
            data: bytes = body.read(RECORD_MAX + 1)
            body.close()
        if len(data) > RECORD_MAX:
            raise ArtifactStoreError(f"{key} is larger than any manifest record; not read")
        return data

    def put_manifest_line(self, workspace: str, session: str, seq: int, line: bytes) -> bool:
        """Write record ``seq`` only if it does not exist; False when another host did."""
        key = self._record_key(workspace, session, seq)
        with _store_errors(f"writing {key}"):
            try:
                self._control.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=line,
                    IfNoneMatch="*",
                    ContentType="application/json",
                )
            except ClientError as exc:
                if _status(exc) in (409, 412):  # taken, or a racing conditional write
                    return False
                raise
        return True

    def put_artifact(
        self,
        workspace: str,
        session: str,
        filename: str,
        source: BinaryIO,
        size: int,
        sha256: str,
    ) -> str | None:
        """Write ``filename`` only if the name is free: its ETag, or None if taken."""
        key = self.key(workspace, session, filename)
        with _store_errors(f"writing {key}"):
            return self._write_new(key, source, size, sha256)

    def fetch_artifact(
        self, workspace: str, session: str, filename: str, sink: Callable[[bytes], None]
    ) -> StoreObject:
        """Stream the current version of ``filename`` into ``sink`` (what ``sink`` raises
        stops the transfer and reaches the caller).

        Raises:
            ArtifactNotFoundError: no such object.
        """
        key = self.key(workspace, session, filename)
        reply = self._unless_absent(self._bodies.get_object, key)
        if reply is None:
            raise ArtifactNotFoundError(f"{filename} is not in {self.url} (session {session!r})")
        with _store_errors(f"reading {key}"):
            body = reply["Body"]
            try:
                for block in iter(lambda: body.read(1 << 20), b""):
                    sink(block)
            finally:
                body.close()
        return _object(filename, reply)

    def artifacts(self, workspace: str, session: str) -> list[StoreObject]:
        """Every artifact object of the session, in number order."""
        prefix = self._dir(workspace, session)
        found: list[tuple[int, StoreObject]] = []
        with _store_errors("listing artifacts"):
            for page in self._control.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                for item in page.get("Contents", []):
                    name = item["Key"][len(prefix) :]
                    number = parse_artifact_filename(name)
                    if number is not None:
                        mtime = int(item["LastModified"].timestamp() * 1_000_000_000)
                        obj = StoreObject(name, int(item["Size"]), mtime, str(item["ETag"]))
                        found.append((number, obj))
        return [obj for _, obj in sorted(found, key=lambda pair: pair[0])]

    def stat_artifact(self, workspace: str, session: str, filename: str) -> StoreObject | None:
        """The current version of ``filename`` with its stored SHA-256 (None: absent)."""
        reply = self._unless_absent(
            self._control.head_object, self.key(workspace, session, filename)
        )
        return None if reply is None else _object(filename, reply)

    def delete_artifact(self, workspace: str, session: str, obj: StoreObject) -> bool:
        """Delete exactly the version ``obj`` names (If-Match: its ETag)."""
        key = self.key(workspace, session, obj.filename)
        with _store_errors(f"deleting {key}"):
            try:
                self._control.delete_object(Bucket=self.bucket, Key=key, IfMatch=obj.version)
            except ClientError as exc:
                if _status(exc) == 412 or _absent(exc):
                    return False
                raise
        return True
