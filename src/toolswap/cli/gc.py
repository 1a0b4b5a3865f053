"""``toolswap gc plan`` and ``toolswap gc apply``: reference-aware cleanup."""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from .. import durable
from ..artifact import validate_session_id
from ..cleanup import (
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    ArtifactCleanupReport,
    JournalLike,
    apply_cleanup_from_journal,
    limit_plans,
    plan_cleanup_from_journal,
)
from ..errors import CleanupError, ConfigurationError, ToolswapError
from ..pointer import human_size
from ..session import Session, toolswap_home, workspace_slug
from ..settings import parse_duration, parse_size
from ..workspaces import session_dirs
from ._common import echo_json, handle_errors, is_tty
from ._group import main
from ._options import (
    BackendOptions,
    SessionOptions,
    backend_options,
    bundled,
    json_option,
    session_options,
)

__all__: list[str] = []


def _journal(session: Session, backend: BackendOptions) -> JournalLike:
    """The session's lease journal, as :func:`toolswap.retention.open_retention` opens it
    (bound to its memory owner when that exists, or to the one ``backend`` names).

    Cleanup always goes through the journal, even when its file is missing: a journal
    lost next to an owner that acknowledged its head fails closed instead of reading as
    "no references".
    """
    return backend.open(session).journal


@contextmanager
def _progress(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    if not (enabled and is_tty()):
        yield None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _plan_session(
    session: Session,
    policy: ArtifactCleanupPolicy,
    progress: Callable[[int, int], None] | None,
    backend: BackendOptions,
) -> ArtifactCleanupPlan:
    return plan_cleanup_from_journal(_journal(session, backend), policy=policy, progress=progress)


def _apply_session(
    session: Session,
    plan: ArtifactCleanupPlan,
    policy: ArtifactCleanupPolicy,
    progress: Callable[[int, int], None] | None,
    backend: BackendOptions,
) -> ArtifactCleanupReport:
    return apply_cleanup_from_journal(
        plan, _journal(session, backend), progress=progress, policy=policy
    )


_SKIPPED: list[str] = []
"""Sessions --all-sessions left alone in this command (it then exits 1)."""


def _skip(name: str, exc: ToolswapError) -> None:
    _SKIPPED.append(name)
    click.echo(f"toolswap: {name} skipped (nothing of it is deleted): {exc}", err=True)


def _fails_if_skipped(command: Callable[..., None]) -> Callable[..., None]:
    """Exit 1 after the command when --all-sessions had to leave a session alone."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        _SKIPPED.clear()
        command(*args, **kwargs)
        if _SKIPPED:
            click.echo(f"toolswap: {len(_SKIPPED)} session(s) skipped, see above", err=True)
            sys.exit(1)

    return run


def _all_sessions() -> list[tuple[str, Session]]:
    """Every session of this user's home; one that cannot be opened is skipped, and said."""
    found: list[tuple[str, Session]] = []
    for workspace, path in session_dirs(toolswap_home()):
        try:
            found.append((workspace, Session.at(path, create=False)))
        except ToolswapError as exc:
            _skip(f"{workspace}/{path.name}", exc)
    return found


def _print_plan(workspace: str, plan: ArtifactCleanupPlan, verbose: bool) -> None:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(plan.counts().items())) or "empty"
    planned = sum(e.size or 0 for e in plan.planned)
    click.echo(
        f"{workspace}/{plan.session_id}: {counts}; would free {human_size(planned)} "
        f"of {human_size(plan.total_bytes)}"
    )
    if plan.budget_note:
        click.echo(f"  budget: {plan.budget_note}")
    for entry in plan.entries:
        if verbose or entry.status.value in (
            "planned_delete",
            "missing_referenced",
            "retained_corrupt",
            "denied",
            "race_detected",
        ):
            click.echo(f"  {entry.status.value:<20} {entry.name}  {entry.reason}")


@dataclass(frozen=True, slots=True)
class _PlanOptions:
    """``--ttl``, ``--max-deletions``, ``--max-bytes`` and ``--all-sessions`` as one value."""

    ttl: str
    max_deletions: int | None
    max_bytes: str | None
    all_sessions: bool

    def policy(self) -> ArtifactCleanupPolicy:
        """The dry-run policy they ask for (bad values are usage errors)."""
        try:
            ttl_seconds = parse_duration(self.ttl)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="--ttl") from None
        try:
            budget = parse_size(self.max_bytes) if self.max_bytes else None
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="--max-bytes") from None
        return ArtifactCleanupPolicy(
            orphan_ttl_seconds=ttl_seconds,
            max_deletions=self.max_deletions,
            dry_run=True,
            max_bytes=budget,
        )


def _plan_options(func: Callable[..., None]) -> Callable[..., None]:
    """The retention backend and what to plan, passed as ``backend`` and ``scope``."""
    scoped = bundled(
        "scope",
        _PlanOptions,
        click.option(
            "--ttl", default="24h", show_default=True, help="Orphan TTL (90s, 30m, 24h, 7d)."
        ),
        click.option("--max-deletions", type=int, default=None, help="Delete at most N files."),
        click.option(
            "--max-bytes", default=None, help="Size budget (500M, 2G): delete only to get under it."
        ),
        click.option(
            "--all-sessions",
            is_flag=True,
            help="Every session under $TOOLSWAP_HOME (budget shared).",
        ),
    )(func)
    return backend_options(scoped)


def _make_plans(
    where: SessionOptions,
    scope: _PlanOptions,
    policy: ArtifactCleanupPolicy,
    show_progress: bool,
    backend: BackendOptions,
) -> list[tuple[str, ArtifactCleanupPlan]]:
    if scope.all_sessions:
        unlimited = replace(policy, max_deletions=None, max_bytes=None)
        planned: list[tuple[str, ArtifactCleanupPlan]] = []
        with _progress("planning", show_progress) as progress:
            for ws, session in _all_sessions():
                try:
                    planned.append((ws, _plan_session(session, unlimited, progress, backend)))
                except ToolswapError as exc:
                    _skip(f"{ws}/{session.session_id}", exc)
        limited = limit_plans([plan for _, plan in planned], policy)
        return [(ws, plan) for (ws, _), plan in zip(planned, limited, strict=True)]
    session = where.session()
    ws = where.workspace or (
        where.session_dir.parent.name if where.session_dir else workspace_slug()
    )
    with _progress("planning", show_progress) as progress:
        return [(ws, _plan_session(session, policy, progress, backend))]


@main.group()
def gc() -> None:
    """Reference-aware cleanup: plan (read-only, the default) and apply."""


@gc.command(name="plan")
@session_options
@_plan_options
@click.option(
    "--save",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the plan to FILE for `gc apply --plan FILE`.",
)
@click.option("-v", "--verbose", is_flag=True, help="List every file, not only those that matter.")
@json_option("Print the plans as JSON.")
@handle_errors
@_fails_if_skipped
def gc_plan(
    where: SessionOptions,
    scope: _PlanOptions,
    backend: BackendOptions,
    save: Path | None,
    verbose: bool,
    as_json: bool,
) -> None:
    """Show what cleanup would delete and why (reads only; hashes every candidate)."""
    policy = scope.policy()
    plans = _make_plans(where, scope, policy, not as_json, backend)
    document = {
        "kind": "toolswap.cleanup_plans",
        "plans": [{"workspace": ws, "plan": plan.to_dict()} for ws, plan in plans],
    }
    if save is not None:
        _save_private(save, json.dumps(document, indent=1).encode())
    if as_json:
        echo_json(document)
        return
    for ws, plan in plans:
        _print_plan(ws, plan, verbose)
    if not plans:
        click.echo("no sessions", err=True)


def _save_private(path: Path, data: bytes) -> None:
    """Write ``path`` (mode 0600) through a temporary name, so it is whole or absent."""
    try:
        durable.write_atomically(path.parent, path.name, data, replace=True)
    except OSError as exc:
        raise CleanupError(f"cannot save the plan to {path}: {exc.strerror}") from None


def _read_regular(path: Path) -> bytes:
    """A plan file's bytes; a FIFO or device in its place is refused, never waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _load_plans(path: Path) -> list[tuple[str, ArtifactCleanupPlan]]:
    try:
        document = json.loads(_read_regular(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise CleanupError(f"cannot read plan file {path}: {why}") from None
    if not isinstance(document, dict) or document.get("kind") != "toolswap.cleanup_plans":
        raise CleanupError(f"{path} is not a file written by `toolswap gc plan --save`")
    out = []
    plans = document.get("plans", [])
    if not isinstance(plans, list):
        raise CleanupError("invalid plan file: plans must be a list")
    for item in plans:
        if not isinstance(item, dict) or not isinstance(item.get("plan"), dict):
            raise CleanupError("invalid plan file entry: an object with a plan object")
        out.append(
            (
                validate_session_id(str(item.get("workspace"))),
                ArtifactCleanupPlan.from_dict(item["plan"]),
            )
        )
    return out


@gc.command(name="apply")
@session_options
@_plan_options
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Apply a plan saved by `gc plan --save` instead of planning now.",
)
@click.option(
    "-y", "--yes", is_flag=True, help="Apply without asking (needed when not on a terminal)."
)
@json_option("Print the reports as JSON.")
@handle_errors
@_fails_if_skipped
def gc_apply(
    where: SessionOptions,
    scope: _PlanOptions,
    backend: BackendOptions,
    plan_file: Path | None,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete what a plan marked planned_delete, re-verifying each file first.

    Every file is re-checked under the session lock (current claims, ownership, type,
    size/mtime/inode snapshot, full SHA-256); anything that changed is kept. The TTL and
    limits are applied again from the current state: with --plan, the stricter of the
    saved plan's policy and this command's --ttl/--max-deletions/--max-bytes.
    """
    # The policy in force now: a saved plan's entries and policy only narrow it.
    policy = replace(scope.policy(), dry_run=False)
    if plan_file is not None:
        plans = _load_plans(plan_file)
    else:
        plans = _make_plans(where, scope, policy, not as_json, backend)
        if not as_json:
            for ws, plan in plans:
                _print_plan(ws, plan, False)
    if not any(plan.planned for _, plan in plans):
        if as_json:
            echo_json({"kind": "toolswap.cleanup_reports", "reports": []})
        else:
            click.echo("nothing to delete")
        return
    if not yes:
        if not sys.stdin.isatty():
            click.echo(
                "toolswap: refusing to delete without --yes when not on a terminal", err=True
            )
            sys.exit(2)
        click.confirm("Delete the files marked planned_delete?", abort=True)
    reports = []
    shared = len(plans) > 1
    # Limits over several sessions are shared: the deletion count is carried from session
    # to session; a shared size budget was decided when planning (limit_plans) and cannot
    # be re-derived one session at a time, so each session is held to the TTL, its claims
    # and the remaining count only.
    left = policy.max_deletions
    for ws, plan in plans:
        if where.session_dir is not None:
            if len(plans) != 1:
                raise CleanupError("--session-dir applies to a plan of one session only")
            session = Session.at(where.session_dir, create=False)
        else:
            session = Session.open(plan.session_id, workspace=ws, create=False)
        own = replace(plan.policy, dry_run=False)
        now_policy = policy
        if shared:
            own = replace(own, max_bytes=None, max_deletions=None)
            now_policy = replace(policy, max_bytes=None, max_deletions=left)
        live = replace(plan, policy=own)
        with _progress("deleting", not as_json) as progress:
            report = _apply_session(session, live, now_policy, progress, backend)
        reports.append((ws, report))
        if left is not None:
            left -= report.counts().get("deleted", 0)
    if as_json:
        echo_json(
            {
                "kind": "toolswap.cleanup_reports",
                "reports": [{"workspace": ws, "report": r.to_dict()} for ws, r in reports],
            }
        )
        return
    for ws, report in reports:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts().items()))
        click.echo(f"{ws}/{report.session_id}: {counts}; freed {human_size(report.freed_bytes)}")
        for entry in report.entries:
            if entry.status.value == "race_detected" or "after planning" in entry.reason:
                click.echo(f"  kept {entry.name}: {entry.reason}")
