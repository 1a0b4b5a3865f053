"""S3ArtifactStore against a real S3-compatible server (moto's server mode, a subprocess),
through the contract sessions use (:class:`toolswap.backends.store.ArtifactStore`)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from s3_server import S3Server
from toolswap.backends.store import StoreObject
from toolswap.errors import (
    ArtifactNotFoundError,
    ArtifactStoreError,
    ConfigurationError,
    SourceIdError,
)

pytest.importorskip("boto3")

from toolswap.backends.s3store import S3ArtifactStore

MiB = 1 << 20
NAME = "tool_result_001.txt"


@pytest.fixture
def store(s3_server: S3Server, bucket: str) -> S3ArtifactStore:
    return S3ArtifactStore(
        bucket, "fleet", client=s3_server.client(), part_size=5 * MiB, multipart_threshold=5 * MiB
    )


def _put(store: S3ArtifactStore, filename: str, data: bytes, session: str = "s1") -> str | None:
    digest = hashlib.sha256(data).hexdigest()
    return store.put_artifact("ws", session, filename, io.BytesIO(data), len(data), digest)


def _fetch(store: S3ArtifactStore, filename: str, session: str = "s1") -> tuple[bytes, StoreObject]:
    received = bytearray()
    obj = store.fetch_artifact("ws", session, filename, received.extend)
    return bytes(received), obj


def test_an_artifact_carries_its_full_digest_and_is_listed_in_number_order(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    for number, data in ((2, b"beta\ngamma\n"), (1, b"alpha\n" * 1000), (10, b"ten\n")):
        assert _put(store, f"tool_result_{number:03d}.txt", data) is not None
    s3_server.client().put_object(Bucket=bucket, Key="fleet/ws/s1/tool-results/notes.txt", Body=b"")

    listed = store.artifacts("ws", "s1")
    assert [o.filename for o in listed] == [
        "tool_result_001.txt",
        "tool_result_002.txt",
        "tool_result_010.txt",
    ]
    assert [o.size for o in listed] == [6000, 11, 4]
    head = store.stat_artifact("ws", "s1", "tool_result_002.txt")
    assert head is not None
    assert head.sha256 == hashlib.sha256(b"beta\ngamma\n").hexdigest()
    assert head.version == listed[1].version
    raw = s3_server.client().head_object(Bucket=bucket, Key="fleet/ws/s1/tool-results/" + NAME)
    assert raw["Metadata"]["sha256"] == hashlib.sha256(b"alpha\n" * 1000).hexdigest()
    assert store.artifacts("ws", "other") == []
    assert store.stat_artifact("ws", "s1", "tool_result_003.txt") is None


def test_a_name_another_host_took_is_never_overwritten(store: S3ArtifactStore) -> None:
    first = _put(store, NAME, b"the other host's output\n")
    assert first is not None

    assert _put(store, NAME, b"my output\n") is None

    data, obj = _fetch(store, NAME)
    assert data == b"the other host's output\n"
    assert obj.version == first


_WRITER = """
import hashlib, io, json, sys, boto3
from toolswap.backends.s3store import S3ArtifactStore
endpoint, bucket, tag = sys.argv[1:]
client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                      aws_secret_access_key="test", region_name="us-east-1")
store = S3ArtifactStore(bucket, "fleet", client=client)
names, number = [], 1
for i in range(6):
    data = f"{tag} {i}\\n".encode()
    while True:  # the replica's allocation: every host starts at the same numbers
        name = f"tool_result_{number:03d}.txt"
        number += 1
        digest = hashlib.sha256(data).hexdigest()
        if store.put_artifact("ws", "shared", name, io.BytesIO(data), len(data), digest):
            names.append(name)
            break
print(json.dumps(names))
"""


def test_hosts_writing_the_same_names_at_once_never_collide(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, s3_server.endpoint, bucket, f"host{h}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for h in range(3)
    ]
    written = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)

    names = [n for names in written for n in names]
    assert len(set(names)) == 18
    assert [o.filename for o in store.artifacts("ws", "shared")] == sorted(names)
    for h, mine in enumerate(written):
        for i, name in enumerate(mine):
            assert _fetch(store, name, "shared")[0] == f"host{h} {i}\n".encode()


def test_a_large_artifact_is_a_multipart_upload_and_fetches_back_byte_identical(
    store: S3ArtifactStore, tmp_path: Path
) -> None:
    data = b"".join(f"line {i:08d}\n".encode() for i in range(800_000))  # ~11 MiB
    path = tmp_path / "capture"
    path.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()

    with path.open("rb") as source:
        version = store.put_artifact("ws", "s1", NAME, source, len(data), digest)

    assert version is not None and version.strip('"').endswith("-3")  # parts of <= 5 MiB
    fetched, obj = _fetch(store, NAME)
    assert fetched == data
    assert (obj.size, obj.version, obj.sha256) == (len(data), version, digest)
    with path.open("rb") as source:  # the completion is conditional too
        assert store.put_artifact("ws", "s1", NAME, source, len(data), digest) is None


def test_fetching_an_object_that_is_not_there_says_so(store: S3ArtifactStore) -> None:
    with pytest.raises(ArtifactNotFoundError, match=r"tool_result_009\.txt is not in"):
        store.fetch_artifact("ws", "s1", "tool_result_009.txt", lambda block: None)


def test_delete_removes_exactly_the_version_checked_and_never_a_replacement(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    _put(store, NAME, b"original\n" * 100)
    checked = store.stat_artifact("ws", "s1", NAME)
    assert checked is not None
    key = f"fleet/ws/s1/tool-results/{NAME}"
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=b"replaced\n")

    assert store.delete_artifact("ws", "s1", checked) is False
    assert _fetch(store, NAME)[0] == b"replaced\n"

    current = store.stat_artifact("ws", "s1", NAME)
    assert current is not None
    assert store.delete_artifact("ws", "s1", current) is True
    assert store.delete_artifact("ws", "s1", current) is False
    assert store.artifacts("ws", "s1") == []


class _NoRequests:
    """A client that fails the test on any use: nothing may reach the store."""

    def __getattr__(self, name: str) -> Any:
        def request(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"{name} was called before the names were checked")

        return request


def test_store_urls_and_names_are_checked_before_any_request() -> None:
    client: Any = _NoRequests()
    store = S3ArtifactStore.from_url("s3://my-bucket/some/prefix", client=client)
    assert (store.bucket, store.prefix) == ("my-bucket", "some/prefix")
    assert S3ArtifactStore.from_url("s3://my-bucket", client=client).prefix == ""
    for bad in ("http://x/y", "s3://", "s3://UPPER", "my-bucket", "s3://b-x/a//b", "s3://b-x/.."):
        with pytest.raises(ConfigurationError):
            S3ArtifactStore.from_url(bad, client=client)
    with pytest.raises(ConfigurationError):
        S3ArtifactStore("my-bucket", "../escape", client=client)
    with pytest.raises(ValueError, match="part_size"):
        S3ArtifactStore("my-bucket", client=client, part_size=1024)

    obj = StoreObject(NAME, 1, 0, '"e"')
    calls: list[Callable[[], object]] = [
        lambda: store.put_artifact("../ws", "s1", NAME, io.BytesIO(b"x"), 1, "0" * 64),
        lambda: store.put_artifact("ws", "s1", "../../etc/passwd", io.BytesIO(b"x"), 1, "0" * 64),
        lambda: store.fetch_artifact("ws", "s/1", NAME, lambda block: None),
        lambda: store.fetch_artifact("ws", "s1", "manifest.jsonl", lambda block: None),
        lambda: store.stat_artifact("ws", "..", NAME),
        lambda: store.delete_artifact("ws", "s1", StoreObject("../x", 1, 0, '"e"')),
        lambda: store.delete_artifact("", "s1", obj),
        lambda: store.artifacts("ws", "a/b"),
        lambda: store.session_exists("..", "s1"),
        lambda: store.manifest_lines("ws", "../s1", 0),
        lambda: store.put_manifest_line("ws/x", "s1", 1, b"{}\n"),
    ]
    for call in calls:
        with pytest.raises((SourceIdError, ArtifactNotFoundError)):
            call()


def test_settings_boto3_refuses_are_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "not a url")
    with pytest.raises(ConfigurationError, match="AWS_ENDPOINT_URL"):
        S3ArtifactStore.from_url("s3://my-bucket/prefix")


_EVERY_METHOD: list[tuple[str, Callable[[S3ArtifactStore], object]]] = [
    ("session_exists", lambda s: s.session_exists("ws", "s1")),
    ("manifest_lines", lambda s: s.manifest_lines("ws", "s1", 0)),
    ("put_manifest_line", lambda s: s.put_manifest_line("ws", "s1", 1, b"{}\n")),
    ("put_manifest_snapshot", lambda s: s.put_manifest_snapshot("ws", "s1", 1, b"{}\n")),
    ("check_conditional_writes", lambda s: s.check_conditional_writes()),
    ("put_artifact", lambda s: _put(s, NAME, b"x\n")),
    ("put_artifact multipart", lambda s: _put(s, NAME, b"x" * (6 * MiB))),
    ("fetch_artifact", lambda s: s.fetch_artifact("ws", "s1", NAME, lambda block: None)),
    ("artifacts", lambda s: s.artifacts("ws", "s1")),
    ("delete_artifact", lambda s: s.delete_artifact("ws", "s1", StoreObject(NAME, 1, 0, '"e"'))),
]


@pytest.mark.parametrize("call", [c for _, c in _EVERY_METHOD], ids=[n for n, _ in _EVERY_METHOD])
def test_a_refusing_store_fails_every_method_with_a_typed_error(
    s3_server: S3Server, call: Callable[[S3ArtifactStore], object]
) -> None:
    missing = S3ArtifactStore(
        "no-such-bucket", "fleet", client=s3_server.client(), part_size=5 * MiB
    )
    with pytest.raises(ArtifactStoreError, match="NoSuchBucket") as caught:
        call(missing)
    assert type(caught.value) is ArtifactStoreError  # never "not found": the bucket is gone


@pytest.mark.parametrize(
    "call",
    [c for _, c in _EVERY_METHOD] + [lambda s: s.stat_artifact("ws", "s1", NAME)],
    ids=[n for n, _ in _EVERY_METHOD] + ["stat_artifact"],
)
def test_an_unreachable_store_fails_every_method_with_a_typed_error(
    call: Callable[[S3ArtifactStore], object],
) -> None:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",  # nothing listens
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
        config=Config(connect_timeout=1, retries={"total_max_attempts": 1}),
    )
    down = S3ArtifactStore("bucket", "fleet", client=client, part_size=5 * MiB)
    with pytest.raises(ArtifactStoreError, match="S3 failed while"):
        call(down)


class _IgnoresConditions:
    """A client for a store that ignores If-None-Match and If-Match (as some do)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)

        def without_conditions(**kwargs: Any) -> Any:
            kwargs.pop("IfNoneMatch", None)
            kwargs.pop("IfMatch", None)
            return call(**kwargs)

        return without_conditions


def test_a_store_that_ignores_write_conditions_is_refused(s3_server: S3Server, bucket: str) -> None:
    good = S3ArtifactStore(bucket, "fleet", client=s3_server.client())
    good.check_conditional_writes()
    lax = S3ArtifactStore(bucket, "fleet", client=_IgnoresConditions(s3_server.client()))

    with pytest.raises(ConfigurationError, match="ignores conditional writes"):
        lax.check_conditional_writes()
    assert s3_server.client().list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
