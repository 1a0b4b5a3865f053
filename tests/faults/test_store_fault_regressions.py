"""The states in which the fault explorer found a store-bound session's replica breaking
an invariant, kept: the session lives in the real S3 server of the tests (moto's), and one
durable call of this host fails by name (:attr:`FaultIO.fail_on`).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest.importorskip("boto3")

from toolswap import ArtifactAccessError, ArtifactWriteError, ToolResultExternalizer
from toolswap.testing import substituted
from toolswap.verify import FindingKind, verify_session

from .bucket import Bucket
from .explorer import recover
from .faultfs import Fault, FaultIO
from .scenarios import Templates, World, text_output
from .store_scenarios import STORE_PREFIX, store_operations


@pytest.fixture(scope="module")
def templates(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Templates:
    """The explorer's templates, built once for the module in a bucket of its own."""
    bucket = f"toolswap-regressions-{os.getpid()}"
    s3_server.client().create_bucket(Bucket=bucket)
    store_operations(Bucket(s3_server.client(), bucket))  # registers the templates
    return Templates(tmp_path_factory.mktemp("store-templates") / "templates")


@pytest.fixture
def replica(s3_server: Any, templates: Templates, monkeypatch: pytest.MonkeyPatch) -> World:
    """The explorer's ``replica`` state: this host's replica lags two records and holds
    only the first artifact of five."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    store = f"s3://toolswap-regressions-{os.getpid()}/{STORE_PREFIX}"
    monkeypatch.setenv("TOOLSWAP_STORE", store)
    monkeypatch.setattr("toolswap.backends.store._STORES", {})
    # Beside the templates: a state's artifacts are hard links to theirs.
    world = templates.world("replica", templates.root.parent / "state" / "home")
    assert world.store is not None
    world.store.restore_objects(world.store_objects)
    return world


# The temporary file a fetch writes its copy into, then each call on it.
_FETCH_CALLS = [
    (("open+create", ".tmp-"), Fault.ENOSPC),
    (("open+create", ".tmp-"), Fault.EMFILE),
    (("open+create", ".tmp-"), Fault.DEAD_DISK),  # and the unlink of the leftover fails too
    (("write", ".tmp-"), Fault.EIO),
    (("write", ".tmp-"), Fault.EINTR),
    (("fsync", ".tmp-"), Fault.ENOSPC),
    (("link", "tool_result_"), Fault.EIO),
    (("close+written", ".tmp-"), Fault.EIO),
]


@pytest.mark.parametrize(("call", "fault"), _FETCH_CALLS)
def test_a_read_whose_copy_from_the_store_cannot_be_written_is_a_typed_error(
    replica: World, call: tuple[str, str], fault: Fault
) -> None:
    ext = replica.externalizer()
    fio = FaultIO(fail_on=call, fault=fault)

    with substituted(fio):
        try:
            page = ext.read_lines(replica.source_ids[4], 100, 2)
        except ArtifactAccessError as exc:
            assert "cannot copy it from" in str(exc) and "\n" not in str(exc)
        else:  # a close after the fsync: the copy is whole, the read goes on
            assert call[0] == "close+written" and len(page.lines) == 2

    assert fio.injected, "the call to break never came"
    assert fio.open_descriptors == []
    assert list(recover(replica)) == []


@pytest.mark.parametrize(
    ("call", "fault"),
    [(call, fault) for call, fault in _FETCH_CALLS if not fault.sticky and "close" not in call[0]],
)
def test_verify_whose_copy_from_the_store_cannot_be_written_reports_it_unreadable(
    replica: World, call: tuple[str, str], fault: Fault
) -> None:
    ext = ToolResultExternalizer(replica.session_dir)
    fio = FaultIO(fail_on=call, fault=fault)

    with substituted(fio):
        findings = verify_session(ext.session)

    assert fio.injected
    assert fio.open_descriptors == []
    assert any(f.kind is FindingKind.UNREADABLE and "cannot copy" in f.detail for f in findings)
    assert list(recover(replica)) == []


def test_a_capture_whose_note_of_the_store_version_cannot_be_written_leaks_no_descriptor(
    replica: World,
) -> None:
    # The note (store-versions/<name>) is best effort; with the disk dead from its
    # temporary file on, the unlink of that file fails too, and the directory must still
    # be closed. The capture itself fails later with its preview.
    ext = replica.externalizer()
    output = text_output(5, 900)
    fio = FaultIO(fail_on=("open+create", ".tool_result_"), fault=Fault.DEAD_DISK)

    with substituted(fio), pytest.raises(ArtifactWriteError) as failed:
        ext.externalize(output, "bash")

    assert fio.injected
    assert output.splitlines()[0] in failed.value.preview
    assert fio.open_descriptors == []
    assert list(recover(replica)) == []
