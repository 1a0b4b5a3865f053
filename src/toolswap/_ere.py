"""Grep patterns: Python regular-expression syntax, restricted to what runs in linear time,
translated to a POSIX extended regular expression for GNU ``grep -E`` in the C locale.

Python's own ``re`` backtracks: ``(a+)+$`` on a line of ``a``s takes exponential time. GNU
grep runs a pattern without backreferences as a DFA, in time linear in the input. So a
pattern is parsed with Python's parser (the syntax and the error messages callers know),
checked for the constructs no automaton can run (backreferences, lookaround, conditionals,
atomic groups, possessive quantifiers: refused with :class:`ArtifactPatternError`), and
written out as ERE. Matching is per line and per byte: ``\\d``, ``\\w`` and ``\\s`` are
ASCII classes, ``.`` matches one byte, and a non-ASCII character matches its UTF-8 bytes.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .errors import ArtifactPatternError

__all__ = [
    "MAX_PATTERN_CHARS",
    "Translated",
    "check_searchable",
    "is_literal",
    "translate",
]

# The parser is private to ``re`` but has kept its tree format since Python 2 (``sre_parse``);
# a tree it does not recognise is refused, never guessed at.
_parser: Any = importlib.import_module("re._parser")
_consts: Any = importlib.import_module("re._constants")

MAX_PATTERN_CHARS = 2000
"""Longest pattern accepted (an automaton's size grows with its pattern)."""
_MAX_REPEAT = 1000
MAX_EXPANDED = 20_000
"""Positions a pattern may stand for once its counted repeats are written out:
``(.{1,1000}){1,1000}`` is a million, which makes grep build an automaton of gigabytes."""
"""Largest counted repetition, as in RE2: ``x{5000}`` would build a huge automaton."""

_ERE_SPECIAL = frozenset(b".[]\\()*+?{}|^$")
_WORD = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_SPACE = frozenset(b" \t\n\r\f\v")
_DIGIT = frozenset(b"0123456789")
_ALL = frozenset(range(256))
_CATEGORIES = {
    "CATEGORY_DIGIT": _DIGIT,
    "CATEGORY_NOT_DIGIT": _ALL - _DIGIT,
    "CATEGORY_SPACE": _SPACE,
    "CATEGORY_NOT_SPACE": _ALL - _SPACE,
    "CATEGORY_WORD": _WORD,
    "CATEGORY_NOT_WORD": _ALL - _WORD,
}
_ANCHORS = {
    "AT_BEGINNING": b"^",
    "AT_BEGINNING_STRING": b"^",
    "AT_END": b"$",
    "AT_END_STRING": b"$",
    "AT_BOUNDARY": b"\\b",
    "AT_NON_BOUNDARY": b"\\B",
}
_NOT_LINEAR = {
    "GROUPREF": "a backreference",
    "GROUPREF_EXISTS": "a conditional group (?(...)...)",
    "ASSERT": "a lookahead or lookbehind",
    "ASSERT_NOT": "a negative lookahead or lookbehind",
    "ATOMIC_GROUP": "an atomic group (?>...)",
    "POSSESSIVE_REPEAT": "a possessive quantifier",
}


@dataclass(frozen=True, slots=True)
class Translated:
    """A pattern ready for ``grep -E`` (``LC_ALL=C``)."""

    ere: bytes
    ignore_case: bool
    """Pass ``-i``: the whole pattern ignores case (scoped ``(?i:...)`` is folded in ``ere``)."""


def is_literal(pattern: str) -> bool:
    """True when ``pattern`` means the same as a plain string (no regex syntax at all)."""
    return not any(c in ".^$*+?{}[]\\|()" for c in pattern)


def check_searchable(pattern: str) -> None:
    """Refuse what can never match inside one line or cannot be passed to grep."""
    if not isinstance(pattern, str) or not pattern:
        raise ArtifactPatternError("pattern must be a non-empty string")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ArtifactPatternError(
            f"the pattern is {len(pattern)} characters long; at most {MAX_PATTERN_CHARS} "
            "are accepted: search for a shorter, distinctive part"
        )
    if "\n" in pattern or "\x00" in pattern:
        raise ArtifactPatternError(
            "the pattern contains a newline or NUL character; patterns match within one line"
        )


def translate(pattern: str, *, ignore_case: bool = False) -> Translated:
    """The ERE for a Python-syntax ``pattern``.

    Raises:
        ArtifactPatternError: the pattern is invalid, or uses a construct that cannot run
            in linear time (the message names it and says what to use instead).
    """
    check_searchable(pattern)
    try:
        re.compile(pattern)
        tree = _parser.parse(pattern)
    except re.error as exc:
        raise ArtifactPatternError(f"invalid pattern {pattern!r}: {exc}") from None
    except RecursionError:
        raise ArtifactPatternError(f"invalid pattern {pattern!r}: nested too deeply") from None
    size = _expanded(tree)
    if size > MAX_EXPANDED:
        raise ArtifactPatternError(
            f"pattern {pattern[:200]!r} stands for about {size} positions once its counted "
            f"repeats are written out (at most {MAX_EXPANDED}); use smaller counts, or '*' and "
            "'+' instead of nested counts"
        )
    ignore_case = ignore_case or bool(tree.state.flags & re.IGNORECASE)
    scoped = _has_scoped_case(tree)
    emitter = _Emitter(pattern)
    # grep -i is faster than folding every letter; fold only when (?i:...) scopes exist.
    ere = emitter.sequence(tree, fold=ignore_case and scoped)
    return Translated(ere=ere, ignore_case=ignore_case and not scoped)


def _name(op: Any) -> str:
    return str(op)


def _expanded(items: Iterable[Any]) -> int:
    """How many positions ``items`` stand for with every counted repeat written out."""
    total = 0
    for op, av in items:
        name = _name(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, sub = av
            times = low if high == _consts.MAXREPEAT else high
            total += _expanded(sub) * max(times, 1)
        elif name == "SUBPATTERN":
            total += _expanded(av[3])
        elif name == "BRANCH":
            total += sum(_expanded(alt) for alt in av[1])
        else:
            total += 1
    return total


def _has_scoped_case(items: Iterable[Any]) -> bool:
    for op, av in items:
        name = _name(op)
        if name == "SUBPATTERN":
            _, add, remove, sub = av
            if (add | remove) & re.IGNORECASE or _has_scoped_case(sub):
                return True
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            if _has_scoped_case(av[2]):
                return True
        elif name == "BRANCH" and any(_has_scoped_case(alt) for alt in av[1]):
            return True
    return False


def _fold(values: Iterable[int]) -> set[int]:
    out = set(values)
    for v in list(out):
        if 65 <= v <= 90 or 97 <= v <= 122:
            out.add(v ^ 0x20)
    return out


class _Emitter:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def refuse(self, what: str) -> ArtifactPatternError:
        return ArtifactPatternError(
            f"pattern {self.pattern!r} uses {what}, which cannot run in linear time on a large "
            "artifact; search for the parts separately, or use a plain string (fixed)"
        )

    def unsupported(self, what: str) -> ArtifactPatternError:
        return ArtifactPatternError(f"pattern {self.pattern!r}: {what} is not supported in grep")

    def sequence(self, items: Iterable[Any], *, fold: bool) -> bytes:
        return b"".join(self.item(op, av, fold=fold) for op, av in items)

    def atom(self, items: list[Any], *, fold: bool) -> bytes:
        """``items`` as one unit that a quantifier can follow."""
        body = self.sequence(items, fold=fold)
        if len(items) == 1 and _name(items[0][0]) not in ("MAX_REPEAT", "MIN_REPEAT", "AT"):
            return body  # a literal, an escape, a bracket, ``.`` or a group
        return b"(" + body + b")"

    def item(self, op: Any, av: Any, *, fold: bool) -> bytes:
        name = _name(op)
        if name in _NOT_LINEAR:
            raise self.refuse(_NOT_LINEAR[name])
        if name == "LITERAL":
            return self.literal(av, fold=fold)
        if name == "NOT_LITERAL":
            if av >= 128:
                raise self.unsupported("a negated non-ASCII character")
            return self.bracket(_ALL - (_fold([av]) if fold else {av}))
        if name == "ANY":
            return b"."
        if name == "IN":
            return self.klass(av, fold=fold)
        if name == "AT":
            return _ANCHORS[_name(av)]
        if name == "BRANCH":
            return b"(" + b"|".join(self.sequence(alt, fold=fold) for alt in av[1]) + b")"
        if name == "SUBPATTERN":
            _, add, remove, sub = av
            if add & re.IGNORECASE:
                fold = True
            if remove & re.IGNORECASE:
                fold = False
            return b"(" + self.sequence(sub, fold=fold) + b")"
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            # Lazy and greedy repeats match the same lines; only the match's extent differs.
            low, high, sub = av
            maxrepeat = _consts.MAXREPEAT
            if low > _MAX_REPEAT or (high != maxrepeat and high > _MAX_REPEAT):
                raise ArtifactPatternError(
                    f"pattern {self.pattern!r} repeats something more than {_MAX_REPEAT} "
                    "times; use a smaller count"
                )
            body = self.atom(list(sub), fold=fold)
            if (low, high) == (0, maxrepeat):
                return body + b"*"
            if (low, high) == (1, maxrepeat):
                return body + b"+"
            if (low, high) == (0, 1):
                return body + b"?"
            if high == maxrepeat:
                return body + b"{%d,}" % low
            if low == high:
                return body + b"{%d}" % low
            return body + b"{%d,%d}" % (low, high)
        raise self.unsupported(f"the construct {name}")

    def literal(self, code: int, *, fold: bool) -> bytes:
        if code >= 128:
            return b"(" + chr(code).encode() + b")"
        if fold and (65 <= code <= 90 or 97 <= code <= 122):
            return self.bracket(_fold([code]))
        if code in _ERE_SPECIAL:
            return b"\\" + bytes([code])
        return bytes([code])

    def klass(self, items: list[Any], *, fold: bool) -> bytes:
        members: set[int] = set()
        wide: list[int] = []
        negate = False
        for op, av in items:
            name = _name(op)
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                if av >= 128:
                    wide.append(av)
                else:
                    members.add(av)
            elif name == "RANGE":
                low, high = av
                if high >= 128:
                    raise self.unsupported("a range of non-ASCII characters in [...]")
                members.update(range(low, high + 1))
            elif name == "CATEGORY":
                members |= _CATEGORIES[_name(av)]
            else:
                raise self.unsupported(f"{name} inside [...]")
        if fold:
            members = _fold(members)
        if negate:
            if wide:
                raise self.unsupported("a non-ASCII character in a negated [^...]")
            return self.bracket(_ALL - members)
        if not wide:
            return self.bracket(members)
        alternatives = [chr(c).encode() for c in wide]
        if members:
            alternatives.append(self.bracket(members))
        return b"(" + b"|".join(alternatives) + b")"

    def bracket(self, members: set[int] | frozenset[int]) -> bytes:
        """A bracket expression matching exactly one byte of ``members`` (never a newline)."""
        members = set(members) - {10}
        if not members:
            raise self.unsupported("a character class that matches nothing")
        if 0 in members:
            # NUL cannot be passed in an argument: list the complement instead.
            rest = _ALL - members - {10}
            return b"[^" + _listing(rest) + b"]" if rest else b"."
        if len(members) == 1 and min(members) < 128:
            return self.literal(min(members), fold=False)
        return b"[" + _listing(members) + b"]"


def _listing(members: set[int] | frozenset[int]) -> bytes:
    """The inside of a bracket expression: ``]`` first, ``[``, ``^`` and ``-`` last, ranges
    between (POSIX brackets have no escapes; a backslash is literal)."""
    plain = sorted(c for c in members if c not in b"[]^-")
    out = bytearray(b"]" if 93 in members else b"")
    i = 0
    while i < len(plain):
        j = i
        while j + 1 < len(plain) and plain[j + 1] == plain[j] + 1:
            j += 1
        if j - i >= 2:
            out += bytes([plain[i], 45, plain[j]])
        else:
            out += bytes(plain[i : j + 1])
        i = j + 1
    out += bytes(c for c in b"[^-" if c in members)
    if out == b"^-":
        out = bytearray(b"-^")  # "[^-]" would read as a negation
    return bytes(out)
