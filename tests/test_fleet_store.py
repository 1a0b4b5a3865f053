"""Sessions kept in a shared S3 store (TOOLSWAP_STORE): several hosts, one session.

A "host" is a directory of its own (its TOOLSWAP_HOME, or its session replica), and where
it matters a process of its own. The store is moto's S3 server in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock
from s3_server import S3Server
from tcp_cut import CuttableLink, SilentServer
from toolswap import (
    ArtifactCollectedError,
    ArtifactIntegrityError,
    ArtifactWriteError,
    ChainLogError,
    ConfigurationError,
    Session,
    ToolResultExternalizer,
)
from toolswap.verify import FindingKind, verify_session

pytest.importorskip("boto3")

TIMEOUT = 120
WS = "fleet"


@dataclass
class Fleet:
    tmp: Path
    bucket: str
    server: S3Server

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/team"

    def session_dir(self, host: str, session: str = "s1") -> Path:
        return self.tmp / host / "home" / "projects" / WS / session

    def ext(self, host: str, session: str = "s1") -> ToolResultExternalizer:
        return ToolResultExternalizer(self.session_dir(host, session))

    def env(self, host: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSWAP_CRASH")}
        env.update(self.server.env())
        env.update(
            TOOLSWAP_HOME=str(self.tmp / host / "home"),
            TOOLSWAP_WORKSPACE=WS,
            TOOLSWAP_STORE=self.url,
        )
        return env

    def keys(self, kind: str) -> list[str]:
        reply = self.server.client().list_objects_v2(
            Bucket=self.bucket, Prefix=f"team/{WS}/s1/{kind}/"
        )
        return [item["Key"].rsplit("/", 1)[1] for item in reply.get("Contents", [])]

    def python(
        self, host: str, script: str, *args: str, crash: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = self.env(host)
        if crash:
            env["TOOLSWAP_CRASH_POINT"] = crash
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )

    def cli(
        self, host: str, *args: str, crash: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = self.env(host)
        if crash:
            env["TOOLSWAP_CRASH_POINT"] = crash
        return subprocess.run(
            [sys.executable, "-m", "toolswap", *args],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=TIMEOUT,
            check=False,
        )


@pytest.fixture
def fleet(
    tmp_path: Path, s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Fleet:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    fleet = Fleet(tmp_path, bucket, s3_server)
    monkeypatch.setenv("TOOLSWAP_STORE", fleet.url)
    return fleet


CAPTURES = """
import sys
from toolswap import ToolResultExternalizer
host, count = sys.argv[1], int(sys.argv[2])
ext = ToolResultExternalizer.open("s1")
for i in range(count):
    result = ext.externalize(f"{host} capture {i}\\n" * 20000, "bash")
    print(result.artifact.source_id, flush=True)
"""


def test_two_hosts_capturing_into_one_session_at_once_never_share_a_name(fleet: Fleet) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CAPTURES, host, "6"],
            env=fleet.env(host),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for host in ("a", "b")
    ]
    outputs = [proc.communicate(timeout=TIMEOUT) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs

    ids = [line for out, _ in outputs for line in out.split()]
    names = {sid.split(":")[2] for sid in ids}
    assert len(names) == 12
    assert sorted(fleet.keys("tool-results")) == sorted(names)
    assert len(fleet.keys("manifest")) == 12
    for host in ("a", "b", "c"):  # c never wrote: it reads everything from the store
        ext = fleet.ext(host)
        texts = {ext.read_artifact(sid, 0, 1) for sid in ids}
        assert texts == {f"{h} capture {i}" for h in "ab" for i in range(6)}
    replicas = [(fleet.session_dir(h) / "manifest.jsonl").read_bytes() for h in "abc"]
    assert replicas[0] == replicas[1] == replicas[2]


def test_a_host_serves_another_host_s_artifact_only_after_checking_its_digest(
    fleet: Fleet,
) -> None:
    result = fleet.ext("a").externalize("line\n" * 50000, "bash")
    sid = result.artifact.source_id
    assert fleet.ext("b").read_artifact(sid, 49998, 1) == "line"

    key = f"team/{WS}/s1/tool-results/{result.artifact.path.name}"
    fleet.server.client().put_object(
        Bucket=fleet.bucket,
        Key=key,
        Body=b"LINE\n" * 50000,
        Metadata={"sha256": result.artifact.content_sha256},
    )
    with pytest.raises(ArtifactIntegrityError, match="not the recorded output"):
        fleet.ext("c").read_artifact(sid, 0, 1)
    assert os.listdir(fleet.session_dir("c") / "tool-results") == []
    assert fleet.ext("b").read_artifact(sid, 0, 1) == "line"  # b's verified copy


def test_a_session_never_moves_between_stores(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLSWAP_STORE")
    local = fleet.session_dir("a", "local")
    ToolResultExternalizer(local).externalize("x\n" * 50000, "bash")
    bound = fleet.ext("a")  # bound below, once TOOLSWAP_STORE is set

    monkeypatch.setenv("TOOLSWAP_STORE", fleet.url)
    with pytest.raises(ConfigurationError, match="started without a store"):
        Session.at(local)
    bound = fleet.ext("a")
    bound.externalize("y\n" * 50000, "bash")
    monkeypatch.setenv("TOOLSWAP_STORE", f"s3://{fleet.bucket}/elsewhere")
    with pytest.raises(ConfigurationError, match="never moves between stores"):
        Session.at(fleet.session_dir("a"))

    monkeypatch.delenv("TOOLSWAP_STORE")
    later = fleet.ext("a").externalize("z\n" * 50000, "bash")
    assert later.artifact.path.name in fleet.keys("tool-results")


def test_a_store_that_cannot_be_reached_loses_no_output(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = S3Server().start()
    down.client().create_bucket(Bucket="gone")
    monkeypatch.setenv("AWS_ENDPOINT_URL", down.endpoint)
    monkeypatch.setenv("TOOLSWAP_STORE", "s3://gone/x")
    ext = fleet.ext("a")
    down.stop()

    with pytest.raises(ArtifactWriteError) as caught:
        ext.externalize("first\n" + "middle\n" * 40000 + "last\n", "bash", exit_code=2)

    assert "cannot be read now" in str(caught.value)
    assert "first" in caught.value.preview and "last" in caught.value.preview
    assert caught.value.exit_code == 2


def test_run_on_another_host_reads_greps_lists_and_verifies_the_same_session(
    fleet: Fleet,
) -> None:
    done = fleet.cli("a", "run", "--session", "s1", "--", "seq", "1", "200000")
    assert done.returncode == 0, done.stderr
    sid = done.stdout.split("toolswap read ")[1].split()[0]

    listed = fleet.cli("b", "ls", "--session", "s1", "--json")
    assert [a["source_id"] for a in json.loads(listed.stdout)] == [sid]
    read = fleet.cli("b", "read", sid, "--offset", "199998", "--limit", "5")
    assert read.stdout.split() == ["199999", "200000"]
    grep = fleet.cli("b", "grep", sid, "^12345$")
    assert grep.stdout.split() == ["12345:12345"]
    verified = fleet.cli("c", "verify", "--session", "s1", "--json")
    assert verified.returncode == 0, verified.stdout
    assert [f["kind"] for f in json.loads(verified.stdout)] == ["ok"]
    listed = fleet.cli("c", "sessions", "--json")
    assert [(s["session"], s["store"], s["artifacts"]) for s in json.loads(listed.stdout)] == [
        ("s1", fleet.url, 1)
    ]


# -- SIGKILL at every durable step of a capture into the store ------------------------

CAPTURE_POINTS = [
    "store.bound",  # the session's first capture binds it
    "capture.tmp_created",
    "capture.tmp_fsynced",
    "store.object_put",
    "capture.linked",
    "capture.tmp_unlinked",
    "capture.dir_fsynced",
    "store.record_put",
    "store.replica.appended",
    "store.replica.fsynced",
    "manifest.head_written",
]
ONE_CAPTURE = """
import sys
from toolswap import ToolResultExternalizer
result = ToolResultExternalizer.open("s1").externalize(sys.argv[1] * 30000, "bash")
print(result.artifact.source_id)
"""


@pytest.mark.parametrize("point", CAPTURE_POINTS)
def test_a_host_killed_mid_capture_leaves_a_session_every_host_can_go_on_with(
    fleet: Fleet, point: str
) -> None:
    killed = fleet.python("a", ONE_CAPTURE, "killed\n", crash=point)
    assert killed.returncode == -9, killed.stderr
    stored = set(fleet.keys("tool-results"))
    recorded = point.startswith(("store.record_put", "store.replica", "manifest."))

    ids = []
    for host in ("b", "a"):  # another host, then the killed one again
        done = fleet.python(host, ONE_CAPTURE, f"after on {host}\n")
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    new_names = {sid.split(":")[2] for sid in ids}
    assert len(new_names) == 2 and not new_names & stored

    ext = fleet.ext("c")
    names = [a.path.name for a in ext.list_artifacts()]
    assert len(names) == 2 + recorded
    for host in ("a", "b", "c"):
        texts = {fleet.ext(host).read_artifact(a, 0, 1) for a in ext.list_artifacts()}
        assert texts == {"after on a", "after on b"} | ({"killed"} if recorded else set())
    findings = verify_session(Session.at(fleet.session_dir("c")))
    problems = {(f.kind, f.name) for f in findings if f.kind.is_problem}
    orphans = stored - set(names)
    assert problems == {(FindingKind.UNRECORDED, name) for name in orphans}
    assert len(orphans) == (not recorded and point not in CAPTURE_POINTS[:3])


# -- cleanup in the store, with the leases in PostgreSQL ------------------------------

PUBLISH = """
import sys
from toolswap import ArtifactRetentionClaim, ArtifactRetentionJournal, ToolResultExternalizer
from toolswap.retention.owners.postgres import PostgresMemoryOwner
from toolswap.retention.postgres_journal import PostgresJournalStore
dsn, schema, source_id = sys.argv[1:4]
ext = ToolResultExternalizer.open("s1")
owner = PostgresMemoryOwner(dsn, schema=schema)
journal = ArtifactRetentionJournal(
    ext.session, owner=owner, store=PostgresJournalStore(dsn, ext.session, schema=schema)
)
ref = ext.get_artifact(source_id).for_memory()
claim = ArtifactRetentionClaim.from_memory_reference(ref)
journal.publish_reference(claim, lambda: owner.publish("tx1", ref), transaction_id="tx1")
print("published")
"""


@pytest.fixture
def database(postgres_server: Any, postgres_schema: str) -> list[str]:
    pytest.importorskip("psycopg")
    return ["--database-url", postgres_server.dsn, "--database-schema", postgres_schema]


def _capture(fleet: Fleet, host: str, text: str) -> str:
    done = fleet.python(host, ONE_CAPTURE, text)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_one_host_s_gc_never_deletes_what_another_host_references(
    fleet: Fleet, database: list[str]
) -> None:
    kept = _capture(fleet, "a", "referenced\n")
    dropped = _capture(fleet, "a", "unreferenced\n")
    done = fleet.python("a", PUBLISH, database[1], database[3], kept)
    assert done.returncode == 0, done.stderr

    refused = fleet.cli("b", "gc", "plan", "--session", "s1", "--ttl", "0s")
    assert refused.returncode == 1
    assert "every host sees" in refused.stderr

    applied = fleet.cli(
        "b", "gc", "apply", "--session", "s1", "--ttl", "0s", "--yes", "--json", *database
    )
    assert applied.returncode == 0, applied.stderr
    report = json.loads(applied.stdout)["reports"][0]["report"]
    statuses = {e["source_id"]: e["status"] for e in report["entries"]}
    assert statuses == {kept: "retained_referenced", dropped: "deleted"}
    assert fleet.keys("tool-results") == [kept.split(":")[2]]
    assert fleet.ext("a").read_artifact(kept, 0, 1) == "referenced"
    with pytest.raises(ArtifactCollectedError):
        fleet.ext("c").read_artifact(dropped, 0, 1)

    # Host a still holds its verified copy of the collected artifact: a read there is
    # served from the replica without asking the store (a reference to it is refused, see
    # test_a_reference_is_never_published_for_what_another_host_collected), until its
    # own gc drops the copy.
    copy = fleet.session_dir("a") / "tool-results" / dropped.split(":")[2]
    assert fleet.ext("a").read_artifact(dropped, 0, 1) == "unreferenced"
    again = fleet.cli(
        "a", "gc", "apply", "--session", "s1", "--ttl", "0s", "--yes", "--json", *database
    )
    assert again.returncode == 0, again.stderr
    entries = json.loads(again.stdout)["reports"][0]["report"]["entries"]
    assert {(e["name"], e["status"]) for e in entries} == {
        (kept.split(":")[2], "retained_referenced"),
        (copy.name, "deleted"),
    }
    assert not copy.exists()
    with pytest.raises(ArtifactCollectedError):
        fleet.ext("a").read_artifact(dropped, 0, 1)


def test_gc_keeps_an_object_replaced_after_it_was_planned(
    fleet: Fleet, database: list[str]
) -> None:
    sid = _capture(fleet, "a", "original\n")
    planned = fleet.cli(
        "b",
        "gc",
        "plan",
        "--session",
        "s1",
        "--ttl",
        "0s",
        "--save",
        str(fleet.tmp / "plan.json"),
        *database,
    )
    assert planned.returncode == 0, planned.stderr
    key = f"team/{WS}/s1/tool-results/{sid.split(':')[2]}"
    fleet.server.client().put_object(Bucket=fleet.bucket, Key=key, Body=b"replaced\n")

    applied = fleet.cli(
        "b",
        "gc",
        "apply",
        "--session",
        "s1",
        "--ttl",
        "0s",
        "--plan",
        str(fleet.tmp / "plan.json"),
        "--yes",
        "--json",
        *database,
    )

    assert applied.returncode == 0, applied.stderr
    (entry,) = json.loads(applied.stdout)["reports"][0]["report"]["entries"]
    assert entry["status"] == "race_detected"
    assert fleet.keys("tool-results") == [sid.split(":")[2]]


def test_gc_plan_says_what_apply_does_with_an_object_stored_with_another_digest(
    fleet: Fleet, database: list[str]
) -> None:
    tampered = _capture(fleet, "a", "tampered\n")
    dropped = _capture(fleet, "a", "unreferenced\n")
    client = fleet.server.client()
    key = f"team/{WS}/s1/tool-results/{tampered.split(':')[2]}"
    body = client.get_object(Bucket=fleet.bucket, Key=key)["Body"].read()
    client.put_object(Bucket=fleet.bucket, Key=key, Body=body, Metadata={"sha256": "0" * 64})

    gc = ("gc", "--session", "s1", "--ttl", "0s", "--json")
    planned = fleet.cli("b", "gc", "plan", *gc[1:], *database)
    applied = fleet.cli("b", "gc", "apply", *gc[1:], "--yes", *database)

    assert planned.returncode == 0, planned.stderr
    assert applied.returncode == 0, applied.stderr
    plan = json.loads(planned.stdout)["plans"][0]["plan"]["entries"]
    report = json.loads(applied.stdout)["reports"][0]["report"]["entries"]
    expected = {tampered: "retained_corrupt", dropped: "planned_delete"}
    assert {e["source_id"]: e["status"] for e in plan} == expected
    assert {e["source_id"]: e["status"] for e in report} == dict(expected, **{dropped: "deleted"})
    assert fleet.keys("tool-results") == [tampered.split(":")[2]]


GUARDED_CAPTURE = """
import sys
from toolswap import ArtifactWriteError, ToolResultExternalizer
try:
    ToolResultExternalizer.open("s1").externalize("first\\n" + "cut\\n" * 40000, "bash")
except ArtifactWriteError as exc:
    print(exc.preview.splitlines()[0])
    print(str(exc), file=sys.stderr)
    sys.exit(3)
"""


def test_a_network_cut_mid_publish_loses_no_output_and_gc_settles_the_orphan(
    fleet: Fleet, database: list[str], tmp_path: Path
) -> None:
    link = CuttableLink(fleet.server.port)
    sync = tmp_path / "sync"
    sync.mkdir()
    point = "store.object_put"
    os.mkfifo(sync / f"{point}.reached")
    os.mkfifo(sync / f"{point}.go")
    env = fleet.env("a")
    env.update(
        AWS_ENDPOINT_URL=link.endpoint,
        AWS_MAX_ATTEMPTS="2",
        TOOLSWAP_SYNC_DIR=str(sync),
        TOOLSWAP_SYNC_POINT=point,
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", GUARDED_CAPTURE],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with open(sync / f"{point}.reached", encoding="utf-8") as reached:
            assert reached.read().strip() == point  # the object is in the store
        link.cut()
        with open(sync / f"{point}.go", "w", encoding="utf-8") as go:
            go.write("go\n")
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        link.close()
    assert proc.returncode == 3, err
    assert out.startswith("[Output NOT saved")
    assert "cannot be read now" in err
    (orphan,) = fleet.keys("tool-results")
    assert fleet.keys("manifest") == []

    after = _capture(fleet, "b", "after the cut\n")
    assert after.split(":")[2] != orphan
    findings = verify_session(Session.at(fleet.session_dir("b")))
    assert {(f.kind, f.name) for f in findings if f.kind.is_problem} == {
        (FindingKind.UNRECORDED, orphan)
    }
    published = fleet.python("b", PUBLISH, database[1], database[3], after)
    assert published.returncode == 0, published.stderr
    applied = fleet.cli(
        "a", "gc", "apply", "--session", "s1", "--ttl", "0s", "--yes", "--json", *database
    )
    assert applied.returncode == 0, applied.stderr
    entries = json.loads(applied.stdout)["reports"][0]["report"]["entries"]
    assert sorted((e["name"], e["status"]) for e in entries) == [
        (orphan, "deleted"),  # from the store, with this host's unrecorded copy
        (after.split(":")[2], "retained_referenced"),
    ]
    assert fleet.keys("tool-results") == [after.split(":")[2]]
    assert os.listdir(fleet.session_dir("a") / "tool-results") == []


GC_POINTS = [
    "cleanup.locked",
    "cleanup.claims_folded",
    "cleanup.verified",
    "cleanup.collect_recorded",
    "store.deleted",
    "cleanup.unlinked",
]


@pytest.mark.parametrize("point", GC_POINTS)
def test_a_gc_killed_at_any_step_leaves_what_is_referenced_and_the_next_gc_finishes(
    fleet: Fleet, database: list[str], point: str
) -> None:
    kept = _capture(fleet, "a", "referenced\n")
    dropped = _capture(fleet, "a", "unreferenced\n")
    assert fleet.python("a", PUBLISH, database[1], database[3], kept).returncode == 0
    gc = ["gc", "apply", "--session", "s1", "--ttl", "0s", "--yes", "--json", *database]

    killed = fleet.cli("b", *gc, crash=point)
    assert killed.returncode == -9, killed.stderr
    assert kept.split(":")[2] in fleet.keys("tool-results")

    done = fleet.cli("b", *gc)
    assert done.returncode == 0, done.stderr
    assert fleet.keys("tool-results") == [kept.split(":")[2]]
    assert fleet.ext("c").read_artifact(kept, 0, 1) == "referenced"
    with pytest.raises(ArtifactCollectedError):
        fleet.ext("c").read_artifact(dropped, 0, 1)
    findings = verify_session(Session.at(fleet.session_dir("c")))
    assert [f.kind for f in findings if f.kind.is_problem] == []


def test_a_reader_killed_after_fetching_leaves_nothing_a_later_read_or_gc_trips_on(
    fleet: Fleet, database: list[str]
) -> None:
    sid = _capture(fleet, "a", "fetched\n")
    read = "from toolswap import ToolResultExternalizer as T; import sys\n"
    read += "print(T.open('s1').read_artifact(sys.argv[1], 0, 1))"
    killed = fleet.python("b", read, sid, crash="store.fetched")
    assert killed.returncode == -9, killed.stderr
    (leftover,) = os.listdir(fleet.session_dir("b") / "tool-results")
    assert leftover.startswith(".tmp-")

    again = fleet.python("b", read, sid)
    assert again.stdout.strip() == "fetched"
    assert fleet.python("a", PUBLISH, database[1], database[3], sid).returncode == 0
    done = fleet.cli(
        "b", "gc", "apply", "--session", "s1", "--ttl", "0s", "--yes", "--json", *database
    )
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)["reports"][0]["report"]["entries"]
    assert {(e["name"], e["status"]) for e in entries} == {
        (sid.split(":")[2], "retained_referenced"),
        (leftover, "deleted"),
    }


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("rewrite", "does not match its hash"),
        ("delete", "sequence must be contiguous"),
        ("foreign", "breaks the hash chain"),
    ],
)
def test_a_damaged_manifest_in_the_store_is_refused_by_every_host(
    fleet: Fleet, damage: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [
        fleet.ext("a").externalize(f"{i}\n" * 30000, "bash").artifact.source_id for i in range(3)
    ]
    client, prefix = fleet.server.client(), f"team/{WS}/s1/manifest/"
    second = client.get_object(Bucket=fleet.bucket, Key=prefix + "000000000002.jsonl")
    line = second["Body"].read()
    if damage == "rewrite":
        client.put_object(
            Bucket=fleet.bucket,
            Key=prefix + "000000000002.jsonl",
            Body=line.replace(b"30000", b"30001"),
        )
    elif damage == "delete":
        client.delete_object(Bucket=fleet.bucket, Key=prefix + "000000000002.jsonl")
    else:  # a whole record of the same session's name in another store: another chain
        monkeypatch.setenv("TOOLSWAP_STORE", f"s3://{fleet.bucket}/other")
        other = fleet.ext("x")
        for i in range(2):
            other.externalize(f"other {i}\n" * 30000, "bash")
        monkeypatch.setenv("TOOLSWAP_STORE", fleet.url)
        fake = client.get_object(
            Bucket=fleet.bucket, Key=f"other/{WS}/s1/manifest/000000000002.jsonl"
        )
        client.put_object(
            Bucket=fleet.bucket, Key=prefix + "000000000002.jsonl", Body=fake["Body"].read()
        )

    with pytest.raises(ChainLogError, match=message):
        fleet.ext("b").read_artifact(ids[2], 0, 1)
    with pytest.raises(ArtifactWriteError) as caught:
        fleet.ext("b").externalize("after\n" * 30000, "bash")
    assert "after" in caught.value.preview
    findings = verify_session(Session.at(fleet.session_dir("c")))
    assert [f.kind for f in findings] == [FindingKind.MANIFEST_CORRUPT]


def test_the_store_flag_binds_a_new_session_like_the_setting(fleet: Fleet) -> None:
    env = fleet.env("a")
    del env["TOOLSWAP_STORE"]
    run = ["run", "--session", "s1", "--", "seq", "1", "100000"]
    done = subprocess.run(
        [sys.executable, "-m", "toolswap", "--store", fleet.url, *run],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert fleet.keys("tool-results") == ["tool_result_001.txt"]
    binding = json.loads((fleet.session_dir("a") / "store.json").read_text(encoding="utf-8"))
    assert binding == {"session": "s1", "store": fleet.url, "workspace": WS}

    wrong = subprocess.run(
        [sys.executable, "-m", "toolswap", "--store", "/tmp/x", "ls", "--session", "s1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert wrong.returncode == 2 and "s3://bucket/prefix" in wrong.stderr


# -- races between hosts, forced with the crash-point FIFOs ---------------------------


class Stopped:
    """A process stopped at a named durable step until :meth:`go`."""

    def __init__(self, argv: list[str], env: dict[str, str], point: str, sync: Path) -> None:
        sync.mkdir()
        os.mkfifo(sync / f"{point}.reached")
        os.mkfifo(sync / f"{point}.go")
        self.sync, self.point = sync, point
        env = dict(env, TOOLSWAP_SYNC_DIR=str(sync), TOOLSWAP_SYNC_POINT=point)
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        with open(sync / f"{point}.reached", encoding="utf-8") as reached:
            assert reached.read().strip() == point

    def go(self) -> tuple[int, str, str]:
        with open(self.sync / f"{self.point}.go", "w", encoding="utf-8") as go:
            go.write("go\n")
        out, err = self.proc.communicate(timeout=TIMEOUT)
        return self.proc.returncode, out, err


def test_gc_on_another_host_collecting_an_upload_before_its_record_makes_the_capture_fail_loudly(
    fleet: Fleet, database: list[str], tmp_path: Path
) -> None:
    capture = Stopped(
        [sys.executable, "-c", GUARDED_CAPTURE], fleet.env("a"), "store.object_put", tmp_path / "a"
    )
    (uploaded,) = fleet.keys("tool-results")
    gc = fleet.cli(
        "b", "gc", "apply", "--session", "s1", "--ttl", "0s", "--yes", "--json", *database
    )
    assert gc.returncode == 0, gc.stderr
    assert fleet.keys("tool-results") == []  # collected as an unrecorded object

    code, out, err = capture.go()

    assert code == 3, err
    assert out.startswith("[Output NOT saved") and "collected the stored copy" in err
    ext = fleet.ext("c")
    assert ext.list_artifacts() == []  # never recorded as live over its collection
    findings = verify_session(ext.session)
    assert [f.kind for f in findings if f.kind.is_problem] == []
    assert fleet.keys("tool-results") == [] and uploaded


def test_a_capture_recorded_while_gc_checks_its_object_is_kept(
    fleet: Fleet, database: list[str], tmp_path: Path
) -> None:
    capture = Stopped(
        [sys.executable, "-c", ONE_CAPTURE, "racing\n"],
        fleet.env("a"),
        "store.object_put",
        tmp_path / "a",
    )
    gc_argv = [sys.executable, "-m", "toolswap", "gc", "apply", "--session", "s1"]
    gc_argv += ["--ttl", "0s", "--yes", "--json", *database]
    gc = Stopped(gc_argv, fleet.env("b"), "cleanup.verified", tmp_path / "b")

    code, out, err = capture.go()  # recorded while gc holds its checked HEAD
    assert code == 0, err
    sid = out.strip()
    code, out, err = gc.go()

    assert code == 0, err
    (entry,) = json.loads(out)["reports"][0]["report"]["entries"]
    assert entry["status"] == "race_detected"
    assert "changed after it was checked" in entry["reason"]
    assert fleet.ext("c").read_artifact(sid, 0, 1) == "racing"


def test_a_read_waiting_for_a_capture_in_the_same_process_does_not_deadlock(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ext = fleet.ext("a")
    ext.externalize("first\n" * 30000, "bash")
    sync = tmp_path / "sync"
    sync.mkdir()
    for end in ("reached", "go"):
        os.mkfifo(sync / f"store.object_put.{end}")
    monkeypatch.setenv("TOOLSWAP_SYNC_DIR", str(sync))
    monkeypatch.setenv("TOOLSWAP_SYNC_POINT", "store.object_put")
    capture = threading.Thread(target=ext.externalize, args=("second\n" * 30000, "bash"))
    capture.start()
    with open(sync / "store.object_put.reached", encoding="utf-8") as reached:
        reached.read()  # the capture holds the session lock, its upload done
    fleet.ext("b").externalize("other host\n" * 30000, "bash")
    reader = threading.Thread(target=ext.manifest.sync, name="reader")
    reader.start()
    _wait_until_blocked_in(reader, "session_lock")
    with open(sync / "store.object_put.go", "w", encoding="utf-8") as go:
        go.write("go\n")
    capture.join(TIMEOUT)
    reader.join(TIMEOUT)
    assert not capture.is_alive() and not reader.is_alive()
    assert len(ext.list_artifacts()) == 3


def _wait_until_blocked_in(thread: threading.Thread, function: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or 0)
        while frame is not None:
            if frame.f_code.co_name == function:
                return
            frame = frame.f_back
        time.sleep(0.01)
    raise AssertionError(f"{thread.name} never reached {function}")


def test_a_lost_reply_to_a_manifest_record_does_not_record_the_artifact_twice(
    fleet: Fleet,
) -> None:
    link = CuttableLink(fleet.server.port)
    env = dict(fleet.env("a"), AWS_ENDPOINT_URL=link.endpoint)
    try:
        link.lose_reply_to(b"/manifest/000000000001.jsonl")
        done = subprocess.run(
            [sys.executable, "-c", ONE_CAPTURE, "once\n"],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    finally:
        link.close()
    assert done.returncode == 0, done.stderr
    assert link.replies_lost == 1
    assert fleet.keys("manifest") == ["000000000001.jsonl"]
    assert [a.source.source_id for a in fleet.ext("b").list_artifacts()] == [done.stdout.strip()]


def test_two_spellings_of_one_store_are_one_store(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = fleet.ext("a").externalize("spelled\n" * 30000, "bash").artifact.source_id
    monkeypatch.setenv("TOOLSWAP_STORE", fleet.url + "/")
    other = fleet.ext("b")
    assert other.read_artifact(sid, 0, 1) == "spelled"
    assert other.session.key == fleet.ext("a").session.key == f"{fleet.url}/{WS}/s1"


def test_verify_checks_the_store_s_copy_even_where_this_host_has_one(fleet: Fleet) -> None:
    ext = fleet.ext("a")
    results = [ext.externalize(f"{i}\n" * 30000, "bash").artifact for i in range(2)]
    client = fleet.server.client()
    shrunk, relabelled = (f"team/{WS}/s1/tool-results/{r.path.name}" for r in results)
    client.put_object(
        Bucket=fleet.bucket,
        Key=shrunk,
        Body=b"9 bytes\n\n",
        Metadata={"sha256": results[0].content_sha256},
    )
    body = client.get_object(Bucket=fleet.bucket, Key=relabelled)["Body"].read()
    client.put_object(Bucket=fleet.bucket, Key=relabelled, Body=body, Metadata={"sha256": "0" * 64})

    findings = verify_session(ext.session)

    assert {(f.kind, f.name) for f in findings if f.kind.is_problem} == {
        (FindingKind.SIZE_MISMATCH, results[0].path.name),
        (FindingKind.DIGEST_MISMATCH, results[1].path.name),
    }


def test_verify_where_this_host_has_a_copy_finds_an_object_overwritten_with_same_size_bytes(
    fleet: Fleet,
) -> None:
    writer, reader = fleet.ext("a"), fleet.ext("b")
    artifact = writer.externalize("original\n" * 30000, "bash").artifact
    assert reader.read_artifact(artifact.source_id, 0, 1) == "original"  # b has a copy too
    fleet.server.client().put_object(
        Bucket=fleet.bucket,
        Key=f"team/{WS}/s1/tool-results/{artifact.path.name}",
        Body=b"ORIGINAL\n" * 30000,  # same size, other bytes, the old metadata kept
        Metadata={"sha256": artifact.content_sha256},
    )

    for host in (writer, reader):
        findings = verify_session(host.session)
        assert [(f.kind, f.name) for f in findings if f.kind.is_problem] == [
            (FindingKind.DIGEST_MISMATCH, artifact.path.name)
        ]
    assert reader.read_artifact(artifact.source_id, 0, 1) == "original"  # its copy is whole


def test_verify_where_this_host_has_a_copy_fetches_nothing_while_the_store_holds_that_version(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolswap.backends.s3store import S3ArtifactStore

    writer, reader = fleet.ext("a"), fleet.ext("b")
    ids = [writer.externalize(f"{i}\n" * 30000, "bash").artifact.source_id for i in range(2)]
    assert reader.read_artifact(ids[0], 0, 1) == "0"
    fetched: list[str] = []
    fetch = S3ArtifactStore.fetch_artifact

    def counted(self: S3ArtifactStore, *args: Any) -> Any:
        fetched.append(args[2])
        return fetch(self, *args)

    monkeypatch.setattr(S3ArtifactStore, "fetch_artifact", counted)

    assert {f.kind for f in verify_session(writer.session)} == {FindingKind.OK}
    assert fetched == []
    # b fetches (and so verifies) only what it has no copy of
    assert {f.kind for f in verify_session(reader.session)} == {FindingKind.OK}
    assert fetched == [ids[1].split(":")[2]]
    fetched.clear()
    assert {f.kind for f in verify_session(reader.session)} == {FindingKind.OK}
    assert fetched == []
    # A replica that lost its notes (or predates them) checks the store's bytes once more.
    shutil.rmtree(fleet.session_dir("a") / "store-versions")
    assert {f.kind for f in verify_session(writer.session)} == {FindingKind.OK}
    assert sorted(fetched) == sorted(sid.split(":")[2] for sid in ids)
    fetched.clear()
    assert {f.kind for f in verify_session(writer.session)} == {FindingKind.OK}
    assert fetched == []


def test_verify_where_this_host_has_no_copy_reports_each_bad_object_once(fleet: Fleet) -> None:
    writer = fleet.ext("a")
    results = [writer.externalize(f"{i}\n" * 30000, "bash").artifact for i in range(3)]
    client = fleet.server.client()
    shrunk, grown, _ = (f"team/{WS}/s1/tool-results/{r.path.name}" for r in results)
    for key, body, result in (
        (shrunk, b"9 bytes\n\n", results[0]),
        (grown, b"x" * 70000, results[1]),
    ):
        client.put_object(
            Bucket=fleet.bucket, Key=key, Body=body, Metadata={"sha256": result.content_sha256}
        )

    findings = verify_session(fleet.ext("b").session)

    assert sorted((f.name, f.kind) for f in findings) == [
        (results[0].path.name, FindingKind.SIZE_MISMATCH),
        (results[1].path.name, FindingKind.SIZE_MISMATCH),
        (results[2].path.name, FindingKind.OK),
    ]


CLI_IN_PROCESS = """
import runpy, sys
sys.argv = ["toolswap", *sys.argv[1:]]
try:
    runpy.run_module("toolswap", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
print("boto3 imported" if "boto3" in sys.modules else "boto3 not imported")
"""


def test_a_read_the_replica_can_serve_never_opens_the_store(fleet: Fleet) -> None:
    first = _capture(fleet, "a", "first\n")

    def read(host: str, sid: str) -> list[str]:
        done = fleet.python(host, CLI_IN_PROCESS, "read", sid, "--offset", "2", "--limit", "1")
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert read("a", first) == ["first", "boto3 not imported"]  # this host wrote it
    assert read("b", first) == ["first", "boto3 imported"]  # fetched (and verified) here
    assert read("b", first) == ["first", "boto3 not imported"]  # now in b's replica
    second = _capture(fleet, "a", "second\n")
    assert read("b", second) == ["second", "boto3 imported"]  # a record b never saw


def test_a_fetch_stops_at_the_recorded_size(fleet: Fleet) -> None:
    result = fleet.ext("a").externalize("small\n" * 30000, "bash").artifact
    key = f"team/{WS}/s1/tool-results/{result.path.name}"
    fleet.server.client().put_object(Bucket=fleet.bucket, Key=key, Body=b"x" * (4 << 20))

    with pytest.raises(ArtifactIntegrityError, match="longer than the recorded"):
        fleet.ext("b").read_artifact(result.source.source_id, 0, 1)
    assert os.listdir(fleet.session_dir("b") / "tool-results") == []


def test_a_session_with_any_local_evidence_is_never_bound_to_a_store(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLSWAP_STORE")
    local = fleet.session_dir("a", "old")
    ToolResultExternalizer(local).externalize("x\n" * 50000, "bash")
    (local / "manifest.jsonl").unlink()  # lost, but its head file and artifact remain

    monkeypatch.setenv("TOOLSWAP_STORE", fleet.url)
    with pytest.raises(ConfigurationError, match="started without a store"):
        Session.at(local, create=False)
    assert not (local / "store.json").exists()


def test_verify_says_the_store_is_unreachable_and_checks_the_replica(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    ext = fleet.ext("a")
    ext.externalize("kept here\n" * 30000, "bash")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setattr("toolswap.backends.store._STORES", {})
    session = Session.at(fleet.session_dir("a"), create=False)

    findings = verify_session(session)

    assert [f.kind for f in findings] == [FindingKind.STORE_UNREACHABLE, FindingKind.OK]
    assert (
        ToolResultExternalizer(session).read_artifact(ext.list_artifacts()[0], 0, 1) == "kept here"
    )


@pytest.fixture
def small_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("toolswap.manifest.SNAPSHOT_EVERY", 10)
    monkeypatch.setattr("toolswap.backends.s3store._SNAPSHOT_WORTH", 5)


def _many(fleet: Fleet, count: int) -> list[str]:
    ext = fleet.ext("a")
    return [ext.externalize(f"{i}\n" * 30000, "bash").artifact.source_id for i in range(count)]


def test_a_new_host_starts_from_the_newest_snapshot_of_the_manifest(
    fleet: Fleet, small_snapshots: None
) -> None:
    ids = _many(fleet, 25)
    client, prefix = fleet.server.client(), f"team/{WS}/s1/"
    snapshots = client.list_objects_v2(Bucket=fleet.bucket, Prefix=prefix + "manifest-snapshots/")
    assert [o["Key"].rsplit("/", 1)[1] for o in snapshots["Contents"]] == ["000000000020.jsonl"]
    for seq in range(1, 21):  # the records the snapshot holds are not read one by one
        client.delete_object(Bucket=fleet.bucket, Key=f"{prefix}manifest/{seq:012d}.jsonl")

    ext = fleet.ext("b")
    assert [a.source.source_id for a in ext.list_artifacts()] == ids
    assert ext.read_artifact(ids[3], 0, 1) == "3"
    assert (fleet.session_dir("b") / "manifest.jsonl").read_bytes() == (
        fleet.session_dir("a") / "manifest.jsonl"
    ).read_bytes()


def test_a_damaged_snapshot_is_passed_over_for_the_records_themselves(
    fleet: Fleet, small_snapshots: None
) -> None:
    ids = _many(fleet, 12)
    client, key = fleet.server.client(), f"team/{WS}/s1/manifest-snapshots/000000000010.jsonl"
    data = client.get_object(Bucket=fleet.bucket, Key=key)["Body"].read()
    client.put_object(Bucket=fleet.bucket, Key=key, Body=data.replace(b'"bash"', b'"BASH"', 1))

    assert [a.source.source_id for a in fleet.ext("b").list_artifacts()] == ids


def test_run_refuses_before_the_command_while_the_store_cannot_be_read(
    fleet: Fleet, tmp_path: Path
) -> None:
    assert fleet.cli("a", "run", "--session", "s1", "--", "true").returncode == 0
    env = dict(fleet.env("a"), AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_MAX_ATTEMPTS="1")
    marker = tmp_path / "ran"
    command = ["sh", "-c", f"echo ran > {marker}; seq 1 100000"]
    done = subprocess.run(
        [sys.executable, "-m", "toolswap", "run", "--session", "s1", "--", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 1 and "cannot be read now" in done.stderr
    assert not marker.exists()


def test_run_refuses_within_seconds_when_the_store_accepts_and_never_answers(
    fleet: Fleet, tmp_path: Path
) -> None:
    assert fleet.cli("a", "run", "--session", "s1", "--", "true").returncode == 0
    hung = SilentServer()
    marker = tmp_path / "ran"
    command = ["sh", "-c", f"echo ran > {marker}; seq 1 100000"]
    try:
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "toolswap", "run", "--session", "s1", "--", *command],
            env=dict(fleet.env("a"), AWS_ENDPOINT_URL=hung.endpoint),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        elapsed = time.monotonic() - start
    finally:
        hung.close()

    assert done.returncode == 1 and "cannot be read now" in done.stderr, done.stderr
    assert hung.accepted >= 1  # it did wait on the store, not on a refused connection
    assert elapsed < 20, f"refused after {elapsed:.1f} s"  # a hang guard, not a benchmark
    assert not marker.exists()


def test_a_reference_is_never_published_for_what_another_host_collected(
    fleet: Fleet, database: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolswap import ArtifactRetentionClaim, ArtifactRetentionError, ArtifactRetentionJournal
    from toolswap.retention.owners.postgres import PostgresMemoryOwner
    from toolswap.retention.postgres_journal import PostgresJournalStore

    monkeypatch.setattr(
        "toolswap.backends.replica.ReplicaBackend.pull_interval", 3600.0
    )  # a replica that lags
    dsn, schema = database[1], database[3]
    ext = fleet.ext("a")
    dropped = ext.externalize("dropped\n" * 30000, "bash").artifact.source_id
    ref = ext.get_artifact(dropped).for_memory()
    owner = PostgresMemoryOwner(dsn, schema=schema)
    store = PostgresJournalStore(dsn, ext.session, schema=schema)
    journal = ArtifactRetentionJournal(ext.session, owner=owner, store=store)
    journal.recover()
    gc = fleet.cli("b", "gc", "apply", "--session", "s1", "--ttl", "0s", "--yes", *database)
    assert gc.returncode == 0, gc.stderr

    with pytest.raises(ArtifactRetentionError, match="missing artifact"):
        journal.publish_reference(
            ArtifactRetentionClaim.from_memory_reference(ref),
            lambda: owner.publish("tx", ref),
            transaction_id="tx",
        )
    assert owner.get("tx") is None


def test_the_readiness_check_of_a_session_in_a_store_always_asks_the_store(
    fleet: Fleet,
) -> None:
    later = Clock(datetime.now(UTC) + timedelta(minutes=1))  # the manifest has settled
    ToolResultExternalizer(fleet.session_dir("a"), now=later).externalize("a\n" * 40000, "bash")
    ToolResultExternalizer(fleet.session_dir("a"), now=later).check_ready()
    fleet.ext("b").externalize("b\n" * 40000, "bash")  # another host adds a record

    ToolResultExternalizer(fleet.session_dir("a"), now=later).check_ready()

    # Nothing was remembered in place of asking: the check pulled the other host's record.
    assert not (fleet.session_dir("a") / "manifest.checked").exists()
    assert len((fleet.session_dir("a") / "manifest.jsonl").read_bytes().splitlines()) == 2
