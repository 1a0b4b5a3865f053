"""``toolswap demo``: an offline, scripted agent session over real data on this machine.

1. The agent greps the installed Python standard library: megabytes of output.
2. toolswap spills it to an artifact; the context gets a pointer of at most 32 KiB.
3. The agent finds a needle from the middle with a page fault (grep inside the artifact).
4. Memory receives the thin reference: no body, no preview.
5. A fresh process (a restart) reads the artifact by its source ID alone.

Later steps (retention, cleanup, MCP) are added by the modules that provide them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from .externalizer import ToolResultExternalizer
from .pointer import human_size

__all__ = ["run_demo"]


def _say(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}")


def run_demo(home: Path | None = None) -> None:
    """Run the scripted session; artifacts go under ``home`` (default: a new temp dir)."""
    home = home or Path(tempfile.mkdtemp(prefix="toolswap-demo-"))
    os.environ["TOOLSWAP_HOME"] = str(home)
    ext = ToolResultExternalizer.open("demo-session", workspace="demo")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    argv = ["grep", "-rn", "--include=*.py", "raise ", str(stdlib)]

    _say("1. The agent runs a tool with a huge output")
    print("$ " + " ".join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    with proc.stdout:
        result = ext.process(proc.stdout, "bash", argv=argv, exit_code=proc.wait)
    proc.wait()
    if result.artifact is None:
        print("(the output was small enough to stay inline; nothing to demonstrate)")
        return
    art = result.artifact
    pointer_size = len(result.context_text.encode())
    print(
        f"output: {human_size(art.byte_size)}, {art.line_count:,} lines -> pointer of "
        f"{human_size(pointer_size)} in the context "
        f"({100 * (1 - pointer_size / max(art.byte_size, 1)):.1f}% of the context saved)"
    )

    _say("2. What the model sees (the pointer, abridged)")
    lines = result.context_text.splitlines()
    for line in lines[:7]:
        print("  " + line[:160])
    print("  ...")
    marker = next((i for i, ln in enumerate(lines) if ln.startswith("--- omitted")), None)
    if marker is not None:
        for line in lines[marker : marker + 6]:
            print("  " + line[:160])
        print("  ...")
    for line in lines[-3:]:
        print("  " + line[:160])

    _say("3. Page fault: grep inside the artifact for a needle from the middle")
    needle = "RecursionError"
    found = ext.grep(art.source_id, needle, max_matches=3)
    print(f"grep_artifact({needle!r}) -> {len(found.matches)} match(es)")
    for match in found.matches:
        print(f"  line {match.line_no}: {match.text[:150]}")
    if found.matches:
        first = found.matches[0].line_no
        page = ext.read_lines(art.source_id, offset=max(first - 2, 0), limit=3)
        print(f"read_artifact(offset={max(first - 2, 0)}, limit=3), verified against SHA-256:")
        for line in page.lines:
            print("  " + line[:150])

    _say("4. Memory keeps the thin reference (no body, no preview)")
    print(json.dumps(art.for_memory().to_dict(), indent=2))

    _say("5. Restart: a fresh process reads the artifact by its source ID alone")
    cmd = [sys.executable, "-m", "toolswap", "read", art.source_id, "--offset", "0", "--limit", "2"]
    print("$ toolswap read " + art.source_id + " --offset 0 --limit 2")
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=False)
    for line in done.stdout.splitlines():
        print("  " + line[:150])
    if done.returncode != 0:
        raise SystemExit(f"restart read failed: {done.stderr.strip()}")

    print(f"\nDemo data kept under {home}")
