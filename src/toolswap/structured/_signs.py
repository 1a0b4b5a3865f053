"""Failure signs: the fields whose value says a record failed (an ``error`` member that
is set, a ``status`` naming a failure, a non-zero exit code, ``ok: false``) and the words
that name a failure. Which sign is rare enough to be an anomaly is decided when the outline
is rendered (a sign most records carry is the norm, not a failure).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["_FAILURE_WORD", "_MAX_FAILURES", "_SIGN_KEYS", "_failure_signs", "_signs_first"]


_MAX_FAILURES = 8


_ERROR_KEYS = frozenset(
    {
        "error",
        "errors",
        "exception",
        "exceptions",
        "failure",
        "failures",
        "problems",
        "fatal",
    }
)
_STATUS_KEYS = frozenset(
    {"status", "state", "result", "outcome", "conclusion", "level", "severity", "loglevel"}
)
_EXIT_KEYS = frozenset(
    {"exit_code", "exitcode", "returncode", "return_code", "exit_status", "exitstatus", "rc"}
)
_SUCCESS_KEYS = frozenset({"ok", "success", "succeeded", "passed"})
_FAILURE_WORD = re.compile(
    r"(?i)\b(?:fail(?:ed|ure|ing)?|errors?|errored|fatal|crash(?:ed)?|panic(?:ked)?|"
    r"abort(?:ed)?|time[ _-]?out|timed[ _-]?out|critical|exception|broken|denied)\b"
)


_SIGN_KEYS = frozenset(
    variant
    for key in _ERROR_KEYS | _STATUS_KEYS | _EXIT_KEYS | _SUCCESS_KEYS
    for variant in (key, key.title(), key.upper())
)


_DIGITS = re.compile(r"-?[0-9]{1,20}")


def _as_number(value: object) -> object:
    """A value written as a whole number's digits (a table cell ``01``, an exit code as
    text) as that number, so ``00`` is no error and ``01`` a non-zero exit; others as
    they are."""
    if type(value) is str and _DIGITS.fullmatch(value):
        return int(value)
    return value


def _failure_signs(key: str, value: object, why: list[str]) -> None:
    name = key.lower()
    if name in _ERROR_KEYS or name in _EXIT_KEYS:
        value = _as_number(value)
    if name in _ERROR_KEYS:
        if value not in (None, False, 0, "", [], {}):
            why.append(f"{key} field")
    elif name in _STATUS_KEYS:
        if isinstance(value, str) and _FAILURE_WORD.search(value):
            why.append(f"{key}={value[:40]}")
    elif name in _EXIT_KEYS:
        if isinstance(value, int) and not isinstance(value, bool) and value != 0:
            why.append(f"{key}={value}")
    elif name in _SUCCESS_KEYS and value is False:
        why.append(f"{key}=false")


def _signs_first(value: dict[Any, Any]) -> dict[Any, Any]:
    """The record with the fields that carry a failure sign first: a record cut for room
    still shows why it was listed."""
    why: list[str] = []
    signed = []
    for key, item in value.items():
        if key in _SIGN_KEYS or str(key).lower() in _SIGN_KEYS:
            _failure_signs(str(key), item, why)
            if why:
                signed.append(key)
                why.clear()
    if not signed or signed == list(value)[: len(signed)]:
        return value
    return {**{key: value[key] for key in signed}, **value}
