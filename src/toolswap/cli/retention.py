"""Retention commands: ``leases``, ``reconcile``, ``journal verify`` and ``journal checkpoint``.

Each opens the session's retention with :func:`toolswap.retention.open_retention`: with
``--database-url`` (or ``TOOLSWAP_DATABASE_URL``) the memory owner and the lease journal
are the PostgreSQL ones of a shared session (the ``postgres`` extra), else the session's
own, as the session recorded.
"""

from __future__ import annotations

import sys

import click

from ..retention import ArtifactReconcileStatus
from ._common import echo_json, handle_errors
from ._group import main
from ._options import (
    BackendOptions,
    SessionOptions,
    backend_options,
    json_option,
    session_options,
)

__all__: list[str] = []


def _deadline(value: object) -> str:
    return "unbounded" if value is None else str(value)


@main.command()
@session_options
@backend_options
@click.option("--all", "show_all", is_flag=True, help="Also list every lease with its phase.")
@json_option()
@handle_errors
def leases(
    where: SessionOptions,
    backend: BackendOptions,
    show_all: bool,
    as_json: bool,
) -> None:
    """Show the artifacts the lease journal protects, and the pending transactions.

    The journal is verified (only its torn final record is ignored) and, when the memory
    owner's database exists, checked against the journal head the owner acknowledged.
    A pending (PREPARED) transaction protects its artifact with no deadline until
    `toolswap reconcile` settles it. Exits 1 if the journal cannot be trusted.
    """
    session = where.session()
    journal = backend.open(session).journal
    view = journal.recover()
    transactions = journal.transactions() if show_all else []
    if as_json:
        data = view.to_dict()
        data["session"] = session.session_id
        if show_all:
            data["leases"] = [t.to_dict() for t in transactions]
        echo_json(data)
        return
    for claim in sorted(view.claims.values(), key=lambda c: c.source_id):
        click.echo(f"{claim.source_id}\t{claim.reference_count}\t{_deadline(claim.retain_until)}")
    for tx in view.pending_transaction_ids:
        click.echo(f"pending\t{tx}")
    for t in transactions:
        click.echo(
            f"lease\t{t.transaction_id}\t{t.phase.value}\t{t.claim.source_id}\t"
            f"{t.claim.reference_count}\t{_deadline(t.claim.retain_until)}"
        )
    click.echo(
        f"{len(view.claims)} protected artifact(s), {len(view.pending_transaction_ids)} pending "
        f"transaction(s); journal at record {view.journal_seq}",
        err=True,
    )


@main.command()
@session_options
@backend_options
@json_option("Print a JSON array of reports.")
@handle_errors
def reconcile(
    where: SessionOptions,
    backend: BackendOptions,
    as_json: bool,
) -> None:
    """Settle pending leases with the memory owner (a SqliteMemoryOwner database).

    The owner is <session>/memory.sqlite3 unless --owner-db names another (it must
    exist), or the PostgreSQL owner of --database-url.
    Each pending lease is observed under the owner's fence: a matching reference commits
    it, a sealed absence (tombstone) aborts it, anything uncertain keeps it pending and
    protecting its artifact. Reports carry the transaction ID, status, reason and
    generation only. Exits 0 when every lease settled, 3 when some stay pending.
    """
    session = where.session()
    retention = backend.open(session, require_owner=True)
    assert retention.owner is not None
    reports = retention.journal.reconcile_pending(retention.owner)
    if as_json:
        echo_json([r.to_dict() for r in reports])
    else:
        for r in reports:
            generation = "-" if r.generation is None else str(r.generation)
            click.echo(f"{r.transaction_id}\t{r.status.value}\t{generation}\t{r.reason}")
    pending = [r for r in reports if r.status.is_pending]
    if not as_json:
        settled = sum(
            r.status in (ArtifactReconcileStatus.COMMITTED, ArtifactReconcileStatus.ABORTED)
            for r in reports
        )
        click.echo(
            f"{len(reports)} pending lease(s) reconciled: {settled} settled now, "
            f"{len(pending)} still pending",
            err=True,
        )
    if pending:
        sys.exit(3)


@main.group()
def journal() -> None:
    """Inspect the session's retention lease journal."""


@journal.command(name="verify")
@session_options
@backend_options
@json_option()
@handle_errors
def journal_verify(
    where: SessionOptions,
    backend: BackendOptions,
    as_json: bool,
) -> None:
    """Verify the whole lease journal: hash chain, sequence, phases, owner's head.

    Every record is checked from the first byte (the cache is ignored). A final record
    without its newline (a torn append) is reported and ignored; any other defect, or a
    journal behind the head the memory owner acknowledged, exits 1.
    """
    session = where.session()
    journal = backend.open(session).journal
    summary = journal.verify()
    if as_json:
        echo_json({"ok": True, **summary.to_dict()})
        return
    phases = ", ".join(f"{n} {p}" for p, n in summary.phases.items())
    click.echo(f"journal ok: {summary.records} record(s), head {summary.head.hash[:16]}; {phases}")
    if summary.owner_head is not None:
        click.echo(f"owner acknowledged record {summary.owner_head.seq}")
    if summary.torn_tail_bytes:
        click.echo(
            f"torn final record: {summary.torn_tail_bytes} byte(s) ignored (the next append "
            "cuts them off and keeps them beside the journal)"
        )


@journal.command(name="checkpoint")
@session_options
@backend_options
@json_option()
@handle_errors
def journal_checkpoint(
    where: SessionOptions,
    backend: BackendOptions,
    as_json: bool,
) -> None:
    """Write a verified checkpoint of the journal's fold now.

    Cold recovery loads the checkpoint and folds only the records after it (the journal
    also writes one every 10,000 records). A damaged or foreign checkpoint is ignored; one
    that names records the journal lost makes every command fail closed.
    """
    session = where.session()
    journal = backend.open(session).journal
    head = journal.checkpoint()
    if as_json:
        echo_json({"checkpoint": head.to_dict() if head else None})
    elif head is None:
        click.echo("the journal holds no record: no checkpoint written")
    else:
        click.echo(f"checkpoint written at record {head.seq} ({head.hash[:16]})")
