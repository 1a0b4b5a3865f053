"""Thresholds and preview sizes, with the spec's defaults and environment overrides.

Environment (``TOOLSWAP_*`` wins where both name the same thing):

- ``BASH_MAX_OUTPUT_LENGTH`` / ``TOOLSWAP_BASH_MAX_CHARS``: bash output over this many
  characters is externalized (default 30000).
- ``CODEBUDDY_TOOL_RESULT_THRESHOLD_KB`` / ``TOOLSWAP_THRESHOLD_KB``: other tools over this
  many KiB of UTF-8 (default 50).
- ``TOOLSWAP_TOOL_THRESHOLDS``: per-tool settings, comma separated:
  ``pytest=200kb,grep=20000chars,secret_tool=never,mcp_x=0`` (``never`` keeps a tool
  inline whatever its size; ``0`` externalizes any non-empty output).
- ``TOOLSWAP_HEAD_BYTES`` / ``TOOLSWAP_TAIL_BYTES``: pointer preview sizes (6144 / 24576).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ._utf8 import encode_output, utf8_chars
from .errors import ConfigurationError

__all__ = ["ExternalizerSettings", "ToolThreshold", "parse_threshold"]

POINTER_MAX_BYTES = 32 * 1024
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


_THRESHOLD = re.compile(
    r"(?i)^\s*(?:(never)|([0-9]+)\s*(b|bytes|k|kb|kib|m|mb|mib|c|chars|characters)?)\s*$"
)
_SCALE = {"k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20}


def parse_threshold(text: str) -> ToolThreshold:
    """``20000`` (bytes), ``50kb``, ``1mb``, ``30000chars`` or ``never``.

    Raises:
        ConfigurationError: the text is none of those forms.
    """
    match = _THRESHOLD.match(text)
    if match is None:
        raise ConfigurationError(
            f"{text!r} is not a threshold: use bytes (20000), KiB (50kb), MiB (1mb), "
            "characters (30000chars) or never"
        )
    if match.group(1):
        return ToolThreshold(never=True)
    amount = int(match.group(2))
    unit = (match.group(3) or "b").lower()
    if unit in ("c", "chars", "characters"):
        return ToolThreshold(max_chars=amount)
    return ToolThreshold(max_bytes=amount * _SCALE.get(unit, 1))


def _parse_tool_rules(raw: str) -> dict[str, ToolThreshold]:
    rules: dict[str, ToolThreshold] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        tool, sep, rule = item.partition("=")
        tool = tool.strip()
        if not sep or not tool or any(ch.isspace() for ch in tool):
            raise ConfigurationError(
                f"TOOLSWAP_TOOL_THRESHOLDS entry {item!r} is not 'tool=never', 'tool=N', "
                "'tool=NKB', 'tool=NMB' or 'tool=Nchars'"
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
    tail_bytes: int = 24 * 1024
    salient_bytes: int = 6 * 1024
    """Budget for the failure lines listed from the omitted middle (never more than the
    part they stand for). When the pointer would otherwise exceed 32 KiB it is taken from
    the head (down to 2 KiB), then from the tail."""
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
    bash_tools: frozenset[str] = frozenset({"bash"})
    tools: Mapping[str, ToolThreshold] = field(default_factory=dict)
    """Per-tool rules, by exact tool name; they win over the bash and default thresholds."""

    def __post_init__(self) -> None:
        for name in (
            "bash_max_chars",
            "threshold_bytes",
            "head_bytes",
            "tail_bytes",
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
        for tool, rule in self.tools.items():
            if not isinstance(rule, ToolThreshold):
                raise ConfigurationError(f"tools[{tool!r}] must be a ToolThreshold")

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
            (("TOOLSWAP_HEAD_BYTES",), "head_bytes", 1),
            (("TOOLSWAP_TAIL_BYTES",), "tail_bytes", 1),
        ):
            for name in names:  # later names win
                raw = env.get(name)
                if raw is not None and raw.strip():
                    changes[attr] = _positive_int(name, raw) * scale
        raw_rules = env.get("TOOLSWAP_TOOL_THRESHOLDS")
        if raw_rules:
            changes["tools"] = _parse_tool_rules(raw_rules)
        return replace(settings, **changes) if changes else settings  # type: ignore[arg-type]

    def rule_for(self, tool_name: str) -> ToolThreshold:
        """The rule that decides ``tool_name``'s outputs."""
        rule = self.tools.get(tool_name)
        if rule is not None:
            return rule
        if tool_name.lower() in self.bash_tools:
            return ToolThreshold(max_chars=self.bash_max_chars)
        return ToolThreshold(max_bytes=self.threshold_bytes)
