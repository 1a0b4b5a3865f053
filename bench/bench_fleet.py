"""The S3 artifact store against moto's S3 server (a subprocess on 127.0.0.1).

1. An artifact put in the store (S3ArtifactStore.put_artifact: a conditional put with the
   SHA-256, or a multipart upload) vs the floor: a plain boto3 put_object of the same bytes.
2. Fetching it whole (fetch_artifact, streamed to a sink) vs one plain GET.
3. A session kept in the store (TOOLSWAP_STORE): a capture (local capture and pointer,
   the object put under a free name, the manifest record, the replica) vs a plain put of
   the same bytes; another host's first read (fetch, verify, link, page) vs one plain GET
   of the whole object; its later page faults (local, verified once) in ms.
4. A new host catching up on a session of 1,000 manifest records: from the snapshot the
   1,000th append left vs one GET per record.

moto keeps objects in memory in a Python process, so both sides pay the same server
cost; the ratios show what the store adds on top of the requests it must make.
"""

from __future__ import annotations

import hashlib
import io
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from s3_server import S3Server, unavailable_reason

QUICK = os.environ.get("TOOLSWAP_BENCH_QUICK") == "1"
SIZES = [256 << 10, 12 << 20] if not QUICK else [256 << 10, 6 << 20]
RUNS = 5 if QUICK else 9


def main() -> None:
    reason = unavailable_reason()
    if reason is not None:
        print(f"S3 store: not measured ({reason})")
        return
    from toolswap.backends.s3store import S3ArtifactStore

    server = S3Server().start()
    try:
        client = server.client()
        client.create_bucket(Bucket="bench")
        store = S3ArtifactStore("bench", "fleet", client=client)
        parts = S3ArtifactStore(
            "bench", "parts", client=client, part_size=8 << 20, multipart_threshold=8 << 20
        )
        print("artifact put (median of runs) vs a plain boto3 put_object of the same bytes")
        number = 0
        for size, used in ((SIZES[0], store), (SIZES[-1], store), (SIZES[-1], parts)):
            data = os.urandom(size // 2).hex().encode()
            digest = hashlib.sha256(data).hexdigest()
            plain, ours = [], []
            for i in range(RUNS):
                start = time.perf_counter()
                client.put_object(Bucket="bench", Key=f"plain/{size}/{i}", Body=data)
                plain.append(time.perf_counter() - start)
                number += 1
                start = time.perf_counter()
                used.put_artifact(
                    "ws", "s", f"tool_result_{number:03d}.txt", io.BytesIO(data), size, digest
                )
                ours.append(time.perf_counter() - start)
            p, o = statistics.median(plain), statistics.median(ours)
            mode = "multipart" if size > used.multipart_threshold else "one put"
            print(
                f"  {size / (1 << 20):6.2f} MiB ({mode:9}): store {o * 1e3:7.1f} ms, "
                f"plain put {p * 1e3:7.1f} ms  ({o / p:.2f}x the floor)"
            )
        fetches, gets = [], []
        for _ in range(RUNS):
            received = bytearray()
            start = time.perf_counter()
            store.fetch_artifact("ws", "s", f"tool_result_{number - RUNS:03d}.txt", received.extend)
            fetches.append(time.perf_counter() - start)
            start = time.perf_counter()
            client.get_object(Bucket="bench", Key=f"plain/{SIZES[-1]}/0")["Body"].read()
            gets.append(time.perf_counter() - start)
        f, g = statistics.median(fetches), statistics.median(gets)
        print(f"fetching {SIZES[-1] / (1 << 20):.2f} MiB whole vs one plain GET")
        print(f"  store {f * 1e3:.1f} ms, plain GET {g * 1e3:.1f} ms ({f / g:.2f}x)")
        _bound_session(server, client)
        if not QUICK:
            _catch_up()
    finally:
        server.stop()


def _bound_session(server: S3Server, client: object) -> None:
    """Section 3: the path every command takes on a session kept in the store."""
    import tempfile

    from toolswap import ToolResultExternalizer

    os.environ.update(server.env(), TOOLSWAP_STORE="s3://bench/sessions")
    size = SIZES[-1]
    data = os.urandom(size // 2).hex().encode()
    lines = b"\n".join(data[i : i + 100] for i in range(0, len(data), 100))
    with tempfile.TemporaryDirectory() as tmp:
        ours, plain, local, first, whole, saved, later = [], [], [], [], [], [], []
        os.environ["TOOLSWAP_STORE"] = ""
        for i in range(RUNS):
            alone = ToolResultExternalizer(Path(tmp, "local", "ws", f"s{i}"))
            start = time.perf_counter()
            alone.externalize(lines, "bench")
            local.append(time.perf_counter() - start)
        os.environ["TOOLSWAP_STORE"] = "s3://bench/sessions"
        for i in range(RUNS):
            writer = ToolResultExternalizer(Path(tmp, "a", "ws", f"s{i}"))
            start = time.perf_counter()
            result = writer.externalize(lines, "bench")
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            client.put_object(Bucket="bench", Key=f"plain-bound/{i}", Body=lines)  # type: ignore[attr-defined]
            plain.append(time.perf_counter() - start)
            reader = ToolResultExternalizer(Path(tmp, "b", "ws", f"s{i}"))
            sid = result.artifact.source_id
            start = time.perf_counter()
            reader.read_lines(sid, 1000, 200)
            first.append(time.perf_counter() - start)
            start = time.perf_counter()
            client.get_object(Bucket="bench", Key=f"plain-bound/{i}")["Body"].read()  # type: ignore[attr-defined]
            whole.append(time.perf_counter() - start)
            start = time.perf_counter()
            _get_to_disk(client, f"plain-bound/{i}", Path(tmp, f"copy{i}"))
            saved.append(time.perf_counter() - start)
            start = time.perf_counter()
            reader.read_lines(sid, 5000, 200)
            later.append(time.perf_counter() - start)
    o, p = statistics.median(ours), statistics.median(plain)
    f, w = statistics.median(first), statistics.median(whole)
    print(f"a session kept in the store, {size / (1 << 20):.2f} MiB of text (median of runs)")
    loc = statistics.median(local)
    print(
        f"  capture {o * 1e3:.1f} ms vs plain put {p * 1e3:.1f} ms ({o / p:.2f}x); vs a local "
        f"capture {loc * 1e3:.1f} ms + the plain put ({o / (loc + p):.2f}x that floor)"
    )
    d = statistics.median(saved)
    print(
        f"  first read on another host {f * 1e3:.1f} ms vs one plain GET of the object "
        f"{w * 1e3:.1f} ms ({f / w:.2f}x); vs that GET written to a file, fsynced and hashed "
        f"(the replica's floor) {d * 1e3:.1f} ms ({f / d:.2f}x); later pages "
        f"{statistics.median(later) * 1e3:.2f} ms"
    )


def _catch_up() -> None:
    """Section 4: what a host joining a long session reads first."""
    import tempfile

    from toolswap import ToolResultExternalizer
    from toolswap.backends.store import open_store

    count = 1000
    with tempfile.TemporaryDirectory() as tmp:
        writer = ToolResultExternalizer(Path(tmp, "long", "ws", "long"))
        for i in range(count):
            writer.externalize(f"{i}\n", "bench")
    store = open_store(os.environ["TOOLSWAP_STORE"])
    timings: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(3):
        for snapshot in (True, False):
            start = time.perf_counter()
            lines = store.manifest_lines("ws", "long", 0, snapshot=snapshot)
            timings[snapshot].append(time.perf_counter() - start)
            assert len(lines) == count
    fast, slow = (statistics.median(timings[flag]) for flag in (True, False))
    print(f"a new host catching up on {count:,} manifest records")
    print(
        f"  from the snapshot {fast * 1e3:.1f} ms vs one GET per record {slow * 1e3:.1f} ms "
        f"({slow / fast:.1f}x faster)"
    )


def _get_to_disk(client: Any, key: str, path: Path) -> None:
    """The floor of a first read on a replica: GET, write, fsync, one SHA-256 pass."""
    body = client.get_object(Bucket="bench", Key=key)["Body"]
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        for block in iter(lambda: body.read(1 << 20), b""):
            out.write(block)
            digest.update(block)
        out.flush()
        os.fsync(out.fileno())


if __name__ == "__main__":
    main()
