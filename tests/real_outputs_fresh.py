"""A fresh held-out set of failing outputs of real programs run here, written before the
changes of the session that added it and run through the pointer once, at its end.

Each output puts its failure among the noise of real commands (verbose archivers, compiler
command lines, pretty-printed JSON, passing tests, package listings, certificate dumps,
``set -x`` traces) or of the shared noise functions, well over the bash threshold.
``wanted`` holds the line a person reading the raw output would name as the cause, chosen
from the raw output alone.

``bench/bench_pointer.py`` reports the set apart as ``HELD_OUT_FRESH_CASES``. Run once at
the end of that session: 28/30 found at 4, 8 and 16 KiB, 29/30 at 32 KiB (the code before
the session: 27/30 and 28/30). Missed: ``python3 -m json.tool``'s ``Expecting ','
delimiter: line 2 column 3`` (no failure word, no report shape) at every budget, and
valgrind's ``Conditional jump or move depends on uninitialised value(s)`` below 32 KiB
(found only in the tail). Those two have been looked at since, so the set is held out no
longer for rules about them.
"""

from __future__ import annotations

import json
from pathlib import Path

from real_outputs import RealCase, _nothing
from real_outputs_more import _case, _rust_env, _write

__all__ = ["HELD_OUT_FRESH_CASES"]


def _c_conflicting(work: Path) -> None:
    for i in range(40):
        _write(
            work / "src" / f"unit{i:02d}.c",
            f"#include <stddef.h>\nint unit{i}(int *xs, unsigned n) {{\n"
            f"  int unused_{i} = 0;\n  for (int j = 0; j < n; j++) xs[j] += {i};\n"
            "  return 0;\n}\n",
        )
    _write(work / "src" / "parse.h", "int parse_header(const char *line);\n")
    _write(
        work / "src" / "parse.c",
        '#include "parse.h"\nlong parse_header(const char *line) { return line[0]; }\n',
    )
    objs = " ".join(f"src/unit{i:02d}.o" for i in range(40))
    _write(
        work / "Makefile",
        f"CFLAGS = -Wall -Wextra -O1\nall: {objs} src/parse.o\n",
    )


def _make_sed(work: Path) -> None:
    for i in range(60):
        _write(work / "templates" / f"page{i:02d}.in", f"title=@TITLE@ {i}\n")
    pages = " ".join(f"out/page{i:02d}.html" for i in range(60))
    _write(
        work / "Makefile",
        f"all: {pages} out/version.h\n"
        "out/%.html: templates/%.in\n\t@mkdir -p out\n"
        "\tsed -e 's/@TITLE@/Handbook/' $< > $@\n\tcat $@\n"
        "out/version.h: VERSION\n\tsed -e 's/^/#define VERSION /;s/$$/' VERSION > $@\n",
    )
    _write(work / "VERSION", "2.4.1\n")


def _py_chained(work: Path) -> None:
    _write(
        work / "billing.py",
        "import logging, sqlite3, sys\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.INFO,\n"
        "    format='%(asctime)s %(levelname)-7s %(name)s: %(message)s')\n"
        "log = logging.getLogger('billing')\n"
        "class LoadError(RuntimeError):\n    pass\n"
        "def load(db, account):\n"
        "    try:\n"
        "        return db.execute('select * from invoices where account=?', (account,))"
        ".fetchall()\n"
        "    except sqlite3.Error as exc:\n"
        "        raise LoadError(f'could not load invoices for account {account}') from exc\n"
        "db = sqlite3.connect(':memory:')\n"
        "db.execute('create table accounts (id integer)')\n"
        "for i in range(700):\n"
        "    log.info('reconciled account %d: 0 errors, %d lines', i, i % 17)\n"
        "    if i % 90 == 0:\n"
        "        log.warning('retrying ledger fetch for account %d (error budget 3)', i)\n"
        "load(db, 42)\n",
    )


def _pytest_param(work: Path) -> None:
    _write(
        work / "test_orders.py",
        "import pytest\n\n"
        "def discount(total, code):\n"
        "    return total * (0.9 if code == 'TEN' else 1.0)\n\n"
        "@pytest.mark.parametrize('n', range(500))\n"
        "def test_totals_are_positive(n):\n    assert discount(n + 1, 'NONE') > 0\n\n"
        "def test_discount_applied():\n    assert discount(100, 'FIFTEEN') == 85.0\n\n"
        "@pytest.mark.parametrize('n', range(300))\n"
        "def test_codes_are_strings(n):\n    assert isinstance(str(n), str)\n",
    )


def _set_x(work: Path) -> None:
    _write(
        work / "deploy.sh",
        "set -ex\n"
        'for i in $(seq 1 400); do\n  mkdir -p releases/r$i\n  echo "staged $i" > releases/r$i/ok\n'
        "done\n"
        "ln -s releases/r400 shared/current/link\n"
        "echo done\n",
    )


def _sqlite_column(work: Path) -> None:
    rows = "\n".join(f"INSERT INTO users VALUES ({i}, 'user{i}@example.com');" for i in range(600))
    _write(
        work / "migrate.sql",
        ".echo on\nCREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT);\n"
        f"{rows}\nUPDATE users SET emial = lower(email);\nSELECT count(*) FROM users;\n",
    )


def _perl_method(work: Path) -> None:
    _write(
        work / "report.pl",
        "package Report;\nsub new { bless {}, shift }\npackage main;\n"
        'for my $i (1..600) { printf "row %d: total %d, warnings 0\\n", $i, $i * 3; }\n'
        "my $r = Report->new;\n$r->frobnicate(1);\n",
    )


def _awk_rules(work: Path) -> None:
    _write(
        work / "rules.csv",
        "".join(f"route{i},{'^/api/[a-z' if i == 377 else f'^/v{i}/'}\n" for i in range(800)),
    )
    _write(
        work / "match.awk",
        'BEGIN { FS = "," }\n{ n = ("/v" NR "/x" ~ $2); printf "%s matched %d\\n", $1, n }\n',
    )


def _deb_pkg(work: Path) -> None:
    for name, control in (
        (
            "good",
            "Package: good\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@e>\n"
            "Description: good\n",
        ),
        (
            "broken",
            "Package: broken\nArchitecture: all\nMaintainer: t <t@e>\nDescription: broken\n",
        ),
    ):
        _write(work / name / "DEBIAN" / "control", control)
        for i in range(300):
            _write(work / name / "usr/share" / name / f"doc{i:03d}.txt", f"{i}\n")


def _xz_truncated(work: Path) -> None:
    for i in range(600):
        _write(work / "assets" / f"img{i:03d}.svg", f"<svg id='{i}'>{'x' * (i % 50)}</svg>\n" * 20)


def _zip_truncated(work: Path) -> None:
    for i in range(500):
        _write(work / "site" / f"page{i:03d}.html", f"<p>{i}</p>\n" * (i % 40 + 1))


def _openssl(work: Path) -> None:
    _write(
        work / "broken.pem",
        "-----BEGIN CERTIFICATE-----\nMIIBnotbase64!!\n-----END CERTIFICATE-----\n",
    )


def _json_dir(work: Path) -> None:
    for i in range(120):
        doc = {"id": i, "name": f"service-{i}", "ports": [8000 + i, 9000 + i], "enabled": True}
        text = json.dumps(doc)
        if i == 73:
            text = '{"id": 73, "name": "service-73"\n  "ports": [8073, 9073]}'
        _write(work / "conf" / f"svc{i:03d}.json", text + "\n")


def _join_unsorted(work: Path) -> None:
    ids = [f"{i:05d}" for i in range(900)]
    ids[450], ids[451] = ids[451], ids[450]
    _write(work / "users.txt", "".join(f"{i} user{i}\n" for i in ids))
    _write(work / "orders.txt", "".join(f"{i:05d} order{i}\n" for i in range(900)))


def _node_typeerror(work: Path) -> None:
    _write(
        work / "render.js",
        "const items = Array.from({length: 800}, (_, i) => ({id: i, owner: {name: `u${i}`}}));\n"
        "items[613].owner = undefined;\n"
        "for (const it of items) {\n"
        "  console.log(`rendered card ${it.id} for ${it.owner.name} (0 errors)`);\n}\n",
    )


def _npm_test(work: Path) -> None:
    _write(
        work / "package.json",
        '{"name": "calc", "version": "1.0.0", "scripts": {"test": "node test.js"}}\n',
    )
    _write(
        work / "test.js",
        "const assert = require('assert');\n"
        "for (let i = 0; i < 600; i++) console.log(`ok ${i} - sum of ${i} and 1`);\n"
        "assert.strictEqual(0.1 + 0.2, 0.3);\n",
    )


def _java_caused(work: Path) -> None:
    _write(
        work / "App.java",
        "import java.io.*;\npublic class App {\n"
        "  static void load(String p) {\n"
        "    try { new FileInputStream(p).close(); }\n"
        '    catch (IOException e) { throw new IllegalStateException("config unavailable", e); }\n'
        "  }\n"
        "  public static void main(String[] a) {\n"
        '    for (int i = 0; i < 600; i++) System.out.println("INFO worker " + i + " ready");\n'
        '    load("config/app.properties");\n  }\n}\n',
    )


def _rustc_unresolved(work: Path) -> None:
    unused = "\n".join(f"    let unused_{i} = {i};" for i in range(60))
    _write(
        work / "main.rs",
        f'fn main() {{\n{unused}\n    let config = 3;\n    println!("{{}}", conf);\n}}\n',
    )


def _valgrind_uninit(work: Path) -> None:
    _write(
        work / "uninit.c",
        "#include <stdio.h>\n#include <stdlib.h>\n"
        "int main(void) {\n"
        '  for (int i = 0; i < 400; i++) printf("sample %d ok\\n", i);\n'
        "  int *v = malloc(4 * sizeof *v);\n"
        '  if (v[2] > 0) puts("positive");\n  free(v);\n  return 0;\n}\n',
    )


def _gdb_assert(work: Path) -> None:
    _write(
        work / "range.c",
        "#include <assert.h>\n#include <stdio.h>\n"
        "static int check_range(int n) { assert(n < 500); return n; }\n"
        "int main(void) {\n"
        '  for (int i = 0; i < 800; i++) printf("checked %d\\n", check_range(i));\n'
        "  return 0;\n}\n",
    )


def _gcc_multiple(work: Path) -> None:
    for i in range(30):
        _write(work / f"mod{i:02d}.c", f"int mod{i}(void) {{ return {i}; }}\n")
    _write(work / "config.c", "int config_load(void) { return 1; }\n")
    _write(work / "legacy.c", "int config_load(void) { return 2; }\n")
    _write(work / "main.c", "int config_load(void);\nint main(void) { return config_load(); }\n")


def _doctest(work: Path) -> None:
    funcs = "\n".join(
        f"def f{i}(x):\n    '''\n    >>> f{i}(2)\n    {2 + i}\n    '''\n    return x + {i}\n"
        for i in range(120)
    )
    _write(
        work / "stats.py",
        funcs + "\ndef mean(xs):\n    '''\n    >>> mean([1, 2, 3, 4])\n    2.5\n    '''\n"
        "    return sum(xs) // len(xs)\n",
    )


def _tcl(work: Path) -> None:
    _write(
        work / "build.tcl",
        'for {set i 0} {$i < 700} {incr i} { puts "generated stub $i" }\n'
        'proc emit {name} { puts "emit $name $cfg(prefix)" }\nemit core\n',
    )


def _msgfmt(work: Path) -> None:
    entries = "".join(f'msgid "label {i}"\nmsgstr "etiquette {i}"\n\n' for i in range(400))
    _write(
        work / "fr.po",
        'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        + entries
        + 'msgid "label 12"\nmsgstr "double"\n',
    )


def _patch(work: Path) -> None:
    lines = [f"line {i}\n" for i in range(1, 200)]
    _write(work / "app.txt", "".join(lines))
    changed = list(lines)
    changed[10] = "line 11 changed\n"
    changed[150] = "line 151 changed\n"
    _write(work / "new.txt", "".join(changed))
    drifted = list(lines)
    drifted[149] = "line 150 edited locally\n"
    _write(work / "drifted.txt", "".join(drifted))


def _ninja(work: Path) -> None:
    rules = "rule cc\n  command = gcc -Wall -c $in -o $out\n  description = CC $out\n"
    builds = []
    for i in range(80):
        _write(work / f"s{i:02d}.c", f"int s{i}(int a) {{ int w; return a + {i}; }}\n")
        builds.append(f"build s{i:02d}.o: cc s{i:02d}.c")
    _write(
        work / "util.c",
        '#include <stdio.h>\nint util(void) { return printf("%d\\n"); }\n'
        "int use(void) { return missing_macro(3); }\n",
    )
    builds.append("build util.o: cc util.c")
    _write(work / "build.ninja", rules + "\n".join(builds) + "\n")


def _jq(work: Path) -> None:
    _write(
        work / "services.json",
        json.dumps({"services": [{"name": f"svc{i}", "port": 8000 + i} for i in range(300)]}),
    )


def _ci_steps(work: Path) -> None:
    _write(work / "schema.sql", "CREATE TABLE accounts (id INTEGER, email TEXT);\n")
    _write(work / "seed.sql", "SELECT emial FROM accounts;\n")
    for i in range(200):
        _write(work / "lib" / f"m{i:03d}.py", f"def f{i}():\n    return {i}\n")


HELD_OUT_FRESH_CASES: tuple[RealCase, ...] = (
    _case(
        "gcc-conflicting-types-among-warnings",
        ("gcc", "make"),
        _c_conflicting,
        "noise 300\nmake -k CC=gcc 2>&1\nnoise 300",
        ("error: conflicting types for ‘parse_header’",),
    ),
    _case(
        "make-k-sed-unterminated",
        ("make", "sed"),
        _make_sed,
        "noise 400\nmake -k 2>&1\nnoise 500",
        ("sed: -e expression #1, char 26: unterminated `s' command",),
    ),
    _case(
        "python-chained-exception-in-logging",
        ("python3",),
        _py_chained,
        "pipnoise 100\npython3 billing.py 2>&1\nnoise 300",
        ("sqlite3.OperationalError: no such table: invoices",),
    ),
    _case(
        "pytest-one-of-801-fails",
        ("python3",),
        _pytest_param,
        "pipnoise 50\npython3 -m pytest -v -p no:cacheprovider test_orders.py 2>&1\nnoise 200",
        ("FAILED test_orders.py::test_discount_applied",),
    ),
    _case(
        "bash-set-x-ln-fails",
        (),
        _set_x,
        "noise 100\nbash deploy.sh 2>&1\nnoise 300",
        ("ln: failed to create symbolic link 'shared/current/link': No such file or directory",),
    ),
    _case(
        "sqlite-echo-no-such-column",
        ("sqlite3",),
        _sqlite_column,
        "noise 200\nsqlite3 app.db < migrate.sql 2>&1\nnoise 400",
        ("no such column: emial",),
    ),
    _case(
        "perl-missing-method",
        ("perl",),
        _perl_method,
        "testnoise 200\nperl report.pl 2>&1\ntestnoise 200",
        ('Can\'t locate object method "frobnicate" via package "Report"',),
    ),
    _case(
        "awk-bad-dynamic-regex",
        ("awk",),
        _awk_rules,
        "noise 500\nawk -f match.awk rules.csv 2>&1\nnoise 600",
        ("awk: run time error: regular expression compile failed",),
    ),
    _case(
        "dpkg-deb-missing-version",
        ("dpkg-deb",),
        _deb_pkg,
        "dpkg-deb --root-owner-group -b good good.deb 2>&1 && dpkg-deb -c good.deb\n"
        "dpkg-deb --root-owner-group -b broken broken.deb 2>&1\nnoise 300",
        ("missing 'Version' field",),
    ),
    _case(
        "apt-get-unable-to-locate",
        ("apt-get", "dpkg-query"),
        _nothing,
        "dpkg-query -W -f='${Package} ${Version} ${Status}\\n' | head -n 600\n"
        "apt-get install -s --no-download zz-toolswap-absent-package 2>&1\nnoise 300",
        ("E: Unable to locate package zz-toolswap-absent-package",),
    ),
    _case(
        "tar-xz-truncated",
        ("tar", "xz"),
        _xz_truncated,
        "tar -cJf assets.tar.xz assets && "
        "head -c $(($(stat -c %s assets.tar.xz) / 2)) assets.tar.xz > cut.tar.xz\n"
        # (stdout and stderr apart, then one after the other: with 2>&1, tar's listing and
        # xz's message, written in pieces, interleaved mid-line under load)
        "noise 500\nmkdir -p x && tar -xvJf cut.tar.xz -C x > list.txt 2> err.txt\n"
        "cat list.txt err.txt\nnoise 500",
        ("xz: (stdin): Unexpected end of input",),
    ),
    _case(
        "unzip-truncated-archive",
        ("zip", "unzip"),
        _zip_truncated,
        "zip -r site.zip site 2>&1 && head -c 30000 site.zip > cut.zip\n"
        "unzip -t cut.zip 2>&1\nnoise 400",
        ("End-of-central-directory signature not found",),
    ),
    _case(
        "openssl-bad-certificate",
        ("openssl",),
        _openssl,
        "for n in a b c d; do openssl req -x509 -newkey rsa:2048 -nodes -keyout $n.key "
        "-out $n.pem -days 30 -subj /CN=$n.example 2>/dev/null && "
        "openssl x509 -in $n.pem -noout -text; done\n"
        "openssl x509 -in broken.pem -noout -text 2>&1\nnoise 600",
        ("Could not read certificate from broken.pem",),
    ),
    _case(
        "curl-closed-port-after-file-fetches",
        ("curl",),
        _nothing,
        "noise 400\nfor f in /etc/os-release /etc/passwd /etc/services; do curl -sS file://$f; "
        "done\ncurl -sS http://127.0.0.1:9/health 2>&1\nnoise 300",
        ("curl: (7) Failed to connect to 127.0.0.1 port 9",),
    ),
    _case(
        "xargs-json-tool-one-invalid",
        ("find", "xargs", "python3"),
        _json_dir,
        "noise 200\nfind conf -name '*.json' | sort | xargs -n1 python3 -m json.tool 2>&1\n"
        "noise 500",
        ("Expecting ',' delimiter: line 2 column 3",),
    ),
    _case(
        "join-unsorted-input",
        ("join",),
        _join_unsorted,
        "noise 300\njoin --check-order users.txt orders.txt 2>&1\nnoise 500",
        ("join: users.txt:452: is not sorted",),
    ),
    _case(
        "node-cannot-read-properties",
        ("node",),
        _node_typeerror,
        "npmnoise 100\nnode render.js 2>&1\nnpmnoise 100",
        ("TypeError: Cannot read properties of undefined (reading 'name')",),
    ),
    _case(
        "npm-test-assertion",
        ("npm", "node"),
        _npm_test,
        "npmnoise 100\nnpm test 2>&1\nnpmnoise 150",
        ("AssertionError [ERR_ASSERTION]: Expected values to be strictly equal",),
    ),
    _case(
        "java-caused-by-file-not-found",
        ("java", "javac"),
        _java_caused,
        "noise 400\njavac App.java 2>&1 && java App 2>&1\nnoise 500",
        ("Caused by: java.io.FileNotFoundException: config/app.properties",),
    ),
    _case(
        "rustc-cannot-find-value-among-warnings",
        ("rustc",),
        _rustc_unresolved,
        _rust_env() + "noise 400\nrustc --edition 2021 main.rs 2>&1\nnoise 600",
        ("error[E0425]: cannot find value `conf` in this scope",),
    ),
    _case(
        "valgrind-uninitialised-jump",
        ("gcc", "valgrind"),
        _valgrind_uninit,
        "noise 400\ngcc -g -O0 -o uninit uninit.c && valgrind ./uninit 2>&1\nnoise 500",
        ("Conditional jump or move depends on uninitialised value(s)",),
    ),
    _case(
        "gdb-batch-assertion",
        ("gcc", "gdb"),
        _gdb_assert,
        "noise 400\ngcc -g -O0 -o range range.c && gdb -q -batch -ex run -ex bt ./range 2>&1\n"
        "noise 500",
        ("Assertion `n < 500' failed.",),
    ),
    _case(
        "ld-multiple-definition",
        ("gcc", "make"),
        _gcc_multiple,
        'noise 300\nfor f in *.c; do echo "gcc -c $f"; gcc -Wall -c $f; done 2>&1\n'
        "gcc -o app *.o 2>&1\nnoise 800",
        ("multiple definition of `config_load'",),
    ),
    _case(
        "doctest-verbose-one-fails",
        ("python3",),
        _doctest,
        "noise 400\npython3 -m doctest -v stats.py 2>&1\nnoise 600",
        ('stats.py", line 843, in stats.mean',),
    ),
    _case(
        "tclsh-no-such-variable",
        ("tclsh",),
        _tcl,
        "noise 400\ntclsh build.tcl 2>&1\nnoise 400",
        ('can\'t read "cfg(prefix)": no such variable',),
    ),
    _case(
        "msgfmt-duplicate-message",
        ("msgfmt",),
        _msgfmt,
        "noise 600\nmsgfmt -c -v -o fr.mo fr.po 2>&1\nnoise 600",
        ("duplicate message definition",),
    ),
    _case(
        "patch-hunk-failed",
        ("diff", "patch"),
        _patch,
        "noise 600\ndiff -u app.txt new.txt > fix.patch; cp drifted.txt app.txt; "
        "patch --verbose app.txt < fix.patch 2>&1\nnoise 600",
        ("Hunk #2 FAILED at",),
    ),
    _case(
        "ninja-compile-error-among-warnings",
        ("ninja", "gcc"),
        _ninja,
        "noise 300\nninja -k 0 2>&1\nnoise 400",
        ("implicit declaration of function ‘missing_macro’",),
    ),
    _case(
        "jq-cannot-index",
        ("jq",),
        _jq,
        "noise 400\njq '.services[] | .name' services.json\njq '.services.name' services.json "
        "2>&1\nnoise 500",
        ('jq: error (at services.json:0): Cannot index array with string "name"',),
    ),
    _case(
        "travis-ci-steps-seed-fails",
        ("python3", "sqlite3"),
        _ci_steps,
        "travis_cmd python3 -m compileall lib\ntravis_cmd pipnoise 150\n"
        "travis_cmd sqlite3 ci.db '.read schema.sql'\n"
        "travis_cmd sqlite3 ci.db '.read seed.sql'\ntravis_cmd testnoise 200\n",
        ("no such column: emial",),
    ),
)
