"""Crash matrix: SIGKILL the protocol at every named durable step, then recover.

Each case prepares a state in this process, runs one step of the protocol (publish,
rejected publish, remove, reconcile, checkpoint) in a worker process that kills itself
with SIGKILL at one crash point, then runs a fresh recovery process that verifies the
journal, reconciles every pending lease with the owner and finishes removals whose owner
side completed. Every case runs with the SQLite owner and with the owner and the journal
in PostgreSQL; the owner's points also with the PostgreSQL owner beside a local journal.
The checks:

- no reference the owner holds is unprotected, before and after reconciliation;
- no corrupt journal is accepted (the recovery verifies it from the first byte);
- every pending lease ends committed or aborted once the owner answers, in the phase the
  crash point implies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from toolswap.testing import CRASH_POINTS

from .conftest import BACKENDS, Env

RETENTION_POINTS = {p for p in CRASH_POINTS if p.split(".")[0] in ("journal", "owner", "reconcile")}

C, A, R = "COMMITTED", "ABORTED", "RELEASED"


def _nothing(env: Env) -> None:
    pass


def _committed(env: Env) -> None:
    env.publish("tx")


def _pending_absent(env: Env) -> None:
    env.journal().prepare(env.claim(), transaction_id="tx")


def _pending_published(env: Env) -> None:
    _pending_absent(env)
    env.owner().publish("tx", env.reference())


Scenario = tuple[Callable[[Env], None], tuple[str, ...], dict[str, str]]

SCENARIOS: dict[str, Scenario] = {
    "publish": (
        _nothing,
        ("publish", "<sid>", "tx"),
        {
            "journal.prepared.appended": A,
            "journal.prepared.fsynced": A,
            "journal.publisher.before": A,
            "owner.publishing": A,
            "owner.published": C,
            "journal.publisher.after": C,
            "journal.committed.appended": C,
            "journal.committed.fsynced": C,
        },
    ),
    "rejected publish": (
        _nothing,
        ("publish", "<sid>", "tx", "reject"),
        {
            "journal.prepared.fsynced": A,
            "journal.publisher.before": A,
            "journal.aborted.appended": A,
            "journal.aborted.fsynced": A,
        },
    ),
    "remove": (
        _committed,
        ("remove", "tx"),
        {
            "journal.remover.before": C,
            "owner.removing": C,
            "owner.removed": R,
            "journal.remover.after": R,
            "journal.released.appended": R,
            "journal.released.fsynced": R,
        },
    ),
    "checkpoint": (
        _committed,
        ("checkpoint",),
        {
            "journal.checkpoint.tmp_written": C,
            "journal.checkpoint.tmp_fsynced": C,
            "journal.checkpoint.renamed": C,
            "journal.checkpoint.dir_fsynced": C,
        },
    ),
    "reconcile an absent reference": (
        _pending_absent,
        ("reconcile",),
        {
            "reconcile.fenced": A,
            "owner.tombstoning": A,
            "owner.tombstoned": A,
            "journal.aborted.appended": A,
            "journal.aborted.fsynced": A,
        },
    ),
    "reconcile a published reference": (
        _pending_published,
        ("reconcile",),
        {
            "reconcile.fenced": C,
            "journal.committed.appended": C,
            "journal.committed.fsynced": C,
        },
    ),
}


def _runs_on(backend: str, scenario: str, point: str) -> bool:
    """Every point on SQLite and with the journal in PostgreSQL (which has no checkpoint
    file to crash while writing); the PostgreSQL owner beside a local journal at the
    owner's own points and where reconciliation takes its fence."""
    if backend == "postgres-journal":
        return scenario != "checkpoint"
    if backend == "postgres":
        return point.startswith(("owner.", "reconcile."))
    return True


CASES = [
    pytest.param(backend, name, point, final, id=f"{name}@{point}-{backend}")
    for backend in [*BACKENDS, "postgres-journal"]
    for name, (_, _, points) in SCENARIOS.items()
    for point, final in points.items()
    if _runs_on(backend, name, point)
]


def test_crash_matrix_exercises_every_point_of_the_retention_protocol() -> None:
    exercised = {point for _, _, points in SCENARIOS.values() for point in points}
    assert exercised == RETENTION_POINTS


CHECKPOINT_FILE_POINTS = {p for p in RETENTION_POINTS if p.startswith("journal.checkpoint.")}
"""The checkpoint file's own steps: a checkpoint in PostgreSQL is one upsert, committed
whole or not at all, and never reaches them."""


def test_with_the_journal_in_postgresql_every_point_it_reaches_is_crashed() -> None:
    shared = {case.values[2] for case in CASES if case.values[0] == "postgres-journal"}
    assert shared == RETENTION_POINTS - CHECKPOINT_FILE_POINTS


@pytest.mark.parametrize("env", ["postgres-journal"], indirect=True)
def test_a_checkpoint_in_postgresql_passes_none_of_the_checkpoint_file_s_steps(
    env: Env,
) -> None:
    env.publish("tx")
    for point in sorted(CHECKPOINT_FILE_POINTS):
        written = env.run("checkpoint", crash=point)
        assert (written.code, written.out) == (0, 2), (point, written.err)
    assert not (env.session_dir / "retention-leases.checkpoint").exists()
    recovered = env.run("recover")
    assert recovered.code == 0, recovered.err
    assert recovered.out["after"]["leases"] == {"tx": C}


def _check_owner_references_are_protected(state: dict[str, Any]) -> None:
    for tx, (source_id, _) in state["owner"].items():
        assert source_id in state["protected"], (tx, state)
        assert state["leases"].get(tx) in ("PREPARED", "COMMITTED"), (tx, state)


@pytest.mark.parametrize(("env", "scenario", "point", "final"), CASES, indirect=["env"])
def test_crash_at_a_durable_step_never_leaves_a_reference_unprotected(
    env: Env, scenario: str, point: str, final: str
) -> None:
    setup, action, _ = SCENARIOS[scenario]
    setup(env)
    args = [env.source_ids[0] if a == "<sid>" else a for a in action]
    crashed = env.run(*args, crash=point)
    assert crashed.killed, (crashed.code, crashed.err)

    recovered = env.run("recover")
    assert recovered.code == 0, recovered.err
    out = recovered.out
    before, after = out["before"], out["after"]
    _check_owner_references_are_protected(before)
    _check_owner_references_are_protected(after)
    # Every lease is settled once the owner has answered.
    assert after["view"]["pending_transaction_ids"] == []
    assert all(r["status"] in ("committed", "aborted") for r in out["reports"])
    # A record killed before its commit is gone from a database journal (a file keeps
    # bytes written before the fsync when only the process dies).
    lost = env.shared_journal and point.endswith(".appended")
    if lost and point == "journal.prepared.appended":
        assert after["leases"] == {} and after["owner"] == {}
        return
    assert after["leases"] == {"tx": final}
    # The journal and the owner agree.
    holds = "tx" in after["owner"]
    assert holds == (final == C)
    if final == C:
        assert after["owner"]["tx"][0] == env.source_ids[0]
        assert env.source_ids[0] in after["protected"]
    assert out["verified_records"] == after["view"]["journal_seq"]
    # Settled by the owner means sealed: a late or replayed write can never land. Only a
    # publisher's own rejection (ABORTED without asking the owner) leaves no tombstone.
    sealed = after["tombstoned"]["tx"]
    rejected_outright = (
        scenario == "rejected publish" and point.startswith("journal.aborted") and not lost
    )
    if final in (A, R):
        assert sealed != rejected_outright
    if sealed:
        late = env.run("owner-publish", env.source_ids[0], "tx")
        assert late.out == "ArtifactReferenceTombstonedError"
