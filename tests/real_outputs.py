"""Failing outputs of real programs, produced here at test time, each with its failure in
the middle of a long output (a CI job's steps before and after it).

Shared by tests/test_salience.py and bench/bench_pointer.py. A case whose programs are not
on this machine produces None (the caller skips it). ``wanted`` lists the lines the pointer
must show: the first line of the failure reason (and, for tracebacks, their last line).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REAL_CASES", "Produced", "RealCase"]


@dataclass(frozen=True, slots=True)
class Produced:
    output: bytes
    wanted: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RealCase:
    name: str
    programs: tuple[str, ...]
    setup: Callable[[Path], None]
    script: str
    wanted: tuple[str, ...]

    def produce(self, work: Path) -> Produced | None:
        if any(shutil.which(p) is None for p in ("bash", *self.programs)):
            return None
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        self.setup(work)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(work),
            "LC_ALL": "C.UTF-8",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
            "npm_config_cache": str(work / ".npm"),
            "npm_config_update_notifier": "false",
        }
        proc = subprocess.run(
            ["bash", "-c", f"{STEPS}\n{self.script}"],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        )
        return Produced(output=proc.stdout, wanted=self.wanted)


# Long, benign CI noise around each failure, with the words that fool a keyword scan.
STEPS = r"""
noise() {
  for i in $(seq 1 "$1"); do
    printf '  CC      src/lib/module_%04d.o\n' "$i"
    if [ $((i % 97)) -eq 0 ]; then
      printf 'compiling src/error_handling_%d.c with -Werror=implicit\n' "$i"
      printf 'summary: 0 errors, 0 failures, %d passed\n' "$i"
    fi
  done
}
"""


def _nothing(_: Path) -> None:
    pass


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def _c_project(work: Path) -> None:
    noisy = "\n".join(f"    int unused_{i} = {i};" for i in range(150))
    _write(work / "warn.c", f"int warn(void) {{\n{noisy}\n    return 0;\n}}\n")
    _write(work / "bad.c", "int bad(void) {\n    return undeclared_thing + 1;\n}\n")
    _write(
        work / "main.c",
        "void missing_function(void);\nint main(void) { missing_function(); return 0; }\n",
    )
    _write(
        work / "Makefile",
        "CFLAGS = -Wall -fdiagnostics-color=always\n"
        "all: warn.o bad.o app\n"
        "app: main.o\n\t$(CC) -o $@ main.o\n",
    )


def _c_link(work: Path) -> None:
    _write(work / "main.c", "int main(void) { return 0; }\n")


def _make_rule(work: Path) -> None:
    _write(work / "Makefile", "all: prog.o\nprog.o: prog.c missing_config.h\n\tcc -c prog.c\n")
    _write(work / "prog.c", "int x;\n")


def _python_traceback(work: Path) -> None:
    _write(
        work / "job.py",
        "import logging, sys, traceback\n"
        "logging.basicConfig(\n"
        "    stream=sys.stdout, level=logging.INFO, format='%(levelname)s %(message)s'\n"
        ")\n"
        "def ratio(a, b):\n    return a / b\n"
        "for i in range(700):\n"
        "    logging.info('processed batch %d of 1400 (%d records)', i, i * 31)\n"
        "try:\n    ratio(1, 0)\nexcept Exception:\n    traceback.print_exc(file=sys.stdout)\n"
        "for i in range(700, 1400):\n"
        "    logging.info('processed batch %d of 1400 (%d records)', i, i * 31)\n",
    )


def _pytest_suite(work: Path) -> None:
    _write(
        work / "test_mod.py",
        "import pytest\n\n"
        "@pytest.mark.parametrize('n', range(300))\n"
        "def test_square(n):\n    assert n * n >= 0\n\n"
        "def test_parse_header():\n    assert 'content-length' == 'content-type'\n",
    )


def _unittest_suite(work: Path) -> None:
    cases = "\n".join(
        f"    def test_{i:03d}(self):\n        self.assertEqual({i}, {i})" for i in range(400)
    )
    _write(
        work / "test_units.py",
        "import unittest\n\nclass T(unittest.TestCase):\n"
        f"{cases}\n"
        "    def test_zzz_checksum(self):\n        self.assertEqual('a1b2', 'a1b3')\n",
    )


def _node_crash(work: Path) -> None:
    _write(
        work / "app.js",
        "for (let i = 0; i < 600; i++)\n"
        "  console.log(`[webpack] emitted chunk ${i} (${i * 13} kB)`);\n"
        "const config = undefined;\n"
        "console.log(config.output.path);\n",
    )


def _npm_missing(work: Path) -> None:
    _write(work / "package.json", '{"name": "app", "version": "1.0.0", "scripts": {}}\n')


def _git_conflict(work: Path) -> None:
    pass


def _tar_missing(work: Path) -> None:
    for i in range(900):
        _write(work / "data" / f"part_{i:04d}.txt", f"{i}\n")


def _find_loop(work: Path) -> None:
    for i in range(600):
        (work / "tree" / f"dir_{i:03d}").mkdir(parents=True)
    (work / "tree" / "dir_300" / "back").symlink_to("..")


def _ls_missing(work: Path) -> None:
    for i in range(400):
        _write(work / "a" / f"file_{i:03d}.log", "x")
        _write(work / "b" / f"file_{i:03d}.log", "x")


def _sqlite_script(work: Path) -> None:
    rows = "\n".join(f"insert into t values ({i}, 'row {i}');" for i in range(600))
    _write(
        work / "load.sql",
        "create table t(id integer primary key, name text);\n"
        f"{rows}\n"
        "select * from t where id < 400;\n"
        "insert into t values (5, 'duplicate');\n"
        "select * from t where id >= 400;\n",
    )


def _bash_trace(work: Path) -> None:
    _write(work / "hooks" / "post-install.sh", "#!/bin/sh\necho installed\n", mode=0o644)


def _sha_check(work: Path) -> None:
    lines = []
    for i in range(900):
        name = f"blob_{i:04d}.bin"
        _write(work / name, f"content {i}\n")
        lines.append(name)
    _write(work / "names.txt", "\n".join(lines) + "\n")


def _perl_die(work: Path) -> None:
    _write(
        work / "report.pl",
        "use strict; use warnings;\n"
        'for my $i (0..599) { print "row $i: total=" . ($i * 7) . "\\n"; }\n'
        "my %h; my $count = 0;\n"
        'my $avg = 100 / $count;\nprint "avg $avg\\n";\n',
    )


def _prove_suite(work: Path) -> None:
    oks = "".join(f'print "ok {i} - item {i}\\n";\n' for i in range(1, 301))
    _write(
        work / "t" / "items.t",
        f'print "1..301\\n";\n{oks}print "not ok 301 - totals balance\\n";\nexit 1;\n',
    )


def _json_line(work: Path) -> None:
    _write(
        work / "dump.py",
        "import json\n"
        "items = [{'id': i, 'status': 'ok', 'detail': 'x' * 40} for i in range(12000)]\n"
        "items[7000] = {\n"
        "    'id': 7000, 'status': 'error', 'detail': 'disk quota exceeded on /var/lib/data'\n"
        "}\n"
        "print(json.dumps({'items': items}))\n",
    )


def _timeout(work: Path) -> None:
    _write(
        work / "run.py",
        "import subprocess\nsubprocess.run(['sleep', '5'], timeout=0.2)\n",
    )


def _long_job(work: Path) -> None:
    _write(
        work / "job.py",
        "import subprocess, sys\n"
        "out = sys.stdout\n"
        "line = 'INFO request handled path=/api/v1/items/%07d status=200 duration_ms=%03d\\n'\n"
        "for i in range(260_000):\n    out.write(line % (i, i % 997))\n"
        "out.flush()\n"
        "try:\n    subprocess.run(['sleep', '5'], timeout=0.2)\n"
        "except subprocess.TimeoutExpired as exc:\n    print(f'ERROR job step failed: {exc}')\n"
        "for i in range(260_000, 280_000):\n    out.write(line % (i, i % 997))\n",
    )


def _progress(work: Path) -> None:
    _write(
        work / "fetch.py",
        "import sys\n"
        "for f in range(40):\n"
        "    for p in range(0, 101, 5):\n"
        "        sys.stdout.write(f'\\rdownloading layer {f}: {p}%')\n"
        "    sys.stdout.write('\\n')\n"
        "print('ERROR: layer 41 digest mismatch: expected sha256:aa11 got sha256:bb22')\n",
    )


REAL_CASES: tuple[RealCase, ...] = (
    RealCase(
        "gcc-make-k",
        ("gcc", "make"),
        _c_project,
        "noise 700\nmake -k CC=gcc 2>&1\nnoise 700",
        ("bad.c:2:12: error: ‘undeclared_thing’ undeclared", "undefined reference to"),
    ),
    RealCase(
        "ld-missing-lib",
        ("gcc",),
        _c_link,
        "noise 800\ngcc -o app main.c -lnonexistentlib 2>&1\nnoise 800",
        ("cannot find -lnonexistentlib",),
    ),
    RealCase(
        "make-no-rule",
        ("make",),
        _make_rule,
        "noise 800\nmake 2>&1\nnoise 800",
        ("No rule to make target 'missing_config.h'",),
    ),
    RealCase(
        "python-traceback",
        ("python3",),
        _python_traceback,
        "python3 job.py 2>&1\nnoise 300",
        ("Traceback (most recent call last):", "ZeroDivisionError: division by zero"),
    ),
    RealCase(
        "pytest-then-more-steps",
        ("python3",),
        _pytest_suite,
        "noise 300\npython3 -m pytest -q -p no:cacheprovider test_mod.py 2>&1\nnoise 900",
        ("assert 'content-length' == 'content-type'",),
    ),
    RealCase(
        "unittest-then-more-steps",
        ("python3",),
        _unittest_suite,
        "python3 -m unittest -v test_units 2>&1\nnoise 900",
        ("FAIL: test_zzz_checksum",),
    ),
    RealCase(
        "node-typeerror",
        ("node",),
        _node_crash,
        "noise 200\nnode app.js 2>&1\nnoise 900",
        ("TypeError: Cannot read properties of undefined",),
    ),
    RealCase(
        "npm-missing-script",
        ("npm",),
        _npm_missing,
        "noise 800\nnpm run build 2>&1 | grep -v 'complete log'\nnoise 800",
        ('Missing script: "build"',),
    ),
    RealCase(
        "git-merge-conflict",
        ("git",),
        _git_conflict,
        "git init -q repo && cd repo && printf 'a\\n' > f.txt && git add f.txt && "
        "git commit -qm base && git checkout -qb topic && printf 'b\\n' > f.txt && "
        "git commit -qam topic && git checkout -q - && printf 'c\\n' > f.txt && "
        "git commit -qam main\nnoise 800\ngit merge topic 2>&1\nnoise 800",
        ("CONFLICT (content): Merge conflict in f.txt",),
    ),
    RealCase(
        "tar-missing-member",
        ("tar",),
        _tar_missing,
        "tar -cvf out.tar data missing_release_notes.txt 2>&1\nnoise 600",
        ("missing_release_notes.txt: Cannot stat: No such file or directory",),
    ),
    RealCase(
        "find-symlink-loop",
        ("find",),
        _find_loop,
        "noise 300\nfind -L tree 2>&1 | sort\nnoise 600",
        ("File system loop detected",),
    ),
    RealCase(
        "ls-missing-dir",
        ("ls",),
        _ls_missing,
        "ls -l a missing_dir b 2>&1\nnoise 300",
        ("ls: cannot access 'missing_dir': No such file or directory",),
    ),
    RealCase(
        "sqlite-constraint",
        ("sqlite3",),
        _sqlite_script,
        "noise 300\nsqlite3 db.sqlite < load.sql 2>&1\nnoise 900",
        ("UNIQUE constraint failed: t.id",),
    ),
    RealCase(
        "bash-x-permission-denied",
        (),
        _bash_trace,
        "bash -x -c 'for i in $(seq 1 700); do : step $i; done; ./hooks/post-install.sh; "
        "for i in $(seq 1 700); do : cleanup $i; done' 2>&1",
        ("./hooks/post-install.sh: Permission denied",),
    ),
    RealCase(
        "bash-command-not-found",
        (),
        _nothing,
        "noise 800\nconfigure_runtime_paths --prefix=/opt 2>&1\nnoise 800",
        ("configure_runtime_paths: command not found",),
    ),
    RealCase(
        "bash-killed",
        ("sleep",),
        _nothing,
        "noise 800\nsleep 30 & kill -9 $!; wait\nnoise 800",
        ("Killed",),
    ),
    RealCase(
        "sha256sum-mismatch",
        ("sha256sum",),
        _sha_check,
        "sha256sum $(cat names.txt) > SUMS && echo tampered >> blob_0456.bin && "
        "sha256sum -c SUMS 2>&1\nnoise 600",
        ("blob_0456.bin: FAILED",),
    ),
    RealCase(
        "perl-division-by-zero",
        ("perl",),
        _perl_die,
        "noise 300\nperl report.pl 2>&1\nnoise 900",
        ("Illegal division by zero at report.pl line 4.",),
    ),
    RealCase(
        "prove-dubious",
        ("prove", "perl"),
        _prove_suite,
        "noise 600\nprove -v t/ 2>&1\nnoise 600",
        ("not ok 301 - totals balance",),
    ),
    RealCase(
        "json-single-line",
        ("python3",),
        _json_line,
        "python3 dump.py",
        ('"status": "error", "detail": "disk quota exceeded on /var/lib/data"',),
    ),
    RealCase(
        "python-timeout",
        ("python3", "sleep"),
        _timeout,
        "noise 700\npython3 run.py 2>&1\nnoise 700",
        ("subprocess.TimeoutExpired: Command '['sleep', '5']' timed out",),
    ),
    RealCase(
        "make-k-linker-error-200k-before-the-end",
        ("gcc", "make"),
        _c_project,
        "noise 3000\nmake -k CC=gcc 2>&1\nnoise 8000",
        ("undefined reference to",),
    ),
    RealCase(
        "bash-x-permission-denied-in-3mib-trace",
        (),
        _bash_trace,
        "bash -x -c 'for i in $(seq 1 60000); do : provision step $i; done; "
        "./hooks/post-install.sh; for i in $(seq 1 60000); do : cleanup $i; done' 2>&1",
        ("./hooks/post-install.sh: Permission denied",),
    ),
    RealCase(
        "find-loop-in-500k-of-build-output",
        ("find",),
        _find_loop,
        "noise 20000\nfind -L tree 2>&1 | sort\nnoise 600",
        ("File system loop detected",),
    ),
    RealCase(
        "timeout-at-20mib-of-job-log",
        ("python3", "sleep"),
        _long_job,
        "python3 job.py 2>&1",
        ("ERROR job step failed: Command '['sleep', '5']' timed out",),
    ),
    RealCase(
        "progress-then-digest-mismatch",
        ("python3",),
        _progress,
        "noise 300\npython3 fetch.py\nnoise 900",
        ("ERROR: layer 41 digest mismatch",),
    ),
)
