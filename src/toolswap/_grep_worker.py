"""The search toolswap runs when no GNU grep is installed: the same output as
``grep -a -n -b`` (``-o`` and ``-m``/``-C`` included) from Python's ``re``, in a process of
its own that the caller kills at its deadline.

Run as a script (``python -I -S _grep_worker.py [-i] [-F] [-o] [-m N] [-C N] [-T SECONDS]
-e PATTERN``) with the artifact on standard input. It imports nothing from toolswap.
Python's ``re`` backtracks, so a hostile pattern can run long here: that is why it never
runs in the caller's process, and why ``-T`` limits its CPU time, so that it dies even if
the caller dies before it can kill it.
"""

from __future__ import annotations

import re
import resource
import sys
from collections import deque

__all__ = ["main"]


def main(argv: list[str]) -> int:
    ignore_case = fixed = only = False
    max_count = -1
    context = 0
    pattern: str | None = None
    args = iter(argv)
    for arg in args:
        if arg == "-i":
            ignore_case = True
        elif arg == "-F":
            fixed = True
        elif arg == "-o":
            only = True
        elif arg == "-m":
            max_count = int(next(args))
        elif arg == "-C":
            context = int(next(args))
        elif arg == "-e":
            pattern = next(args)
        elif arg == "-T":
            seconds = int(next(args))
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    if pattern is None:
        print("_grep_worker: no pattern (-e)", file=sys.stderr)
        return 2
    raw = pattern.encode("utf-8", "surrogateescape")
    try:
        regex = re.compile(re.escape(raw) if fixed else raw, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        print(f"_grep_worker: {exc}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    before: deque[tuple[int, int, bytes]] = deque(maxlen=context or 1)
    after_left = 0
    count = 0
    offset = 0
    for number, line in enumerate(sys.stdin.buffer, 1):
        body = line[:-1] if line.endswith(b"\n") else line
        found = regex.search(body) if max_count < 0 or count < max_count else None
        if found is not None:
            count += 1
            if only:
                for hit in regex.finditer(body):
                    if hit.end() > hit.start():
                        out.write(b"%d:%d:%s\n" % (number, offset + hit.start(), hit.group()))
            else:
                if context:
                    for n, o, text in before:
                        out.write(b"%d-%d-%s\n" % (n, o, text))
                before.clear()
                out.write(b"%d:%d:%s\n" % (number, offset, body))
                after_left = context
        elif after_left:
            out.write(b"%d-%d-%s\n" % (number, offset, body))
            after_left -= 1
        elif context:
            before.append((number, offset, body))
        if max_count >= 0 and count >= max_count and not after_left:
            break
        offset += len(line)
    out.flush()
    return 0 if count else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
