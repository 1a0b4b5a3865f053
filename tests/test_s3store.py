"""S3ArtifactStore against a real S3-compatible server (moto's server mode, a subprocess)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

import pytest

from s3_server import S3Server
from toolswap.errors import ArtifactIntegrityError, ArtifactNotFoundError, ConfigurationError

pytest.importorskip("boto3")

from toolswap.s3store import S3ArtifactStore

MiB = 1 << 20


@pytest.fixture
def store(s3_server: S3Server, bucket: str) -> S3ArtifactStore:
    return S3ArtifactStore(
        bucket, "fleet", client=s3_server.client(), part_size=5 * MiB, multipart_threshold=5 * MiB
    )


def test_captures_get_the_next_names_and_carry_their_full_digest(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    first = store.put("ws", "s1", [b"alpha\n" * 1000])
    second = store.put("ws", "s1", [b"beta\n", b"gamma\n"])
    assert (first.filename, second.filename) == ("tool_result_001.txt", "tool_result_002.txt")
    assert first.key == "fleet/ws/s1/tool-results/tool_result_001.txt"
    assert second.sha256 == hashlib.sha256(b"beta\ngamma\n").hexdigest()
    head = s3_server.client().head_object(Bucket=bucket, Key=second.key)
    assert head["Metadata"]["sha256"] == second.sha256
    assert store.list("ws", "s1") == ["tool_result_001.txt", "tool_result_002.txt"]
    assert store.list("ws", "other") == []


class _StaleListing(S3ArtifactStore):
    """A host whose listing was taken before another host wrote (the race window)."""

    def list(self, workspace: str, session: str) -> list[str]:
        return []


def test_a_name_another_host_took_is_never_overwritten(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    taken = store.put("ws", "s1", [b"the other host's output\n"])
    late = _StaleListing(
        bucket, "fleet", client=s3_server.client(), part_size=5 * MiB, multipart_threshold=5 * MiB
    )
    mine = late.put("ws", "s1", [b"my output\n"])
    assert mine.filename == "tool_result_002.txt"  # 412 on 001, then the next number
    assert store.open("ws", "s1", taken.filename).sha256 == taken.sha256
    assert store.open("ws", "s1", mine.filename).sha256 == mine.sha256


_WRITER = """
import json, sys, boto3
from toolswap.s3store import S3ArtifactStore
endpoint, bucket, tag = sys.argv[1:]
client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                      aws_secret_access_key="test", region_name="us-east-1")
store = S3ArtifactStore(bucket, "fleet", client=client)
names = [store.put("ws", "shared", [f"{tag} {i}\\n".encode()]).filename for i in range(6)]
print(json.dumps(names))
"""


def test_hosts_writing_the_same_session_at_once_never_collide(
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
    assert store.list("ws", "shared") == sorted(names)
    contents = set()
    for name in names:
        artifact = store.open("ws", "shared", name)
        contents.add(store.read_range(artifact, 0, artifact.size))
    assert contents == {f"host{h} {i}\n".encode() for h in range(3) for i in range(6)}


def test_a_large_capture_is_a_multipart_upload_and_reads_back_by_ranges(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    data = b"".join(f"line {i:08d}\n".encode() for i in range(800_000))  # ~11 MiB
    chunks = [data[i : i + MiB] for i in range(0, len(data), MiB)]
    artifact = store.put("ws", "s1", chunks)
    assert artifact.etag.strip('"').endswith("-3")  # three parts of at most 5 MiB
    opened = store.open("ws", "s1", artifact.filename)
    assert (opened.size, opened.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    boundary = 5 * MiB
    assert (
        store.read_range(opened, boundary - 10, boundary + 10)
        == data[boundary - 10 : boundary + 10]
    )
    assert store.read_range(opened, len(data) - 5, len(data) + 100) == data[-5:]
    assert store.read_range(opened, 3, 3) == b""


def test_a_replaced_object_is_never_read_into_a_page_nor_deleted(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    artifact = store.put("ws", "s1", [b"original\n" * 100])
    opened = store.open("ws", "s1", artifact.filename)
    s3_server.client().put_object(Bucket=bucket, Key=artifact.key, Body=b"replaced\n")
    with pytest.raises(ArtifactIntegrityError, match="changed or vanished"):
        store.read_range(opened, 0, 8)
    assert store.delete(opened) is False
    assert s3_server.client().get_object(Bucket=bucket, Key=artifact.key)["Body"].read() == (
        b"replaced\n"
    )


def test_an_object_that_does_not_match_its_digest_is_never_served(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    key = "fleet/ws/s1/tool-results/tool_result_001.txt"
    s3_server.client().put_object(
        Bucket=bucket, Key=key, Body=b"tampered\n", Metadata={"sha256": "0" * 64}
    )
    with pytest.raises(ArtifactIntegrityError, match="does not match"):
        store.open("ws", "s1", "tool_result_001.txt")
    with pytest.raises(ArtifactNotFoundError):
        store.open("ws", "s1", "tool_result_009.txt")


def test_delete_removes_the_verified_version_once(
    store: S3ArtifactStore, s3_server: S3Server, bucket: str
) -> None:
    artifact = store.put("ws", "s1", [b"bye\n"])
    assert store.delete(artifact) is True
    assert store.delete(artifact) is False
    assert store.list("ws", "s1") == []


def test_store_urls_and_names_are_checked_before_any_request(s3_server: S3Server) -> None:
    client: Any = s3_server.client()
    store = S3ArtifactStore.from_url("s3://my-bucket/some/prefix", client=client)
    assert (store.bucket, store.prefix) == ("my-bucket", "some/prefix")
    assert S3ArtifactStore.from_url("s3://my-bucket", client=client).prefix == ""
    for bad in ("http://x/y", "s3://", "s3://UPPER", "my-bucket"):
        with pytest.raises(ConfigurationError):
            S3ArtifactStore.from_url(bad, client=client)
    with pytest.raises(ConfigurationError):
        S3ArtifactStore("my-bucket", "../escape", client=client)
    with pytest.raises(ValueError, match="part_size"):
        S3ArtifactStore("my-bucket", client=client, part_size=1024)
    with pytest.raises(ValueError):
        store.key("../ws", "s1", "tool_result_001.txt")
    with pytest.raises(ArtifactNotFoundError):
        store.key("ws", "s1", "../../etc/passwd")


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
