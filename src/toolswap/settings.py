"""Thresholds and preview sizes, with the spec's defaults and environment overrides.

Environment (``TOOLSWAP_*`` wins where both name the same thing):

- ``BASH_MAX_OUTPUT_LENGTH`` / ``TOOLSWAP_BASH_MAX_CHARS``: bash output over this many
  characters is externalized (default 30000).
- ``CODEBUDDY_TOOL_RESULT_THRESHOLD_KB`` / ``TOOLSWAP_THRESHOLD_KB``: other tools over this
  many KiB of UTF-8 (default 50).
- ``TOOLSWAP_TOOL_THRESHOLDS``: per-tool settings, comma separated:
  ``pytest=200kb,grep=20000chars,secret_tool=never,mcp_x=0`` (``never`` keeps a tool
  inline whatever its size; ``0`` externalizes any non-empty output).
- ``TOOLSWAP_POINTER_BYTES``: the pointer budget (default 32 KiB), a size, optionally with
  per-tool budgets after it: ``8K``, ``16K,pytest=32K,grep=4K``. The pointer never exceeds
  it; head, failure lines and tail share it by what the output holds.
- ``TOOLSWAP_HEAD_BYTES`` / ``TOOLSWAP_TAIL_BYTES``: the most the pointer's head and tail
  show (6144 / 24576), as sizes (``6144``, ``6K``).
- ``TOOLSWAP_OUTLINE``: ``off`` (or ``0``, ``false``, ``no``) captures JSON, JSON Lines and
  tables as text, with no structure outline in the pointer (default ``on``).
- ``TOOLSWAP_OUTLINE_PROCESS``: ``off`` outlines on a thread of the capturing process only,
  never in a helper process (default ``on``).
- ``TOOLSWAP_PREWARM``: ``off`` has ``toolswap run`` import what a capture needs only when
  the output asks for it, not ahead while the command is quiet before its first output
  (default ``on``).

Sizes and durations have one grammar each, here (:func:`parse_size`, :func:`parse_duration`),
used by the environment and the CLI alike; ``docs/configuration.md`` spells them out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ._utf8 import encode_output, utf8_chars
from .errors import ClockError, ConfigurationError

if TYPE_CHECKING:
    from datetime import datetime
    from fractions import Fraction

__all__ = [
    "POINTER_MAX_BYTES",
    "POINTER_MIN_BYTES",
    "ExternalizerSettings",
    "ToolThreshold",
    "parse_duration",
    "parse_pointer_bytes",
    "parse_size",
    "parse_threshold",
    "require_aware",
]

POINTER_MAX_BYTES = 32 * 1024
"""The default pointer budget (the spec's 6 KiB head + 24 KiB tail and the frame)."""
POINTER_MIN_BYTES = 1024
"""The smallest pointer budget accepted: the frame (source ID, size, how to read more)."""
POINTER_LARGEST_BYTES = 1 << 20
SUMMARY_MAX_CHARS = 240


@dataclass(frozen=True, slots=True)
class ToolThreshold:
    """When one tool's output is externalized. Exactly one rule applies."""

    max_chars: int | None = None
    """Externalize when the output has more than this many characters."""
    max_bytes: int | None = None
    """Externalize when the output has more than this many bytes of UTF-8."""
    never: bool = False
    """Never externalize this tool's output (it is returned inline whatever its size)."""

    def __post_init__(self) -> None:
        rules = (self.max_chars is not None) + (self.max_bytes is not None) + self.never
        if rules != 1:
            raise ConfigurationError(
                "a ToolThreshold takes exactly one of max_chars, max_bytes, never"
            )
        for value in (self.max_chars, self.max_bytes):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ConfigurationError("thresholds must be non-negative integers")

    def exceeded(self, size_bytes: int, chars: int) -> bool:
        """Whether an output of ``size_bytes`` bytes of UTF-8 and ``chars`` characters is
        over this rule, so it is externalized. An output exactly at the threshold stays
        inline.

        Only the count the rule names is compared (characters for ``max_chars``, bytes
        for ``max_bytes``), so a caller need not count the other.
        """
        if self.never:
            return False
        if self.max_chars is not None:
            return chars > self.max_chars
        assert self.max_bytes is not None
        return size_bytes > self.max_bytes

    def exceeded_by(self, output: str | bytes) -> bool:
        """:meth:`exceeded` for an output held in memory: text is measured as the UTF-8
        its artifact would hold, bytes as UTF-8 text. Counts only what the rule needs."""
        if self.never:
            return False
        if isinstance(output, str):
            if self.max_chars is not None:
                return len(output) > self.max_chars
            assert self.max_bytes is not None
            if len(output) > self.max_bytes:
                return True  # every character takes at least one byte
            if len(output) * 4 <= self.max_bytes:
                return False  # and at most four
            return len(encode_output(output)) > self.max_bytes
        data = bytes(output)
        return self.exceeded(len(data), utf8_chars(data) if self.max_chars is not None else 0)


def _positive_int(name: str, raw: str, *, minimum: int = 0) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigurationError(f"{name}={raw!r} must be at least {minimum}")
    return value


def require_aware(when: object) -> datetime:
    """``when``, once it is a timezone-aware datetime: every clock toolswap is given (the
    ``now`` of an externalizer, journal, owner or cleanup) is checked here.

    Raises:
        ClockError: ``when`` is not a datetime, or it has no UTC offset.
    """
    from datetime import UTC, datetime  # here: an inline capture reads no clock

    if not isinstance(when, datetime) or when.utcoffset() is None:
        raise ClockError(
            f"the clock gave {when!r}: clocks and now= arguments must give timezone-aware "
            "datetimes, for example datetime.now(UTC)"
        )
    try:
        when.astimezone(UTC)
    except OverflowError:  # datetime.min at +01:00 is before year 1 in UTC
        raise ClockError(f"the clock gave {when!r}, which no UTC time can hold") from None
    return when


def _env_size(name: str, raw: str) -> int:
    try:
        return parse_size(raw)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{name}: {exc}") from None


# Patterns are compiled on first use (re's cache): only when a setting is given.
_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_SIZE = rf"(?i)^\s*{_NUMBER}\s*(bytes|b|[kmgt]i?b?)?\s*$"
_SIZE_POWER = {"b": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_DURATION = rf"(?i)^\s*{_NUMBER}\s*([smhdw])?\s*$"
_DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_CHARS = r"(?i)^\s*([0-9]+)\s*(c|chars|characters)\s*$"


def _amount(pattern: str, text: str) -> tuple[Fraction, str] | None:
    """The number and the unit (lowercase, ``""`` when none) of ``text``, or None."""
    match = re.match(pattern, text)
    if match is None:
        return None
    from fractions import Fraction  # only when a size is given: not on every start-up

    try:
        number = Fraction(match.group(1))
    except ValueError:  # more digits than Python turns into an int
        return None
    return number, (match.group(2) or "").lower()


def _measure(pattern: str, text: str, expected: str) -> tuple[Fraction, str]:
    """:func:`_amount`, refusing ``text`` that is not ``expected`` (what it must be)."""
    parsed = _amount(pattern, text)
    if parsed is None:
        raise ConfigurationError(f"{text!r} is not {expected}")
    return parsed


def parse_size(text: str) -> int:
    """Bytes from a size: ``1048576``, ``512B``, ``50K``, ``50KB``, ``50KiB``, ``500M``, ``2G``.

    A number (decimals allowed: ``1.5G``) and an optional unit, case-insensitive, spaces
    allowed around them. ``B`` or ``bytes``; ``K``, ``KB``, ``Ki``, ``KiB`` are 1024 bytes,
    and likewise ``M`` (1024²), ``G`` (1024³) and ``T`` (1024⁴). No unit means bytes; a
    fraction of a byte is dropped.

    Raises:
        ConfigurationError: the text is not such a size.
    """
    number, unit = _measure(
        _SIZE,
        text,
        "a size: use bytes (1048576), or a number and a unit "
        "B, K/KB/KiB, M/MB/MiB, G/GB/GiB or T/TB/TiB (50KiB, 500M, 1.5G)",
    )
    return int(number * 1024 ** _SIZE_POWER[(unit or "b")[0]])


def parse_duration(text: str) -> float:
    """Seconds from a duration: ``90``, ``90s``, ``30m``, ``24h``, ``7d``, ``2w``.

    A number (decimals allowed: ``1.5h``) and an optional unit, case-insensitive: ``s``
    seconds, ``m`` minutes, ``h`` hours, ``d`` days, ``w`` weeks. No unit means seconds.

    Raises:
        ConfigurationError: the text is not such a duration.
    """
    number, unit = _measure(
        _DURATION,
        text,
        "a duration: use seconds (90), or a number and a unit s, m, h, d or w "
        "(90s, 30m, 24h, 7d, 2w)",
    )
    try:
        return float(number * _DURATION_SECONDS[unit or "s"])
    except OverflowError:
        raise ConfigurationError(f"{text!r} is too long a duration") from None


def parse_threshold(text: str) -> ToolThreshold:
    """A tool's rule: a size (``20000``, ``50kb``, ``1mb``, ``2G``: see :func:`parse_size`),
    characters (``30000chars``, ``30000c``) or ``never``.

    Raises:
        ConfigurationError: the text is none of those forms.
    """
    if text.strip().lower() == "never":
        return ToolThreshold(never=True)
    chars = _amount(_CHARS, text)
    if chars is not None:
        return ToolThreshold(max_chars=int(chars[0]))
    try:
        return ToolThreshold(max_bytes=parse_size(text))
    except ConfigurationError:
        raise ConfigurationError(
            f"{text!r} is not a threshold: use a size (20000 bytes, 50kb, 1mb, 2G), "
            "characters (30000chars) or never"
        ) from None


def _pointer_budget(name: str, text: str) -> int:
    value = parse_size(text)
    if not POINTER_MIN_BYTES <= value <= POINTER_LARGEST_BYTES:
        raise ConfigurationError(
            f"{name}={text.strip()!r}: a pointer budget is between {POINTER_MIN_BYTES} bytes "
            f"and 1 MiB (8K, 32KiB)"
        )
    return value


def parse_pointer_bytes(text: str) -> tuple[int | None, dict[str, int]]:
    """``TOOLSWAP_POINTER_BYTES``: a budget and/or per-tool budgets, comma separated:
    ``8K``, ``16K,pytest=32K,grep=4K``, ``grep=4K`` (each a :func:`parse_size`).

    Returns:
        (the budget for every other tool, or None when not given; the per-tool budgets).

    Raises:
        ConfigurationError: an entry is not a size, or it is under 1 KiB or over 1 MiB.
    """
    default: int | None = None
    tools: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        tool, sep, size = item.rpartition("=")
        tool = tool.strip()
        if sep and (not tool or any(ch.isspace() for ch in tool)):
            raise ConfigurationError(
                f"TOOLSWAP_POINTER_BYTES entry {item!r} is not 'SIZE' or 'tool=SIZE'"
            )
        try:
            value = _pointer_budget("TOOLSWAP_POINTER_BYTES", size)
        except ConfigurationError as exc:
            raise ConfigurationError(f"TOOLSWAP_POINTER_BYTES entry {item!r}: {exc}") from None
        if sep:
            tools[tool] = value
        else:
            default = value
    return default, tools


def _parse_tool_rules(raw: str) -> dict[str, ToolThreshold]:
    rules: dict[str, ToolThreshold] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        tool, sep, rule = item.partition("=")
        tool = tool.strip()
        if not sep or not tool or any(ch.isspace() for ch in tool):
            raise ConfigurationError(
                f"TOOLSWAP_TOOL_THRESHOLDS entry {item!r} is not 'tool=never', 'tool=SIZE' "
                "(N, NKB, NMB, NGB) or 'tool=Nchars'"
            )
        try:
            rules[tool] = parse_threshold(rule)
        except ConfigurationError as exc:
            raise ConfigurationError(f"TOOLSWAP_TOOL_THRESHOLDS entry {item!r}: {exc}") from None
    return rules


@dataclass(frozen=True, slots=True)
class ExternalizerSettings:
    """Thresholds and pointer sizes. Defaults are the spec's."""

    bash_max_chars: int = 30_000
    threshold_bytes: int = 50 * 1024
    head_bytes: int = 6 * 1024
    """The most the pointer's head shows (less when the budget is needed elsewhere)."""
    tail_bytes: int = 24 * 1024
    """The most the pointer's tail shows (less when failure lines explain the failure or
    the budget is small)."""
    pointer_bytes: int = POINTER_MAX_BYTES
    """The pointer budget: no pointer is longer (UTF-8 bytes, frame included). Head,
    failure lines and tail share it by what the output holds; an output with nothing that
    looks like a failure gets a small pointer that shows its shape."""
    tool_pointer_bytes: Mapping[str, int] = field(default_factory=dict)
    """Per-tool budgets, by exact tool name; they win over ``pointer_bytes``."""
    salient_bytes: int = POINTER_LARGEST_BYTES
    """The most the failure lines listed from the omitted middle may take (the budget
    bounds them first; never more than the part they stand for)."""
    salient_scan_bytes: int = 16 << 20
    """How far into the output the Python failure-line scan reads.

    That scan looks for nine keywords at about 250 MB/s. Where the system's ``grep`` runs,
    it takes over after the first MiB and searches the rest of the output on another core
    while it streams in (spliced from the artifact file); only without it does the scan
    stop here, and the pointer says so."""
    salient_tail_scan_bytes: int = 8 << 20
    """Without ``grep``: how many of a long output's last bytes the Python scan reads too
    (read back, and held in memory while they are scanned). With ``grep``, a non-zero
    value lets it search past ``salient_scan_bytes``; zero stops every scan there."""
    structured_outline: bool = True
    """Outline JSON, JSON Lines, CSV and TSV outputs in the pointer (off: treated as text;
    ``query_artifact`` still reads them)."""
    outline_process: bool = True
    """Compute outlines in a helper process, on another core, beside the rest of the
    capture (``structured.outline_process``): the first structured output of a process
    starts it, and the outlines after it run there (off: each on a thread of the capturing
    process, holding its GIL; a process that captures once, as ``toolswap run``, gains
    nothing from a helper)."""
    prewarm: bool = True
    """``toolswap run``: when the command prints nothing in its first 100 ms, import what a
    capture needs on a helper thread, on a core of its own, until its output arrives
    (``toolswap._prewarm``; off: when the output asks for it, after the command)."""
    bash_tools: frozenset[str] = frozenset({"bash"})
    tools: Mapping[str, ToolThreshold] = field(default_factory=dict)
    """Per-tool rules, by exact tool name; they win over the bash and default thresholds."""

    def __post_init__(self) -> None:
        for name in (
            "bash_max_chars",
            "threshold_bytes",
            "head_bytes",
            "tail_bytes",
            "pointer_bytes",
            "salient_bytes",
            "salient_scan_bytes",
            "salient_tail_scan_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigurationError(f"{name} must be a non-negative integer, not {value!r}")
        if self.head_bytes + self.tail_bytes > POINTER_MAX_BYTES - 1024:
            raise ConfigurationError(
                f"head_bytes + tail_bytes must leave 1 KiB of the {POINTER_MAX_BYTES}-byte "
                "pointer for its header"
            )
        for name in ("structured_outline", "outline_process", "prewarm"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name} must be a bool, not {getattr(self, name)!r}")
        for tool, rule in self.tools.items():
            if not isinstance(rule, ToolThreshold):
                raise ConfigurationError(f"tools[{tool!r}] must be a ToolThreshold")
        for where, budget in (
            ("pointer_bytes", self.pointer_bytes),
            *((f"tool_pointer_bytes[{t!r}]", b) for t, b in self.tool_pointer_bytes.items()),
        ):
            if (
                not isinstance(budget, int)
                or isinstance(budget, bool)
                or not POINTER_MIN_BYTES <= budget <= POINTER_LARGEST_BYTES
            ):
                raise ConfigurationError(
                    f"{where} must be an integer between {POINTER_MIN_BYTES} and "
                    f"{POINTER_LARGEST_BYTES}, not {budget!r}"
                )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ExternalizerSettings:
        """Defaults overridden by the spec's and toolswap's environment variables."""
        env = os.environ if environ is None else environ
        settings = cls()
        changes: dict[str, object] = {}
        for names, attr, scale in (
            (("BASH_MAX_OUTPUT_LENGTH", "TOOLSWAP_BASH_MAX_CHARS"), "bash_max_chars", 1),
            (
                ("CODEBUDDY_TOOL_RESULT_THRESHOLD_KB", "TOOLSWAP_THRESHOLD_KB"),
                "threshold_bytes",
                1024,
            ),
            (("TOOLSWAP_HEAD_BYTES",), "head_bytes", None),
            (("TOOLSWAP_TAIL_BYTES",), "tail_bytes", None),
        ):
            for name in names:  # later names win
                raw = env.get(name)
                if raw is not None and raw.strip():
                    changes[attr] = (
                        _env_size(name, raw) if scale is None else _positive_int(name, raw) * scale
                    )
        for name, attr in (
            ("TOOLSWAP_OUTLINE", "structured_outline"),
            ("TOOLSWAP_OUTLINE_PROCESS", "outline_process"),
            ("TOOLSWAP_PREWARM", "prewarm"),
        ):
            raw_switch = env.get(name)
            if raw_switch is not None and raw_switch.strip():
                word = raw_switch.strip().lower()
                if word in ("off", "0", "false", "no"):
                    changes[attr] = False
                elif word not in ("on", "1", "true", "yes"):
                    raise ConfigurationError(f"{name}={raw_switch!r}: expected 'on' or 'off'")
        raw_rules = env.get("TOOLSWAP_TOOL_THRESHOLDS")
        if raw_rules:
            changes["tools"] = _parse_tool_rules(raw_rules)
        raw_budget = env.get("TOOLSWAP_POINTER_BYTES")
        if raw_budget and raw_budget.strip():
            budget, per_tool = parse_pointer_bytes(raw_budget)
            if budget is not None:
                changes["pointer_bytes"] = budget
            if per_tool:
                changes["tool_pointer_bytes"] = per_tool
        return replace(settings, **changes) if changes else settings  # type: ignore[arg-type]

    def pointer_bytes_for(self, tool_name: str) -> int:
        """The pointer budget for ``tool_name``'s outputs."""
        return self.tool_pointer_bytes.get(tool_name, self.pointer_bytes)

    def rule_for(self, tool_name: str) -> ToolThreshold:
        """The rule that decides ``tool_name``'s outputs."""
        rule = self.tools.get(tool_name)
        if rule is not None:
            return rule
        if tool_name.lower() in self.bash_tools:
            return ToolThreshold(max_chars=self.bash_max_chars)
        return ToolThreshold(max_bytes=self.threshold_bytes)
