"""Several real processes externalizing into one session at the same time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from toolswap import ToolResultExternalizer
from toolswap.session import Session
from toolswap.verify import FindingKind, verify_session

PROCESSES = 8
PER_PROCESS = 50

CHILD = """
import json, sys
from toolswap import ToolResultExternalizer

proc = int(sys.argv[2])
sys.stdin.read(1)  # start together: the parent writes once every child is running
ext = ToolResultExternalizer(sys.argv[1])
out = []
for i in range(int(sys.argv[3])):
    # Sizes from a few bytes to past the worker-thread threshold.
    body = (f"process {proc} output {i}\\n" * (1 + (proc * 7 + i * 13) % 6000)).encode()
    result = ext.externalize(body, f"tool{proc}", argv=["echo", str(i)], exit_code=i % 3)
    out.append([i, result.artifact.source_id])
print(json.dumps(out))
"""


def _body(proc: int, i: int) -> bytes:
    return (f"process {proc} output {i}\n" * (1 + (proc * 7 + i * 13) % 6000)).encode()


def test_eight_processes_writing_one_session_get_distinct_names_that_all_verify(
    tmp_path: Path,
) -> None:
    session_dir = tmp_path / "shared"
    Session.at(session_dir)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(session_dir), str(proc), str(PER_PROCESS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for proc in range(PROCESSES)
    ]
    for child in children:
        assert child.stdin is not None
        child.stdin.write("g")
        child.stdin.close()
    results: dict[tuple[int, int], str] = {}
    for proc, child in enumerate(children):
        assert child.stdout is not None
        stdout = child.stdout.read()
        child.stdout.close()
        assert child.wait() == 0
        for i, source_id in json.loads(stdout):
            results[(proc, i)] = source_id

    assert len(results) == PROCESSES * PER_PROCESS
    assert len(set(results.values())) == PROCESSES * PER_PROCESS
    ext = ToolResultExternalizer(session_dir)
    names = sorted(a.filename for a in ext.list_artifacts())
    assert names == sorted(
        f"tool_result_{n:03d}.txt" for n in range(1, PROCESSES * PER_PROCESS + 1)
    )
    for (proc, i), source_id in results.items():
        artifact = ext.get_artifact(source_id)
        assert artifact.source_tool == f"tool{proc}"
        assert artifact.argv == ("echo", str(i))
        assert artifact.path.read_bytes() == _body(proc, i)
    findings = verify_session(ext.session)
    assert {f.kind for f in findings} == {FindingKind.OK}
    assert len(findings) == PROCESSES * PER_PROCESS
