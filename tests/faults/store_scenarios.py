"""The store-bound operations the local explorer faults: the store binding, the replica's
fetch, verify and a capture of a replica (``TOOLSWAP_STORE``).

The session lives in a bucket of the real S3 server of the tests (moto's); this host's
directory is its replica. Every durable call of this host fails or is cut by a power loss
(:mod:`.faultfs`) while the store, another machine, keeps what it was sent. Templates:

- ``store-empty``: nothing anywhere (the first capture binds the session and creates it
  in the store);
- ``joining``: another host captured five artifacts; this host has nothing yet (its first
  read binds it and fetches);
- ``replica``: another host captured three artifacts, this host read the first (its
  replica holds it and three records), then the other host captured two more.

The test that runs them sets ``TOOLSWAP_STORE`` (and the server's ``AWS_*``) for the
whole exploration, recovery included, as a restarted process on this host would have it.
"""

from __future__ import annotations

from collections.abc import Callable

from toolswap import ToolResultExternalizer
from toolswap.verify import verify_session

from .bucket import Bucket
from .faultfs import FaultIO
from .scenarios import (
    SESSION,
    WORKSPACE,
    Operation,
    Outcome,
    World,
    _capture,
    clock,
    register_template,
    text_output,
)

__all__ = ["STORE_PREFIX", "store_operations"]

STORE_PREFIX = "faults"
"""``TOOLSWAP_STORE=s3://<bucket>/faults``."""


def _other_host(world: World) -> ToolResultExternalizer:
    """Another host's replica of the same session (beside the template's home)."""
    root = world.home.parent / "other-host" / "projects" / WORKSPACE / SESSION
    return ToolResultExternalizer(root, now=clock)


def _captured_elsewhere(world: World, other: ToolResultExternalizer, i: int) -> None:
    ref = other.externalize(text_output(700 + i, 900 + 40 * i), "bash").artifact
    assert ref is not None
    world.source_ids.append(ref.source_id)
    world.hand_out(ref.source_id, ref.content_sha256)


def _build_store_empty(world: World) -> None:
    world.home.mkdir(parents=True)


def _build_joining(world: World) -> None:
    world.home.mkdir(parents=True)
    other = _other_host(world)
    for i in range(5):
        _captured_elsewhere(world, other, i)


def _build_replica(world: World) -> None:
    world.home.mkdir(parents=True)
    other = _other_host(world)
    for i in range(5):
        if i == 3:
            world.externalizer().read_lines(world.source_ids[0], 0, 1)
        _captured_elsewhere(world, other, i)


def _bound(bucket: Bucket, build: Callable[[World], None]) -> Callable[[World], None]:
    def builder(world: World) -> None:
        world.store = bucket
        world.store_prefix = f"{STORE_PREFIX}/{WORKSPACE}/{SESSION}/"
        bucket.restore_objects({})
        build(world)
        world.store_objects = bucket.objects()

    return builder


def _join_and_read(world: World, fio: FaultIO) -> Outcome:
    """This host's first use of a session another host started: bind, pull, fetch."""
    fio.arm()
    world.externalizer().read_lines(world.source_ids[4], 100, 20)
    return Outcome()


def _fetch(world: World, fio: FaultIO) -> Outcome:
    """A read of an artifact this host never fetched (its manifest lags two records)."""
    ext = world.externalizer()
    fio.arm()
    ext.read_lines(world.source_ids[4], 100, 20)
    return Outcome()


def _verify(world: World, fio: FaultIO) -> Outcome:
    """verify fetches (and so checks) every artifact this host lacks."""
    ext = world.externalizer()
    fio.arm()
    verify_session(ext.session)
    return Outcome()


def store_operations(bucket: Bucket) -> tuple[Operation, ...]:
    """The store-bound operations, their templates kept in ``bucket``."""
    for name, build in (
        ("store-empty", _build_store_empty),
        ("joining", _build_joining),
        ("replica", _build_replica),
    ):
        register_template(name, _bound(bucket, build))
    first = text_output(800, 900).encode()
    again = text_output(900, 1100).encode()
    return (
        Operation("capture binding a new session", "store-empty", _capture(lambda w: first), first),
        Operation("store binding (a host joins)", "joining", _join_and_read),
        Operation("replica fetch", "replica", _fetch),
        Operation("replica verify", "replica", _verify),
        Operation("capture (replica)", "replica", _capture(lambda w: again), again),
    )
