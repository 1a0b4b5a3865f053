"""The floor for a stdio MCP proxy: start a command and copy bytes both ways, one blocking
thread a direction, looking at nothing (what any relay between two pipes must do)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading


def _copy(src: int, dst: int) -> None:
    while data := os.read(src, 1 << 20):
        view = memoryview(data)
        while view:
            view = view[os.write(dst, view) :]


def main() -> int:
    proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    back = threading.Thread(target=_copy, args=(proc.stdout.fileno(), 1), daemon=True)
    back.start()
    with contextlib.suppress(BrokenPipeError):
        _copy(0, proc.stdin.fileno())
    proc.stdin.close()
    code = proc.wait()
    back.join()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
