"""Run every benchmark (bench/bench_*.py) in its own process and print their reports.

Each benchmark prints ratios against the physical floor measured in the same run.
Data goes to bench/.data (ignored by git); set TOOLSWAP_BENCH_QUICK=1 for small sizes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    scripts = sorted(here.glob("bench_*.py"))
    if len(sys.argv) > 1:
        scripts = [s for s in scripts if any(arg in s.name for arg in sys.argv[1:])]
    failed = 0
    for script in scripts:
        print(f"\n=== {script.name} ===", flush=True)
        code = subprocess.call([sys.executable, str(script)])
        if code:
            print(f"!!! {script.name} exited with {code}", flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
