"""More failing outputs of real programs run here: compilers (gcc, g++, rustc, javac,
maven), test runners (pytest, unittest, node --test, cargo test), package managers (pip,
npm), sanitizers and debuggers (AddressSanitizer, UBSan, valgrind, gdb), shells, and CI
logs framed as GitHub Actions and Travis print them, each failure in the middle of a long
output among noise that looks like failures (warnings, deprecations, retried downloads).

Three sets:

- ``TUNING_CASES``: written before the ranking was changed, looked at while the ranking and
  the budget sharing were developed.
- ``HELD_OUT_CASES``: written at the same time, never looked at while developing (only
  checked that the failure is in the raw output), then run once: 15/17 found at 8 KiB,
  16/17 at 32 KiB. Its two misses were then looked at (a shell error with no failure word,
  called quiet; two failing tests whose lines share a template, listed once as ``+1
  similar``), and the first led to two general rules (the shell's ``x.sh: line N:``
  shape; a command that exited non-zero is never called quiet), so it is held out no
  longer, strictly.
- ``HELD_OUT_LATE_CASES``: written after every change, run once at the end: 10/13 found at
  8 KiB, 12/13 at 32 KiB. Its three misses were then looked at (lines with no failure word:
  ``gzip: stdin: not in gzip format``, dash's ``x.sh: 3: X: parameter not set``,
  valgrind's ``definitely lost``), and so was the earlier set's second (two panics listed
  once), which led to general rules (a program's ``prog: subject: message`` and the
  shell's ``x.sh: N:`` shapes, ``lost``, a few failures alike each listed), so it is held
  out no longer either. ``real_outputs_fresh.HELD_OUT_FRESH_CASES`` was written before
  those rules.

``bench/bench_pointer.py`` reports each set apart.

``wanted`` holds the first line of the failure reason as a person would mark it (and, for
some, the line that names the error beside it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from real_outputs import RealCase

__all__ = ["HELD_OUT_CASES", "HELD_OUT_LATE_CASES", "TUNING_CASES"]

# Noise of several kinds, shared by both sets, and two CI framings.
PRELUDE = (Path(__file__).parent / "real_outputs_ci.sh").read_text(encoding="utf-8")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def _case(
    name: str,
    programs: tuple[str, ...],
    setup: Callable[[Path], None],
    script: str,
    wanted: tuple[str, ...],
) -> RealCase:
    return RealCase(name, programs, setup, f"{PRELUDE}\n{script}", wanted)


# -- the tuning set ------------------------------------------------------------------


def _gxx_template(work: Path) -> None:
    noisy = "\n".join(f"int helper_{i}(int unused_{i}) {{ return 0; }}" for i in range(60))
    _write(work / "warn.cpp", noisy + "\n")
    _write(
        work / "main.cpp",
        "#include <string>\n#include <vector>\n"
        "struct Point { int x; };\n"
        "template <typename T> T total(const std::vector<T>& v) {\n"
        "  T sum{};\n  for (const auto& e : v) sum = sum + e;\n  return sum;\n}\n"
        "int main() { std::vector<Point> ps{{1}, {2}}; return total(ps).x; }\n",
    )
    _write(
        work / "Makefile",
        "CXXFLAGS = -Wall -Wextra\nall: warn.o main.o\n",
    )


def _cargo_project(work: Path, lib: str, name: str = "app") -> None:
    _write(
        work / "Cargo.toml",
        f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    )
    _write(work / "src" / "lib.rs", lib)


def _cargo_borrow(work: Path) -> None:
    warnings = "\n".join(f"fn unused_helper_{i}(x: i32) -> i32 {{ x }}" for i in range(40))
    _cargo_project(
        work,
        warnings + "\npub fn grow(v: &mut Vec<i32>) -> i32 {\n"
        "    let first = &v[0];\n    v.push(4);\n    *first\n}\n",
    )


def _cargo_test_panic(work: Path) -> None:
    tests = "\n".join(
        f"    #[test]\n    fn adds_{i:03d}() {{ assert_eq!(super::add({i}, 1), {i + 1}); }}"
        for i in range(200)
    )
    _cargo_project(
        work,
        "pub fn add(a: i32, b: i32) -> i32 { a + b }\n"
        "pub fn parse_port(s: &str) -> u16 { s.parse().unwrap_or(0) }\n"
        "#[cfg(test)]\nmod tests {\n"
        f"{tests}\n"
        "    #[test]\n    fn parses_port_with_whitespace() {\n"
        '        assert_eq!(super::parse_port(" 8080"), 8080, "port must be trimmed");\n'
        "    }\n}\n",
    )


def _javac_symbol(work: Path) -> None:
    for i in range(30):
        _write(
            work / "src" / f"Util{i}.java",
            f"public class Util{i} {{ @Deprecated public static int v() {{ return {i}; }} }}\n",
        )
    _write(
        work / "src" / "Main.java",
        "import java.util.List;\npublic class Main {\n"
        "  public static void main(String[] a) {\n"
        "    List<String> xs = new ArrayList<>();\n    System.out.println(Util3.v());\n  }\n}\n",
    )


def _node_test(work: Path) -> None:
    cases = "\n".join(
        f"test('formats value {i}', () => assert.strictEqual(String({i}), '{i}'));"
        for i in range(150)
    )
    _write(
        work / "fmt.test.js",
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        f"{cases}\n"
        "test('parses ISO dates', () => {\n"
        "  assert.strictEqual(new Date('2024-02-30').getMonth(), 1);\n});\n",
    )


def _asan_overflow(work: Path) -> None:
    _write(
        work / "buf.c",
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
        "int main(void) {\n"
        '  for (int i = 0; i < 400; i++) printf("processed record %d ok\\n", i);\n'
        "  fflush(stdout);\n"
        '  char *name = malloc(8);\n  strcpy(name, "overflowing");\n'
        '  printf("%s\\n", name);\n  free(name);\n  return 0;\n}\n',
    )


def _requirements(work: Path) -> None:
    _write(work / "requirements.txt", "requests>=2.0\nnumpy==1.26.4\n")


def _gha_make_check(work: Path) -> None:
    _write(
        work / "checks.py",
        "import sys\n"
        "for i in range(300):\n"
        "    print(f'check {i:03d}: configuration key section_{i}.enabled ... ok')\n"
        "print('check 300: configuration key cache.max_size ... FAILED')\n"
        "print('  expected an integer, got \\'64MB\\' (config/app.toml, line 88)')\n"
        "for i in range(301, 420):\n"
        "    print(f'check {i:03d}: configuration key section_{i}.enabled ... ok')\n"
        "print('1 of 420 checks failed')\n"
        "sys.exit(2)\n",
    )


def _valgrind(work: Path) -> None:
    _write(
        work / "vg.c",
        "#include <stdio.h>\n#include <stdlib.h>\n"
        "int main(void) {\n"
        '  for (int i = 0; i < 300; i++) printf("step %d done\\n", i);\n'
        "  int *a = malloc(10 * sizeof(int));\n"
        "  int s = a[10];\n  free(a);\n  return s > 100;\n}\n",
    )


def _cmake_missing(work: Path) -> None:
    _write(
        work / "CMakeLists.txt",
        "cmake_minimum_required(VERSION 3.10)\nproject(app C)\n"
        "find_package(NonExistentWidgets 2.1 REQUIRED)\nadd_executable(app main.c)\n",
    )
    _write(work / "main.c", "int main(void) { return 0; }\n")


def _unittest_error(work: Path) -> None:
    cases = "\n".join(
        f"    def test_{i:03d}(self):\n        self.assertTrue({i} >= 0)" for i in range(300)
    )
    _write(
        work / "test_loader.py",
        "import json, unittest\n\nclass Loader(unittest.TestCase):\n"
        f"{cases}\n"
        "    def test_loads_settings(self):\n"
        "        json.loads('{\"cache\": 64,}')\n",
    )


def _mvn_compile(work: Path) -> None:
    plugins = "".join(
        "<plugin><groupId>org.apache.maven.plugins</groupId>"
        f"<artifactId>maven-{name}-plugin</artifactId><version>{version}</version></plugin>"
        for name, version in (("resources", "3.3.1"), ("compiler", "3.13.0"))
    )
    _write(
        work / "pom.xml",
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>app</groupId><artifactId>app</artifactId><version>1.0</version>"
        "<properties><maven.compiler.source>17</maven.compiler.source>"
        "<maven.compiler.target>17</maven.compiler.target>"
        "<project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>"
        f"<build><plugins>{plugins}</plugins></build></project>\n",
    )
    for i in range(20):
        _write(
            work / "src/main/java/app" / f"Part{i}.java",
            f"package app;\npublic class Part{i} {{ public int id() {{ return {i}; }} }}\n",
        )
    _write(
        work / "src/main/java/app/Calc.java",
        "package app;\npublic class Calc {\n"
        "  public static int add(int a, int b) { return a + b + offset; }\n}\n",
    )


def _npm_offline(work: Path) -> None:
    _write(work / "package.json", '{"name": "app", "version": "1.0.0"}\n')


def _bash_set_e(work: Path) -> None:
    _write(
        work / "release.sh",
        "set -euo pipefail\n"
        'for i in $(seq 1 400); do echo "packaging asset $i: assets/img_$i.png -> dist/"; done\n'
        "cp build/app-release.tar.gz dist/\n"
        "echo uploaded\n",
    )


def _maven_repo() -> str:
    return os.path.expanduser("~/.m2/repository")


def _rust_env() -> str:
    """The toolchain's homes, as the caller's environment has them (the cases run with
    ``HOME`` in their work directory)."""
    rustup = os.environ.get("RUSTUP_HOME", os.path.expanduser("~/.rustup"))
    cargo = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    return f"export RUSTUP_HOME='{rustup}' CARGO_HOME='{cargo}'\n"


TUNING_CASES: tuple[RealCase, ...] = (
    _case(
        "gxx-template-instantiation",
        ("g++", "make"),
        _gxx_template,
        "noise 600\nmake -k CXX=g++ 2>&1\nnoise 600",
        ("error: no match for ‘operator+’",),
    ),
    _case(
        "cargo-build-borrow-checker",
        ("cargo",),
        _cargo_borrow,
        _rust_env() + "pipnoise 300\ncargo build --offline --quiet 2>&1\nnoise 500",
        ("error[E0502]: cannot borrow `*v` as mutable",),
    ),
    _case(
        "cargo-test-one-panics",
        ("cargo",),
        _cargo_test_panic,
        _rust_env() + "noise 300\ncargo test --offline --quiet -- --test-threads=1 2>&1\nnoise 900",
        (
            "thread 'tests::parses_port_with_whitespace'",
            "assertion `left == right` failed: port must be trimmed",
        ),
    ),
    _case(
        "javac-cannot-find-symbol",
        ("javac",),
        _javac_symbol,
        "noise 500\njavac -Xlint:all -d out src/*.java 2>&1\nnoise 700",
        ("error: cannot find symbol",),
    ),
    _case(
        "node-test-runner-one-fails",
        ("node",),
        _node_test,
        "npmnoise 150\nnode --test --test-reporter=tap 2>&1\nnpmnoise 200",
        ("not ok 151 - parses ISO dates",),
    ),
    _case(
        "asan-heap-buffer-overflow",
        ("gcc",),
        _asan_overflow,
        "noise 300\ngcc -g -fsanitize=address -o buf buf.c 2>&1 && ./buf 2>&1\nnoise 800",
        ("ERROR: AddressSanitizer: heap-buffer-overflow",),
    ),
    _case(
        "pip-no-index",
        ("python3",),
        _requirements,
        "pipnoise 300\npython3 -m pip install --no-index --disable-pip-version-check "
        "-r requirements.txt 2>&1\npipnoise 200",
        ("ERROR: Could not find a version that satisfies the requirement requests",),
    ),
    _case(
        "github-actions-config-check",
        ("python3", "awk"),
        _gha_make_check,
        "{ gha_step 'pip install -r requirements.txt' pipnoise 200 && "
        "gha_step 'python checks.py' python3 checks.py; gha_post 150; } | stamp",
        ("check 300: configuration key cache.max_size ... FAILED",),
    ),
    _case(
        "valgrind-invalid-read",
        ("gcc", "valgrind"),
        _valgrind,
        "noise 400\ngcc -g -O0 -o vg vg.c && valgrind --error-exitcode=3 ./vg 2>&1\nnoise 800",
        ("Invalid read of size 4",),
    ),
    _case(
        "cmake-missing-package",
        ("cmake",),
        _cmake_missing,
        "noise 700\ncmake -S . -B build 2>&1\nnoise 700",
        ("CMake Error at CMakeLists.txt:3 (find_package):",),
    ),
    _case(
        "unittest-error-in-json",
        ("python3",),
        _unittest_error,
        "testnoise 200\npython3 -m unittest -v test_loader 2>&1\ntestnoise 300",
        ("ERROR: test_loads_settings", "json.decoder.JSONDecodeError"),
    ),
    _case(
        "maven-compilation-error",
        ("mvn",),
        _mvn_compile,
        f"noise 500\nmvn -o -B -Dmaven.repo.local={_maven_repo()} compile 2>&1\nnoise 500",
        ("cannot find symbol",),
    ),
    _case(
        "npm-install-offline",
        ("npm",),
        _npm_offline,
        "npmnoise 200\nnpm install --offline --no-audit --no-fund left-pad-nonexistent-x 2>&1\n"
        "npmnoise 200",
        ("code ENOTCACHED",),
    ),
    _case(
        "bash-set-e-missing-file",
        (),
        _bash_set_e,
        "noise 300\nbash release.sh 2>&1\nnoise 700",
        ("cp: cannot stat 'build/app-release.tar.gz': No such file or directory",),
    ),
)


# -- the held-out set (never looked at while developing) -----------------------------


def _gcc_werror(work: Path) -> None:
    for i in range(12):
        _write(
            work / f"ok{i}.c",
            f"#include <stdio.h>\nint f{i}(const char *s) {{ printf(s); return 0; }}\n",
        )
    _write(work / "core.c", "int core(int a) {\n    int tmp = a * 2;\n    return a;\n}\n")
    objs = " ".join(f"ok{i}.o" for i in range(12))
    _write(
        work / "Makefile",
        f"CFLAGS = -Wall -Wformat-security\nall: {objs} strict\n"
        "strict:\n\t$(CC) -Wall -Werror -c core.c\n",
    )


def _gxx_undefined(work: Path) -> None:
    _write(
        work / "store.hpp",
        "#include <string>\nnamespace db { struct Store { std::string get(int k) const; }; }\n",
    )
    _write(
        work / "main.cpp",
        '#include "store.hpp"\n#include <iostream>\n'
        "int main() { db::Store s; std::cout << s.get(1) << std::endl; }\n",
    )


def _rustc_mismatch(work: Path) -> None:
    helpers = "\n".join(f"fn unused_{i}() -> u8 {{ {i % 200} }}" for i in range(30))
    _write(
        work / "main.rs",
        helpers + "\nfn port() -> u32 { 8080 }\n"
        'fn main() {\n    let label: String = port();\n    println!("{}", label);\n}\n',
    )


def _cargo_test_two(work: Path) -> None:
    tests = "\n".join(
        f"    #[test]\n    fn case_{i:03d}() {{ assert!(super::clamp({i}) <= 100); }}"
        for i in range(300)
    )
    _cargo_project(
        work,
        "pub fn clamp(x: i32) -> i32 { if x > 100 { 100 } else { x } }\n"
        "pub fn ratio(a: u32, b: u32) -> u32 { a.checked_div(b).unwrap_or(0) }\n"
        "#[cfg(test)]\nmod tests {\n"
        f"{tests}\n"
        "    #[test]\n    fn ratio_of_halves() { assert_eq!(super::ratio(1, 2), 50); }\n"
        "    #[test]\n    fn clamp_negative() { assert_eq!(super::clamp(-5), 0); }\n"
        "}\n",
        name="calc",
    )


def _java_npe(work: Path) -> None:
    _write(
        work / "Job.java",
        "import java.util.*;\npublic class Job {\n"
        "  static Map<String, String> cfg = new HashMap<>();\n"
        '  static int timeout() { return Integer.parseInt(cfg.get("timeout").trim()); }\n'
        "  public static void main(String[] a) {\n"
        '    for (int i = 0; i < 500; i++) System.out.println("INFO  [worker-" + (i % 4)'
        ' + "] processed batch " + i + " in " + (i * 7 % 90) + " ms");\n'
        "    System.out.println(timeout());\n  }\n}\n",
    )


def _node_rejection(work: Path) -> None:
    _write(
        work / "deploy.js",
        "const fs = require('node:fs/promises');\n"
        "async function main() {\n"
        "  for (let i = 0; i < 500; i++) console.log(`uploading chunk ${i}/500 (${i * 64} KiB)`);\n"
        "  const raw = await fs.readFile('deploy/settings.json', 'utf8');\n"
        "  console.log(raw);\n}\nmain();\n",
    )


def _pytest_setup_error(work: Path) -> None:
    _write(
        work / "test_db.py",
        "import pytest\n\n"
        "@pytest.fixture\ndef db():\n    return open('fixtures/seed.sql', encoding='utf-8')\n\n"
        "@pytest.mark.parametrize('n', range(250))\ndef test_math(n):\n    assert n + 0 == n\n\n"
        "def test_db_query(db):\n    assert db.read()\n",
    )


def _asan_uaf(work: Path) -> None:
    _write(
        work / "uaf.c",
        "#include <stdio.h>\n#include <stdlib.h>\n"
        "struct conn { int fd; };\n"
        "int main(void) {\n"
        '  for (int i = 0; i < 500; i++) printf("accepted connection %d\\n", i);\n'
        "  fflush(stdout);\n"
        "  struct conn *c = malloc(sizeof *c);\n  c->fd = 3;\n  free(c);\n"
        '  printf("closing %d\\n", c->fd);\n  return 0;\n}\n',
    )


def _ubsan(work: Path) -> None:
    _write(
        work / "ov.c",
        "#include <stdio.h>\n#include <limits.h>\n"
        "int main(void) {\n  int total = INT_MAX - 5;\n"
        '  for (int i = 0; i < 400; i++) printf("adding sample %d\\n", i);\n'
        "  for (int i = 0; i < 10; i++) total += 1;\n"
        '  printf("%d\\n", total);\n  return 0;\n}\n',
    )


def _travis_unittest(work: Path) -> None:
    cases = "\n".join(
        f"    def test_{i:03d}(self):\n        self.assertEqual(len('x' * {i}), {i})"
        for i in range(300)
    )
    _write(
        work / "test_slug.py",
        "import unittest\n\nclass Slug(unittest.TestCase):\n"
        f"{cases}\n"
        "    def test_slugify_unicode(self):\n"
        "        self.assertEqual('Crème Brûlée'.lower().replace(' ', '-'), 'creme-brulee')\n",
    )


def _sqlite_syntax(work: Path) -> None:
    rows = "\n".join(f"insert into items values ({i}, 'item {i}');" for i in range(600))
    _write(
        work / "seed.sql",
        "create table items(id integer primary key, name text);\nbegin;\n"
        f"{rows}\ncommit;\n"
        "SELEC count(*) from items;\n"
        "select name from items where id > 590;\n",
    )


def _git_apply(work: Path) -> None:
    _write(work / "repo" / "config.ini", "".join(f"key_{i} = {i}\n" for i in range(50)))
    _write(
        work / "fix.patch",
        "--- a/config.ini\n+++ b/config.ini\n@@ -1,3 +1,3 @@\n"
        " key_0 = 0\n-key_1 = one\n+key_1 = 1\n key_2 = 2\n",
    )


def _syntax_error(work: Path) -> None:
    cases = "\n".join(f"    def test_{i:03d}(self):\n        pass" for i in range(300))
    _write(
        work / "test_a.py",
        f"import unittest\n\nclass A(unittest.TestCase):\n{cases}\n",
    )
    _write(work / "test_b.py", "import unittest\n\ndef parse(line:\n    return line\n")


def _unbound(work: Path) -> None:
    _write(
        work / "deploy.sh",
        "set -u\n"
        'for i in $(seq 1 400); do echo "syncing file $i of 400"; done\n'
        'echo "deploying to $DEPLOY_TARGET"\n',
    )


def _gdb_segv(work: Path) -> None:
    _write(
        work / "crash.c",
        "#include <stdio.h>\n"
        "struct node { struct node *next; int v; };\n"
        "int sum(struct node *n) { return n->v + (n->next ? sum(n->next) : 0); }\n"
        "int main(void) {\n"
        '  for (int i = 0; i < 400; i++) printf("loaded node %d\\n", i);\n'
        '  struct node *head = NULL;\n  printf("%d\\n", sum(head));\n  return 0;\n}\n',
    )


def _recursive_make(work: Path) -> None:
    for d in ("lib", "net", "app"):
        for i in range(15):
            _write(work / d / f"{d}{i}.c", f"int {d}{i}(void) {{ return {i}; }}\n")
        objs = " ".join(f"{d}{i}.o" for i in range(15))
        _write(work / d / "Makefile", f"all: {objs}\n")
    _write(
        work / "net" / "sock.c",
        "#include <sys/socket.h>\nint open_sock(void) { return socket(AF_INET, SOCK_STREAM); }\n",
    )
    _write(
        work / "net" / "Makefile",
        "all: " + " ".join(f"net{i}.o" for i in range(15)) + " sock.o\n",
    )
    _write(work / "Makefile", "all:\n\tfor d in lib net app; do $(MAKE) -C $$d || exit 1; done\n")


def _bad_requirement(work: Path) -> None:
    _write(work / "requirements.txt", "flask>=2.0\nrequests=2.31\n")


HELD_OUT_CASES: tuple[RealCase, ...] = (
    _case(
        "gcc-werror-unused-variable",
        ("gcc", "make"),
        _gcc_werror,
        "noise 500\nmake -k CC=gcc 2>&1\nnoise 700",
        ("error: unused variable ‘tmp’ [-Werror=unused-variable]",),
    ),
    _case(
        "gxx-undefined-reference",
        ("g++",),
        _gxx_undefined,
        "noise 700\ng++ -o app main.cpp 2>&1\nnoise 700",
        ("undefined reference to `db::Store::get[abi:cxx11](int) const'",),
    ),
    _case(
        "rustc-mismatched-types",
        ("rustc",),
        _rustc_mismatch,
        _rust_env() + "noise 500\nrustc main.rs 2>&1\nnoise 700",
        ("error[E0308]: mismatched types",),
    ),
    _case(
        "cargo-test-two-fail",
        ("cargo",),
        _cargo_test_two,
        _rust_env() + "pipnoise 200\ncargo test --offline -- --test-threads=1 2>&1\nnoise 500",
        ("thread 'tests::clamp_negative'", "thread 'tests::ratio_of_halves'"),
    ),
    _case(
        "java-null-pointer",
        ("javac", "java"),
        _java_npe,
        "noise 300\njavac Job.java && java Job 2>&1\nnoise 500",
        ('Exception in thread "main" java.lang.NullPointerException',),
    ),
    _case(
        "node-unhandled-rejection",
        ("node",),
        _node_rejection,
        "npmnoise 200\nnode deploy.js 2>&1\nnpmnoise 200",
        ("Error: ENOENT: no such file or directory, open 'deploy/settings.json'",),
    ),
    _case(
        "pytest-setup-error",
        ("python3",),
        _pytest_setup_error,
        "pipnoise 200\npython3 -m pytest -v -p no:cacheprovider test_db.py 2>&1\npipnoise 300",
        ("ERROR at setup of test_db_query", "FileNotFoundError"),
    ),
    _case(
        "asan-heap-use-after-free",
        ("gcc",),
        _asan_uaf,
        "noise 300\ngcc -g -fsanitize=address -o uaf uaf.c 2>&1 && ./uaf 2>&1\nnoise 700",
        ("ERROR: AddressSanitizer: heap-use-after-free",),
    ),
    _case(
        "ubsan-signed-overflow",
        ("gcc",),
        _ubsan,
        "noise 400\ngcc -g -fsanitize=undefined -o ov ov.c 2>&1 && ./ov 2>&1\nnoise 700",
        ("runtime error: signed integer overflow",),
    ),
    _case(
        "travis-unittest-fail",
        ("python3",),
        _travis_unittest,
        "travis_cmd pipnoise 250\ntravis_cmd python3 -m unittest -v test_slug\n"
        "travis_cmd npmnoise 150\nprintf '\\nDone. Your build exited with 1.\\n'",
        ("FAIL: test_slugify_unicode",),
    ),
    _case(
        "sqlite-syntax-error",
        ("sqlite3",),
        _sqlite_syntax,
        "noise 500\nsqlite3 db.sqlite < seed.sql 2>&1\nnoise 700",
        ('near "SELEC": syntax error',),
    ),
    _case(
        "git-apply-fails",
        ("git",),
        _git_apply,
        "cd repo && git init -q . && git add . && git -c user.name=t -c user.email=t@e "
        "commit -qm base && cd ..\nnoise 700\n(cd repo && git apply ../fix.patch 2>&1)\nnoise 700",
        ("error: patch failed: config.ini:1",),
    ),
    _case(
        "unittest-syntax-error-on-import",
        ("python3",),
        _syntax_error,
        "noise 200\npython3 -m unittest discover -v -p 'test_*.py' 2>&1\nnoise 500",
        ("ERROR: test_b (unittest.loader._FailedTest",),
    ),
    _case(
        "bash-unbound-variable",
        (),
        _unbound,
        "noise 300\nbash deploy.sh 2>&1\nnoise 600",
        ("DEPLOY_TARGET: unbound variable",),
    ),
    _case(
        "gdb-segfault-backtrace",
        ("gcc", "gdb"),
        _gdb_segv,
        "noise 300\ngcc -g -O0 -o crash crash.c && "
        "gdb -q -batch -ex run -ex bt ./crash 2>&1\nnoise 700",
        ("Program received signal SIGSEGV, Segmentation fault.",),
    ),
    _case(
        "recursive-make-compile-error",
        ("gcc", "make"),
        _recursive_make,
        "noise 500\nmake CC=gcc 2>&1\nnoise 700",
        ("error: too few arguments to function ‘socket’",),
    ),
    _case(
        "pip-invalid-requirement",
        ("python3",),
        _bad_requirement,
        "pipnoise 300\npython3 -m pip install --no-index --disable-pip-version-check "
        "-r requirements.txt 2>&1\npipnoise 300",
        ("ERROR: Invalid requirement: 'requests=2.31'",),
    ),
)


# -- the late held-out set ------------------------------------------------------------
# Written after every change to the ranking and the sharing, and run once, at the end:
# the first held-out set above was evaluated once before two of its misses were looked at
# (a shell error without a failure word; two failing tests whose lines share a template).


def _python_keyerror(work: Path) -> None:
    _write(
        work / "worker.py",
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.INFO,\n"
        "                    format='%(asctime)s %(levelname)s %(name)s: %(message)s')\n"
        "log = logging.getLogger('sync')\n"
        "def region(job):\n    return job['region']\n"
        "for i in range(600):\n"
        "    log.info('synced shard %d (%d rows)', i, i * 17)\n"
        "    if i % 97 == 0:\n"
        "        log.warning('shard %d: connection reset, retrying in 2s (error 104)', i)\n"
        "try:\n    region({'id': 7})\nexcept Exception:\n    log.exception('job 7 failed')\n"
        "for i in range(600, 1200):\n    log.info('synced shard %d (%d rows)', i, i * 17)\n",
    )


def _gxx_no_member(work: Path) -> None:
    for i in range(20):
        _write(
            work / f"mod{i}.cpp",
            "#include <vector>\n"
            f"int mod{i}() {{ std::vector<int> v; int unused; return (int)v.size(); }}\n",
        )
    _write(
        work / "net.cpp",
        "struct Config { int retries; };\n"
        "int timeout_of(const Config& c) { return c.timeout_ms * 2; }\n",
    )
    objs = " ".join(f"mod{i}.o" for i in range(20))
    _write(work / "Makefile", f"CXXFLAGS = -Wall\nall: {objs} net.o\n")


def _node_spec(work: Path) -> None:
    cases = "\n".join(
        f"test('rounds {i}', () => assert.strictEqual(Math.round({i}.4), {i}));" for i in range(200)
    )
    _write(
        work / "money.test.js",
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        f"{cases}\n"
        "test('computes totals', () => {\n  assert.strictEqual(0.1 + 0.2, 0.3);\n});\n",
    )


def _prove_dates(work: Path) -> None:
    oks = "".join(f"ok({i} > 0, 'case {i}');\n" for i in range(1, 200))
    _write(
        work / "t" / "dates.t",
        "use strict; use warnings;\nuse Test::More tests => 200;\n"
        f"{oks}is('2024-02-30', '2024-03-01', 'parses dates');\n",
    )


def _cmake_link(work: Path) -> None:
    _write(
        work / "CMakeLists.txt",
        "cmake_minimum_required(VERSION 3.10)\nproject(app C)\nadd_executable(app main.c util.c)\n",
    )
    _write(work / "util.c", "int helper(void) { return 1; }\n")
    _write(
        work / "main.c",
        'int compute_checksum(const char *s);\nint main(void) { return compute_checksum("x"); }\n',
    )


def _javac_types(work: Path) -> None:
    for i in range(25):
        _write(work / f"Part{i}.java", f"public class Part{i} {{ int id() {{ return {i}; }} }}\n")
    _write(
        work / "Main.java",
        "public class Main {\n  public static void main(String[] a) {\n"
        '    int port = System.getenv().getOrDefault("PORT", "8080");\n'
        "    System.out.println(port);\n  }\n}\n",
    )


def _rust_unwrap(work: Path) -> None:
    _write(
        work / "Cargo.toml",
        '[package]\nname = "srv"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    )
    _write(
        work / "src" / "main.rs",
        "fn main() {\n"
        '    for i in 0..500 { println!("loaded route {i}"); }\n'
        '    let port: u16 = "80a80".parse().unwrap();\n'
        '    println!("{port}");\n}\n',
    )


def _git_push(work: Path) -> None:
    pass


def _tar_gzip(work: Path) -> None:
    for i in range(500):
        _write(work / "src" / f"f{i:03d}.txt", f"{i}\n")
    _write(work / "release.tar.gz", "this is not a gzip file\n" * 10)


def _missing_separator(work: Path) -> None:
    _write(work / "Makefile", "all:\n        echo building\n")


def _gha_pytest(work: Path) -> None:
    _write(
        work / "test_api.py",
        "import pytest\n\n"
        "@pytest.mark.parametrize('n', range(300))\ndef test_ok(n):\n    assert n >= 0\n\n"
        "def test_pagination():\n    pages = [1, 2, 3]\n    assert len(pages) == 4\n",
    )


def _dash_unset(work: Path) -> None:
    _write(
        work / "publish.sh",
        'set -u\nfor i in $(seq 1 300); do echo "copying page $i"; done\n'
        'echo "publishing to $BUCKET_NAME"\n',
    )


def _valgrind_leak(work: Path) -> None:
    _write(
        work / "leak.c",
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
        "int main(void) {\n"
        '  for (int i = 0; i < 300; i++) printf("parsed line %d\\n", i);\n'
        '  char *buf = malloc(40);\n  strcpy(buf, "kept");\n  buf = NULL;\n  return 0;\n}\n',
    )


HELD_OUT_LATE_CASES: tuple[RealCase, ...] = (
    _case(
        "python-keyerror-in-worker-log",
        ("python3",),
        _python_keyerror,
        "noise 300\npython3 worker.py 2>&1\nnoise 300",
        ("Traceback (most recent call last):", "KeyError: 'region'"),
    ),
    _case(
        "gxx-no-member",
        ("g++", "make"),
        _gxx_no_member,
        "noise 500\nmake -k CXX=g++ 2>&1\nnoise 600",
        ("error: ‘const struct Config’ has no member named ‘timeout_ms’",),
    ),
    _case(
        "node-test-spec-reporter",
        ("node",),
        _node_spec,
        "npmnoise 150\nnode --test --test-reporter=spec 2>&1\nnpmnoise 150",
        ("✖ computes totals",),
    ),
    _case(
        "prove-failed-subtest",
        ("prove", "perl"),
        _prove_dates,
        "noise 500\nprove -v t/ 2>&1\nnoise 500",
        ("#   Failed test 'parses dates'",),
    ),
    _case(
        "cmake-build-link-error",
        ("cmake", "make", "gcc"),
        _cmake_link,
        "noise 500\ncmake -S . -B build >/dev/null 2>&1 && cmake --build build 2>&1\nnoise 600",
        ("undefined reference to `compute_checksum'",),
    ),
    _case(
        "javac-incompatible-types",
        ("javac",),
        _javac_types,
        "noise 500\njavac -d out *.java 2>&1\nnoise 600",
        ("error: incompatible types: String cannot be converted to int",),
    ),
    _case(
        "cargo-run-unwrap-panic",
        ("cargo",),
        _rust_unwrap,
        _rust_env() + "pipnoise 200\ncargo run --offline --quiet 2>&1\npipnoise 250",
        ("called `Result::unwrap()` on an `Err` value",),
    ),
    _case(
        "git-push-rejected",
        ("git",),
        _git_push,
        "git init -q --bare origin.git && git clone -q origin.git a 2>/dev/null && "
        "git clone -q origin.git b 2>/dev/null && "
        "(cd a && echo 1 > f && git add f && git commit -qm one && git push -q origin HEAD 2>&1) "
        "&& (cd b && echo 2 > g && git add g && git commit -qm two)\n"
        "noise 600\n(cd b && git push origin HEAD 2>&1)\nnoise 600",
        ("error: failed to push some refs to",),
    ),
    _case(
        "tar-not-gzip",
        ("tar", "gzip"),
        _tar_gzip,
        "noise 300\ntar -cvf src.tar src 2>&1\ntar -xzf release.tar.gz 2>&1\nnoise 700",
        ("gzip: stdin: not in gzip format",),
    ),
    _case(
        "make-missing-separator",
        ("make",),
        _missing_separator,
        "noise 700\nmake 2>&1\nnoise 700",
        ("Makefile:2: *** missing separator",),
    ),
    _case(
        "github-actions-pytest",
        ("python3", "awk"),
        _gha_pytest,
        "{ gha_step 'pip install -e .' pipnoise 150 && "
        "gha_step 'pytest -q' python3 -m pytest -q -p no:cacheprovider test_api.py; "
        "gha_post 150; } | stamp",
        ("FAILED test_api.py::test_pagination",),
    ),
    _case(
        "dash-parameter-not-set",
        ("dash",),
        _dash_unset,
        "noise 400\ndash publish.sh 2>&1\nnoise 600",
        ("BUCKET_NAME: parameter not set",),
    ),
    _case(
        "valgrind-definitely-lost",
        ("gcc", "valgrind"),
        _valgrind_leak,
        "noise 400\ngcc -g -O0 -o leak leak.c && "
        "valgrind --leak-check=full --error-exitcode=3 ./leak 2>&1\nnoise 600",
        ("definitely lost: 40 bytes in 1 blocks",),
    ),
)
