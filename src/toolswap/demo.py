"""``toolswap demo``: an offline, scripted agent session over real data on this machine.

1. The agent greps the installed Python standard library: megabytes of output.
2. toolswap spills it to an artifact; the context gets a pointer of at most 32 KiB.
3. The agent finds a needle from the middle with a page fault (grep inside the artifact).
4. Memory receives the thin reference: no body, no preview.
5. A fresh process (a restart) reads the artifact by its source ID alone.

6. Memory publishes the reference through the durable lease protocol; a publisher killed
   after the owner's write leaves a PREPARED lease that reconciliation settles.
7. Cleanup keeps what memory references and collects an expired orphan, and a read of
   the collected artifact says when and why.
8. The MCP path (when the ``mcp`` extra is installed): an MCP client calls a tool through
   ``toolswap mcp proxy``, gets a pointer, and pages the artifact with the read tool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from .externalizer import ToolResultExternalizer
from .pointer import human_size

__all__ = ["run_demo"]


def _say(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}")


def run_demo(home: Path | None = None) -> None:
    """Run the scripted session; artifacts go under ``home`` (default: a new temp dir)."""
    home = home or Path(tempfile.mkdtemp(prefix="toolswap-demo-"))
    os.environ["TOOLSWAP_HOME"] = str(home)
    ext = ToolResultExternalizer.open("demo-session", workspace="demo")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    argv = ["grep", "-rn", "--include=*.py", "raise ", str(stdlib)]

    _say("1. The agent runs a tool with a huge output")
    print("$ " + " ".join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    with proc.stdout:
        result = ext.process(proc.stdout, "bash", argv=argv, exit_code=proc.wait)
    proc.wait()
    if result.artifact is None:
        print("(the output was small enough to stay inline; nothing to demonstrate)")
        return
    art = result.artifact
    pointer_size = len(result.context_text.encode())
    print(
        f"output: {human_size(art.byte_size)}, {art.line_count:,} lines -> pointer of "
        f"{human_size(pointer_size)} in the context "
        f"({100 * (1 - pointer_size / max(art.byte_size, 1)):.1f}% of the context saved)"
    )

    _say("2. What the model sees (the pointer, abridged)")
    lines = result.context_text.splitlines()
    for line in lines[:7]:
        print("  " + line[:160])
    print("  ...")
    marker = next((i for i, ln in enumerate(lines) if ln.startswith("--- omitted")), None)
    if marker is not None:
        for line in lines[marker : marker + 6]:
            print("  " + line[:160])
        print("  ...")
    for line in lines[-3:]:
        print("  " + line[:160])

    _say("3. Page fault: grep inside the artifact for a needle from the middle")
    needle = "RecursionError"
    found = ext.grep(art.source_id, needle, max_matches=3)
    print(f"grep_artifact({needle!r}) -> {len(found.matches)} match(es)")
    for match in found.matches:
        print(f"  line {match.line_no}: {match.text[:150]}")
    if found.matches:
        first = found.matches[0].line_no
        page = ext.read_lines(art.source_id, offset=max(first - 2, 0), limit=3)
        print(f"read_artifact(offset={max(first - 2, 0)}, limit=3), verified against SHA-256:")
        for line in page.lines:
            print("  " + line[:150])

    _say("4. Memory keeps the thin reference (no body, no preview)")
    print(json.dumps(art.for_memory().to_dict(), indent=2))

    _say("5. Restart: a fresh process reads the artifact by its source ID alone")
    cmd = [sys.executable, "-m", "toolswap", "read", art.source_id, "--workspace", "demo"]
    cmd += ["--offset", "0", "--limit", "2"]
    print("$ toolswap read " + art.source_id + " --workspace demo --offset 0 --limit 2")
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=False)
    for line in done.stdout.splitlines():
        print("  " + line[:150])
    if done.returncode != 0:
        raise SystemExit(f"restart read failed: {done.stderr.strip()}")

    _retention_and_cleanup(ext, art.source_id)
    _mcp_step(home)
    print(f"\nDemo data kept under {home}")


_CRASHING_PUBLISHER = """
import sys
from toolswap import ArtifactRetentionClaim, ToolResultExternalizer
from toolswap.retention import open_retention
session_dir, source_id, tx = sys.argv[1], sys.argv[2], sys.argv[3]
ref = ToolResultExternalizer(session_dir).get_artifact(source_id).for_memory()
retention = open_retention(session_dir, create=True)
journal, owner = retention.journal, retention.owner
journal.publish_reference(
    ArtifactRetentionClaim.from_memory_reference(ref),
    lambda: owner.publish(tx, ref),
    transaction_id=tx,
)
"""


def _retention_and_cleanup(ext: ToolResultExternalizer, source_id: str) -> None:
    import uuid
    from datetime import UTC, datetime, timedelta

    from .cleanup import ArtifactCleanupPolicy
    from .errors import ArtifactCollectedError
    from .retention import ArtifactRetentionClaim, SqliteMemoryOwner, open_retention

    _say("6. Memory publishes the reference; the lease journal protects the artifact")
    # The session's own journal and owner, opened as the CLI and every library caller do.
    retention = open_retention(ext.session, create=True)
    journal, owner = retention.journal, retention.owner
    assert isinstance(owner, SqliteMemoryOwner)  # create=True makes the session's own
    ref = ext.get_artifact(source_id).for_memory()
    # A transaction ID is never published twice: one per run, so the demo runs again
    # in the same home.
    run = uuid.uuid4().hex[:8]
    journal.publish_reference(
        ArtifactRetentionClaim.from_memory_reference(ref),
        lambda: owner.publish(f"demo-tx-1-{run}", ref),
        transaction_id=f"demo-tx-1-{run}",
    )
    print("publish_reference(): PREPARED (fsync) -> owner.publish() -> COMMITTED (fsync)")

    second = ext.externalize(
        "\n".join(f"pytest line {i}: ok" for i in range(20_000)), "pytest"
    ).artifact
    env = dict(os.environ, TOOLSWAP_CRASH_POINT="owner.published")
    crashed = subprocess.run(
        [
            sys.executable,
            "-c",
            _CRASHING_PUBLISHER,
            str(ext.session_dir),
            second.source_id,
            f"demo-tx-2-{run}",
        ],
        env=env,
        capture_output=True,
        check=False,
    )
    print(
        f"a second publisher was killed (signal {-crashed.returncode}) right after the owner's "
        "write, before COMMITTED"
    )
    view = open_retention(ext.session).journal.recover()
    print(
        f"after the restart: pending leases {list(view.pending_transaction_ids)} still protect "
        f"{len(view.claims)} artifacts"
    )
    for outcome in open_retention(ext.session).journal.reconcile_pending(owner):
        data = outcome.to_dict()
        print(
            f"reconcile_pending(): {data['transaction_id']} -> {data['status']} ({data['reason']})"
        )

    _say("7. Cleanup: referenced artifacts stay, an expired orphan goes")
    orphan = ext.externalize("scratch output\n" * 10_000, "scratch").artifact
    later = datetime.now(UTC) + timedelta(days=2)
    policy = ArtifactCleanupPolicy(dry_run=False)
    journal = open_retention(ext.session).journal
    plan = ext.plan_cleanup_from_journal(journal, policy=policy, now=later)
    for entry in plan.entries:
        print(f"  plan: {entry.name:<22} {entry.status.value:<20} {entry.reason}")
    report = ext.apply_cleanup_from_journal(plan, journal, now=later)
    print(f"apply: {report.counts()}, freed {human_size(report.freed_bytes)}")
    try:
        ext.read_artifact(orphan.source_id)
    except ArtifactCollectedError as exc:
        print(f"reading the collected orphan: {exc}")


def _mcp_step(home: Path) -> None:
    try:
        from .mcp.demo import run_mcp_demo
    except ImportError:
        _say("8. MCP: skipped (install the extra: pip install '.[mcp]' in the toolswap checkout)")
        return
    _say("8. MCP: a client calls a large tool through `toolswap mcp proxy`")
    run_mcp_demo(home)
