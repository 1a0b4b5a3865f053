"""A link-count change is not a content change; a content change is always caught.

The reader checks the artifact's identity (device, inode, size, mtime, ctime) after every
read. Making or removing a hard link moves the ctime without touching a byte, which once
made a reader of a freshly published artifact fail (the capture unlinked its temporary
name after the manifest record appeared).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolswap import ArtifactIntegrityError, ToolResultExternalizer


def _published(tmp_path: Path) -> tuple[ToolResultExternalizer, str, Path]:
    ext = ToolResultExternalizer(tmp_path / "s1")
    art = ext.externalize("".join(f"line {i}\n" for i in range(50_000)), "bash").artifact
    return ext, art.source_id, art.path


def test_a_hard_link_made_while_a_read_is_open_does_not_fail_the_read(tmp_path: Path) -> None:
    ext, source_id, path = _published(tmp_path)
    opened = ext.reader._open(ext.reader.reference(source_id))
    try:
        os.link(path, tmp_path / "extra-link")  # ctime moves, bytes do not
        os.unlink(tmp_path / "extra-link")

        opened.check_unchanged()
        assert opened.pread(7, 0) == b"line 0\n"
    finally:
        os.close(opened.fd)
    assert ext.read_artifact(source_id, 49_999, 1) == "line 49999"


def test_a_same_size_rewrite_with_its_mtime_restored_still_fails_the_open_read(
    tmp_path: Path,
) -> None:
    ext, source_id, path = _published(tmp_path)
    opened = ext.reader._open(ext.reader.reference(source_id))
    try:
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.write(b"LINE")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

        with pytest.raises(ArtifactIntegrityError, match="changed while it was being read"):
            opened.check_unchanged()
    finally:
        os.close(opened.fd)
