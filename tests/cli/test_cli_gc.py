"""`toolswap gc plan` / `gc apply` through real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def toolswap(*args: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolswap", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
        check=False,
        **kw,  # type: ignore[arg-type]
    )
    if check and done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}: {done.stderr}")
    return done


def _make_artifact(session: str) -> str:
    done = toolswap(
        "run", "--session", session, "--json", "--", sys.executable, "-c", "print('x' * 70000)"
    )
    return str(json.loads(done.stdout)["artifact"]["source"]["source_id"])


def test_gc_plan_shows_planned_deletions_and_deletes_nothing(toolswap_home: Path) -> None:
    source_id = _make_artifact("s1")
    done = toolswap("gc", "plan", "--session", "s1", "--ttl", "0s", "--json")
    document = json.loads(done.stdout)
    [entry] = document["plans"][0]["plan"]["entries"]
    assert entry["status"] == "planned_delete"
    assert entry["source_id"] == source_id
    assert toolswap("read", source_id, "--limit", "1").stdout.startswith("xxx")


def test_gc_plan_keeps_young_artifacts_with_the_default_ttl(toolswap_home: Path) -> None:
    _make_artifact("s1")
    done = toolswap("gc", "plan", "--session", "s1", "--json")
    [entry] = json.loads(done.stdout)["plans"][0]["plan"]["entries"]
    assert entry["status"] == "retained_recent"


def test_gc_apply_refuses_without_yes_when_not_on_a_terminal(toolswap_home: Path) -> None:
    source_id = _make_artifact("s1")
    done = toolswap("gc", "apply", "--session", "s1", "--ttl", "0s", check=False)
    assert done.returncode == 2
    assert "--yes" in done.stderr
    assert toolswap("read", source_id, "--limit", "1").returncode == 0


def test_gc_apply_from_a_saved_plan_deletes_and_read_says_collected(
    toolswap_home: Path, tmp_path: Path
) -> None:
    source_id = _make_artifact("s1")
    plan_file = tmp_path / "plan.json"
    toolswap("gc", "plan", "--session", "s1", "--ttl", "0s", "--save", str(plan_file))
    done = toolswap("gc", "apply", "--plan", str(plan_file), "--ttl", "0s", "--yes", "--json")
    report = json.loads(done.stdout)["reports"][0]["report"]
    assert report["counts"] == {"deleted": 1}
    gone = toolswap("read", source_id, check=False)
    assert gone.returncode == 1
    assert "collected by cleanup" in gone.stderr


def test_gc_apply_refuses_a_tampered_plan_file(toolswap_home: Path, tmp_path: Path) -> None:
    _make_artifact("s1")
    plan_file = tmp_path / "plan.json"
    toolswap("gc", "plan", "--session", "s1", "--ttl", "0s", "--save", str(plan_file))
    document = json.loads(plan_file.read_text(encoding="utf-8"))
    document["plans"][0]["plan"]["entries"][0]["name"] = "../../../etc/hosts"
    plan_file.write_text(json.dumps(document), encoding="utf-8")
    done = toolswap("gc", "apply", "--plan", str(plan_file), "--yes", check=False)
    assert done.returncode == 1
    assert "invalid plan entry name" in done.stderr


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda doc: doc["plans"][0].pop("plan"), "an object with a plan object"),
        (lambda doc: doc["plans"][0].update(plan=[1]), "an object with a plan object"),
        (lambda doc: doc.update(plans={"a": 1}), "plans must be a list"),
        (
            lambda doc: doc["plans"][0]["plan"]["entries"][0].update(reason="\ud800"),
            "invalid plan entry reason",
        ),
        (
            lambda doc: doc["plans"][0]["plan"]["policy"].update(orphan_ttl_seconds=1e300),
            "orphan_ttl_seconds",
        ),
        (lambda doc: doc["plans"][0]["plan"].update(budget_note="\ud800"), "budget_note"),
    ],
)
def test_gc_apply_refuses_a_plan_file_of_the_wrong_shape_in_one_line(
    toolswap_home: Path, tmp_path: Path, change: Any, says: str
) -> None:
    """A KeyError or AttributeError traceback, or (a lone surrogate in a reason) a
    UnicodeEncodeError after some files were already deleted (a review)."""
    _make_artifact("s1")
    _make_artifact("s1")
    plan_file = tmp_path / "plan.json"
    toolswap("gc", "plan", "--session", "s1", "--ttl", "0s", "--save", str(plan_file))
    document = json.loads(plan_file.read_text(encoding="utf-8"))
    change(document)
    plan_file.write_text(json.dumps(document), encoding="utf-8")
    done = toolswap("gc", "apply", "--plan", str(plan_file), "--ttl", "0s", "--yes", check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and says in done.stderr, done.stderr
    listed = toolswap("ls", "--session", "s1")
    assert len(listed.stdout.splitlines()) == 2  # nothing was collected


def test_gc_plan_refuses_a_ttl_past_a_century_in_one_line(toolswap_home: Path) -> None:
    """An astronomic TTL overflowed the planning's clock arithmetic (OverflowError)."""
    _make_artifact("s1")
    done = toolswap("gc", "plan", "--session", "s1", "--ttl", "9" * 300 + "s", check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "orphan_ttl_seconds" in done.stderr, done.stderr


def test_gc_budget_across_all_sessions(toolswap_home: Path) -> None:
    _make_artifact("s1")
    _make_artifact("s2")
    done = toolswap("gc", "plan", "--all-sessions", "--ttl", "0s", "--max-bytes", "100k", "--json")
    plans = json.loads(done.stdout)["plans"]
    statuses = sorted(p["plan"]["entries"][0]["status"] for p in plans)
    assert statuses == ["planned_delete", "retained_limit"]


def test_all_sessions_goes_on_past_a_session_it_cannot_trust_and_exits_1(
    toolswap_home: Path,
) -> None:
    healthy = _make_artifact("s1")
    broken = _make_artifact("s2")
    manifest = toolswap_home / "projects" / "ws" / "s2" / "manifest.jsonl"
    manifest.write_bytes(manifest.read_bytes().replace(b'"tool"', b'"t00l"'))

    done = toolswap("gc", "apply", "--all-sessions", "--ttl", "0s", "--yes", "--json", check=False)

    assert done.returncode == 1
    reports = json.loads(done.stdout)["reports"]
    assert [(r["workspace"], r["report"]["session"]) for r in reports] == [("ws", "s1")]
    assert [e["status"] for e in reports[0]["report"]["entries"]] == ["deleted"]
    assert "ws/s2 skipped (nothing of it is deleted)" in done.stderr
    assert "1 session(s) skipped" in done.stderr
    assert healthy.split(":")[2] not in os.listdir(toolswap_home / "projects/ws/s1/tool-results")
    assert broken.split(":")[2] in os.listdir(toolswap_home / "projects/ws/s2/tool-results")


@pytest.mark.parametrize("bad", [["--ttl", "soon"], ["--max-bytes", "lots"]])
def test_gc_rejects_malformed_limits_as_usage_errors(toolswap_home: Path, bad: list[str]) -> None:
    done = toolswap("gc", "plan", "--session", "s1", *bad, check=False)
    assert done.returncode == 2


def test_gc_reads_its_limits_with_the_shared_size_and_duration_grammar(
    toolswap_home: Path,
) -> None:
    _make_artifact("s1")
    done = toolswap(
        "gc", "plan", "--session", "s1", "--ttl", "1.5h", "--max-bytes", "2GiB", "--json"
    )
    policy = json.loads(done.stdout)["plans"][0]["plan"]["policy"]
    assert (policy["orphan_ttl_seconds"], policy["max_bytes"]) == (5400, 2 << 30)


@pytest.mark.parametrize(
    ("bad", "says"),
    [(["--ttl", "1y"], "is not a duration: use seconds"), (["--max-bytes", "5PB"], "G/GB/GiB")],
)
def test_a_malformed_gc_limit_names_its_option_and_the_grammar(
    toolswap_home: Path, bad: list[str], says: str
) -> None:
    done = toolswap("gc", "plan", "--session", "s1", *bad, check=False)
    assert done.returncode == 2
    assert bad[0] in done.stderr and says in done.stderr


def test_gc_refuses_to_collect_when_the_journal_was_deleted_behind_its_owner(
    toolswap_home: Path,
) -> None:
    source_id = _make_artifact("s1")
    session_dir = toolswap_home / "projects" / "ws" / "s1"
    publish = (
        "import sys\n"
        "from toolswap import *\n"
        "ext = ToolResultExternalizer(sys.argv[1])\n"
        "ref = ext.get_artifact(sys.argv[2]).for_memory()\n"
        "owner = SqliteMemoryOwner(sys.argv[1] + '/memory.sqlite3')\n"
        "journal = ArtifactRetentionJournal(sys.argv[1], owner=owner)\n"
        "claim = ArtifactRetentionClaim.from_memory_reference(ref)\n"
        "journal.publish_reference(claim, lambda: owner.publish('tx', ref), transaction_id='tx')\n"
    )
    subprocess.run([sys.executable, "-c", publish, str(session_dir), source_id], check=True)
    (session_dir / "retention-leases.jsonl").unlink()
    plan = toolswap("gc", "plan", "--session", "s1", "--ttl", "0s", check=False)
    assert plan.returncode == 1
    assert "behind" in plan.stderr
    applied = toolswap("gc", "apply", "--session", "s1", "--ttl", "0s", "--yes", check=False)
    assert applied.returncode == 1
    assert toolswap("read", source_id, "--limit", "1").stdout.startswith("xxx")


def test_gc_apply_honours_session_dir_with_a_saved_plan(
    toolswap_home: Path, tmp_path: Path
) -> None:
    session_dir = tmp_path / "elsewhere" / "s9"
    toolswap(
        "run", "--session-dir", str(session_dir), "--", sys.executable, "-c", "print('x' * 70000)"
    )
    plan_file = tmp_path / "plan.json"
    toolswap(
        "gc", "plan", "--session-dir", str(session_dir), "--ttl", "0s", "--save", str(plan_file)
    )
    done = toolswap(
        "gc",
        "apply",
        "--plan",
        str(plan_file),
        "--session-dir",
        str(session_dir),
        "--ttl",
        "0s",
        "--yes",
    )
    assert "deleted 1" in done.stdout
    assert not list((session_dir / "tool-results").glob("tool_result_*.txt"))


def test_an_edited_plan_cannot_delete_what_the_current_ttl_keeps(
    toolswap_home: Path, tmp_path: Path
) -> None:
    source_id = _make_artifact("s1")
    plan_file = tmp_path / "plan.json"
    toolswap("gc", "plan", "--session", "s1", "--save", str(plan_file))  # default 24 h TTL
    document = json.loads(plan_file.read_text(encoding="utf-8"))
    plan = document["plans"][0]["plan"]
    assert [e["status"] for e in plan["entries"]] == ["retained_recent"]
    # Someone edits the saved plan: the status and the policy's TTL both say "delete".
    plan["entries"][0]["status"] = "planned_delete"
    plan["policy"]["orphan_ttl_seconds"] = 0
    plan_file.write_text(json.dumps(document), encoding="utf-8")

    done = toolswap("gc", "apply", "--plan", str(plan_file), "--yes", "--json")

    report = json.loads(done.stdout)["reports"][0]["report"]
    assert report["counts"] == {"retained_recent": 1}
    assert toolswap("read", source_id, "--limit", "1").stdout.startswith("xxx")


def test_an_edited_plan_cannot_exceed_the_deletion_limit_given_at_apply(
    toolswap_home: Path, tmp_path: Path
) -> None:
    ids = [_make_artifact("s1") for _ in range(3)]
    plan_file = tmp_path / "plan.json"
    toolswap("gc", "plan", "--session", "s1", "--ttl", "0s", "--save", str(plan_file))

    done = toolswap(
        "gc",
        "apply",
        "--plan",
        str(plan_file),
        "--ttl",
        "0s",
        "--max-deletions",
        "1",
        "--yes",
        "--json",
    )

    report = json.loads(done.stdout)["reports"][0]["report"]
    assert report["counts"] == {"deleted": 1, "retained_limit": 2}
    kept = [toolswap("read", i, "--limit", "1", check=False).returncode for i in ids]
    assert sorted(kept) == [0, 0, 1]
