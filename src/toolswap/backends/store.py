"""Sessions kept in a shared artifact store (a fleet of hosts): the binding and the contract.

With ``TOOLSWAP_STORE=s3://bucket/prefix`` a session's authority moves to the store: its
artifacts are objects there and its manifest is a sequence of record objects, one per
record, each written only if its sequence number is free. The session directory on each
host becomes a verified replica: its ``manifest.jsonl`` holds the store's records byte for
byte (same hash chain), and its ``tool-results/`` holds the artifacts this host wrote or
read, each checked against the recorded SHA-256 before it is linked in. Everything that
reads a session (read, grep, ls, verify, the MCP tools) therefore runs on local files.

The contract a store keeps (:class:`ArtifactStore`) maps the local rules onto conditional
requests instead of a local lock:

- a name is never overwritten: an artifact is written only if its name is free, and the
  writer takes the next number when another host took it first;
- a manifest record is written only if its sequence number is free, so two hosts
  appending at once make one chain (the loser re-reads and appends after the winner);
- a delete names the exact version it verified, so a replaced object is never deleted.

A session is bound once, when it is created while ``TOOLSWAP_STORE`` is set, in
``<session>/store.json``; from then on it always uses that store, whatever the
environment says, and a session started without a store is never silently moved into one.
"""

from __future__ import annotations

import importlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from .. import durable
from .._fork import renew_in_child
from ..artifact import validate_session_id
from ..crashpoints import crash_point
from ..errors import ArtifactAccessError, ConfigurationError, SourceIdError
from ..layout import STORE_BINDING_NAME, STORE_ENV

__all__ = [
    "STORE_BINDING_NAME",
    "STORE_ENV",
    "ArtifactStore",
    "StoreBinding",
    "StoreObject",
    "canonical_store_url",
    "open_store",
    "parse_s3_url",
    "read_binding",
    "write_binding",
]

_BINDING_MAX = 4096
_S3_URL_RE = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?")


def parse_s3_url(url: str) -> tuple[str, str]:
    """``(bucket, prefix)`` of ``s3://bucket/prefix``; the prefix without outer slashes.

    Raises:
        ConfigurationError: not such a URL, or a prefix with ``..`` or empty segments.
    """
    match = _S3_URL_RE.fullmatch(url.strip()) if isinstance(url, str) else None
    if match is None:
        raise ConfigurationError(f"{url!r} is not an S3 URL such as s3://bucket/prefix")
    prefix = (match.group(2) or "").strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ConfigurationError(
            f"{url!r}: the key prefix may not have empty, '.' or '..' segments"
        )
    return match.group(1), prefix


def canonical_store_url(url: str) -> str:
    """The one spelling of a store URL (``s3://b/p/`` and ``s3://b/p`` are one store), which
    bindings keep and compare and shared services key sessions by.

    Raises:
        ConfigurationError: not a supported store URL.
    """
    if not isinstance(url, str) or not url.strip().startswith("s3://"):
        raise ConfigurationError(
            f"{STORE_ENV}={url!r} is not a supported store; use s3://bucket/prefix"
        )
    bucket, prefix = parse_s3_url(url)
    return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"


@dataclass(frozen=True, slots=True)
class StoreObject:
    """One artifact object as the store reports it."""

    filename: str
    size: int
    mtime_ns: int
    """When the store last wrote the object (its Last-Modified), in ns since the epoch."""
    version: str
    """The version a conditional read or delete names (S3: the ETag)."""
    sha256: str | None = None
    """The SHA-256 stored with the object, when the request returned it."""


class ArtifactStore(Protocol):
    """What a shared store does for the sessions bound to it (see the module docstring).

    Every method takes the workspace and session names, already validated; none of them
    ever forms a local path.
    """

    url: str

    def session_exists(self, workspace: str, session: str) -> bool:
        """Whether the store holds any record of the session."""
        ...

    def manifest_lines(
        self, workspace: str, session: str, after_seq: int, *, snapshot: bool = True
    ) -> list[bytes]:
        """The manifest records after ``after_seq``, in order, each one line of bytes
        (taken from a snapshot when one saves many requests, unless ``snapshot`` is False).
        """
        ...

    def put_manifest_snapshot(self, workspace: str, session: str, seq: int, data: bytes) -> None:
        """Keep records 1..``seq`` (``data``: their lines) as one object, best effort."""
        ...

    def check_conditional_writes(self) -> None:
        """Raise ConfigurationError unless the store enforces its write conditions."""
        ...

    def put_manifest_line(self, workspace: str, session: str, seq: int, line: bytes) -> bool:
        """Write record ``seq`` only if no record ``seq`` exists; False if one does."""
        ...

    def put_artifact(
        self,
        workspace: str,
        session: str,
        filename: str,
        source: BinaryIO,
        size: int,
        sha256: str,
    ) -> str | None:
        """Write an artifact only if its name is free; its version, or None if taken."""
        ...

    def fetch_artifact(
        self, workspace: str, session: str, filename: str, sink: Callable[[bytes], None]
    ) -> StoreObject:
        """Stream the current version of an artifact into ``sink``.

        Raises:
            ArtifactNotFoundError: the store has no such object.
        """
        ...

    def artifacts(self, workspace: str, session: str) -> list[StoreObject]:
        """Every artifact object of the session (names that are not artifacts are left out)."""
        ...

    def stat_artifact(self, workspace: str, session: str, filename: str) -> StoreObject | None:
        """The current version of an artifact with its stored SHA-256; None if absent."""
        ...

    def delete_artifact(self, workspace: str, session: str, obj: StoreObject) -> bool:
        """Delete exactly the version ``obj`` names; False if it was replaced or is gone."""
        ...


_BACKENDS: dict[str, tuple[str, str]] = {"s3://": ("toolswap.backends.s3store", "S3ArtifactStore")}
"""URL scheme -> (module, class with a ``from_url``); a backend is imported on first use, so
the core needs none of their packages."""
_STORES: dict[str, ArtifactStore] = {}
"""One store object per URL and process: a forked child opens its own (a client's pooled
connections are its parent's)."""
_STORES_GUARD = threading.Lock()
renew_in_child(globals(), "_STORES_GUARD")  # (see _fork)
renew_in_child(globals(), "_STORES", factory=dict)


def open_store(url: str) -> ArtifactStore:
    """The store a ``TOOLSWAP_STORE`` URL names (one object per store and process).

    Raises:
        ConfigurationError: not a supported store URL, or its extra is not installed.
    """
    url = canonical_store_url(url)
    with _STORES_GUARD:
        store = _STORES.get(url)
        if store is not None:
            return store
        module_name, class_name = _BACKENDS["s3://"]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError(
                f"{STORE_ENV}={url} needs {exc.name}, which is not installed: "
                "pip install 'toolswap[s3]'"
            ) from None
        made: ArtifactStore = getattr(module, class_name).from_url(url)
        _STORES[url] = made
        return made


@dataclass(frozen=True, slots=True)
class StoreBinding:
    """Which store holds a session, and under which workspace name."""

    url: str
    workspace: str
    session: str

    @property
    def store(self) -> ArtifactStore:
        return open_store(self.url)

    def to_json(self) -> bytes:
        body = {"store": self.url, "workspace": self.workspace, "session": self.session}
        return json.dumps(body, sort_keys=True).encode() + b"\n"


def _parse_binding(raw: bytes, where: Path) -> StoreBinding:
    try:
        data = json.loads(raw)
        url, workspace, session = data["store"], data["workspace"], data["session"]
        return StoreBinding(
            canonical_store_url(url), validate_session_id(workspace), validate_session_id(session)
        )
    except (ValueError, KeyError, TypeError, SourceIdError) as exc:
        raise ConfigurationError(
            f"{where} is not a valid store binding ({exc}); restore it or move the session aside"
        ) from None


def read_binding(root: Path) -> StoreBinding | None:
    """The store binding of the session at ``root`` (None: a local session).

    Raises:
        ConfigurationError: the binding file is unreadable, not ours, or malformed.
    """
    path = root / STORE_BINDING_NAME
    raw = durable.read_trusted(
        path, _BINDING_MAX + 1, error=lambda message: ConfigurationError(f"cannot read {message}")
    )
    if raw is None:
        return None
    if len(raw) > _BINDING_MAX:
        raise ConfigurationError(f"{path} is too large to be a store binding")
    return _parse_binding(raw, path)


def write_binding(root: Path, binding: StoreBinding) -> StoreBinding:
    """Bind the session at ``root`` to a store, once (an existing binding wins and is
    returned; the caller compares it).

    The file is written under a temporary name, fsynced and linked into place, so a crash
    leaves either no binding or a whole one.
    """
    try:
        durable.write_atomically(root, STORE_BINDING_NAME, binding.to_json(), replace=False)
    except OSError as exc:
        raise ArtifactAccessError(f"cannot bind {root} to its store: {exc.strerror}") from None
    crash_point("store.bound")
    existing = read_binding(root)
    assert existing is not None
    return existing
