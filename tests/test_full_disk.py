"""A full disk never leaves an orphan: no final name without its record, no partial record,
no empty copy of a torn tail, and ``verify`` stays clean afterwards.

The write errors come from the kernel: a file-size limit (RLIMIT_FSIZE) set in a real child
process makes the manifest append fail with EFBIG after the artifact is already linked, and
a real tmpfs filled to the last block makes keeping a torn tail fail with ENOSPC.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from toolswap import ToolResultExternalizer
from toolswap.verify import verify_session

CHILD = """
import json, resource, signal, sys
from toolswap import ArtifactWriteError, ToolResultExternalizer
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    ToolResultExternalizer(sys.argv[1]).externalize("small output\\n" * 20, "bash", exit_code=4)
except ArtifactWriteError as exc:
    print(json.dumps({"error": str(exc), "preview": exc.preview, "exit_code": exc.exit_code}))
"""


def test_a_manifest_append_that_fails_leaves_no_final_name_and_no_partial_record(
    tmp_path: Path,
) -> None:
    session = tmp_path / "s1"
    ext = ToolResultExternalizer(session)
    for i in range(5):
        ext.externalize(f"earlier output {i}\n" * 100, "bash")
    manifest = session / "manifest.jsonl"
    before = manifest.read_bytes()
    # The artifact (260 bytes) fits under the limit; the manifest's next record does not.
    limit = len(before) + 200

    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(session), str(limit)],
        capture_output=True,
        check=False,
    )

    assert child.returncode == 0, child.stderr.decode()
    result = json.loads(child.stdout)
    assert "could not be saved" in result["error"]
    assert result["exit_code"] == 4
    assert "small output" in result["preview"]
    assert manifest.read_bytes() == before  # nothing half-written
    names = sorted(os.listdir(session / "tool-results"))
    assert names == [f"tool_result_00{i}.txt" for i in range(1, 6)]
    assert not [n for n in os.listdir(session) if ".torn-" in n]
    assert all(f.kind == "ok" for f in verify_session(ToolResultExternalizer(session).session))
    nxt = ToolResultExternalizer(session).externalize("after\n", "bash").artifact
    assert nxt.filename == "tool_result_006.txt"


FILL_AND_APPEND = """
import os, sys
from toolswap import ChainLogError
from toolswap.chainlog import ChainLog
log = ChainLog(__import__("pathlib").Path(sys.argv[1]), "s1")
log.append({"event": "first"}, crash_prefix="manifest")
with open(sys.argv[1], "ab") as f:
    f.write(b'{"torn": "record without its newline')
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while True:
        os.write(fd, b"x" * 512)
except OSError:
    os.close(fd)
try:
    log.append({"event": "second"}, crash_prefix="manifest")
except ChainLogError as exc:
    print("refused:", exc)
print(sorted(os.listdir(os.path.dirname(sys.argv[1]))))
"""


def test_a_torn_tail_that_cannot_be_kept_on_a_full_disk_is_left_in_place_with_no_empty_copy(
    tmp_path: Path, full_disk: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    mnt = tmp_path / "mnt"
    child = tmp_path / "child.py"
    child.write_text(FILL_AND_APPEND, encoding="utf-8")
    script = f"{sys.executable} {child} {mnt}/log.jsonl {mnt}/filler; cat {mnt}/log.jsonl"

    proc = full_disk(mnt, script, size_kib=256)

    out = proc.stdout.decode()
    assert "refused: log.jsonl: cannot keep the torn final record" in out, proc.stderr.decode()
    assert "['filler', 'log.jsonl']" in out  # no .torn-* copy, empty or not
    assert out.rstrip().endswith('{"torn": "record without its newline')
