"""Thresholds: the spec's defaults, environment overrides, per-tool rules."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolswap import (
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    ConfigurationError,
    ExternalizerSettings,
    InlineToolResult,
    SqliteMemoryOwner,
    ToolResultExternalizer,
    ToolThreshold,
    apply_cleanup,
    apply_cleanup_from_journal,
    plan_cleanup,
    plan_cleanup_from_journal,
)
from toolswap._utf8 import encode_output
from toolswap.errors import ClockError
from toolswap.settings import parse_duration, parse_size, parse_threshold, require_aware


def test_defaults_are_the_spec_thresholds_and_preview_sizes() -> None:
    settings = ExternalizerSettings.from_env({})

    assert settings.bash_max_chars == 30_000
    assert settings.threshold_bytes == 50 * 1024
    assert settings.head_bytes == 6 * 1024
    assert settings.tail_bytes == 24 * 1024
    assert settings.rule_for("bash") == ToolThreshold(max_chars=30_000)
    assert settings.rule_for("grep") == ToolThreshold(max_bytes=51_200)


def test_bash_rule_matches_the_tool_name_case_insensitively() -> None:
    assert ExternalizerSettings().rule_for("Bash") == ToolThreshold(max_chars=30_000)


def test_spec_environment_variables_set_the_thresholds() -> None:
    settings = ExternalizerSettings.from_env(
        {"BASH_MAX_OUTPUT_LENGTH": "1000", "CODEBUDDY_TOOL_RESULT_THRESHOLD_KB": "2"}
    )

    assert settings.bash_max_chars == 1000
    assert settings.threshold_bytes == 2048


def test_toolswap_variables_win_over_the_spec_variables() -> None:
    settings = ExternalizerSettings.from_env(
        {
            "BASH_MAX_OUTPUT_LENGTH": "1000",
            "TOOLSWAP_BASH_MAX_CHARS": "500",
            "CODEBUDDY_TOOL_RESULT_THRESHOLD_KB": "2",
            "TOOLSWAP_THRESHOLD_KB": "3",
            "TOOLSWAP_HEAD_BYTES": "100",
            "TOOLSWAP_TAIL_BYTES": "200",
        }
    )

    assert settings.bash_max_chars == 500
    assert settings.threshold_bytes == 3 * 1024
    assert settings.head_bytes == 100
    assert settings.tail_bytes == 200


def test_empty_environment_values_are_ignored() -> None:
    settings = ExternalizerSettings.from_env(
        {
            "BASH_MAX_OUTPUT_LENGTH": "",
            "TOOLSWAP_THRESHOLD_KB": "  ",
            "TOOLSWAP_TOOL_THRESHOLDS": "",
        }
    )

    assert settings == ExternalizerSettings()


def test_per_tool_rules_parse_every_unit_and_never() -> None:
    settings = ExternalizerSettings.from_env(
        {
            "TOOLSWAP_TOOL_THRESHOLDS": (
                "pytest=200kb, grep = 20000chars,secret_tool=never,mcp_x=0,"
                "cat=100,dd=7B,wc=3KiB,ls=9c"
            )
        }
    )

    assert settings.tools == {
        "pytest": ToolThreshold(max_bytes=200 * 1024),
        "grep": ToolThreshold(max_chars=20_000),
        "secret_tool": ToolThreshold(never=True),
        "mcp_x": ToolThreshold(max_bytes=0),
        "cat": ToolThreshold(max_bytes=100),
        "dd": ToolThreshold(max_bytes=7),
        "wc": ToolThreshold(max_bytes=3 * 1024),
        "ls": ToolThreshold(max_chars=9),
    }


def test_per_tool_rules_win_over_the_bash_and_default_thresholds() -> None:
    settings = ExternalizerSettings.from_env(
        {"TOOLSWAP_TOOL_THRESHOLDS": "bash=10kb,grep=5chars", "BASH_MAX_OUTPUT_LENGTH": "99"}
    )

    assert settings.rule_for("bash") == ToolThreshold(max_bytes=10 * 1024)
    assert settings.rule_for("grep") == ToolThreshold(max_chars=5)
    assert settings.rule_for("other") == ToolThreshold(max_bytes=50 * 1024)


@pytest.mark.parametrize(
    "environ",
    [
        {"BASH_MAX_OUTPUT_LENGTH": "lots"},
        {"BASH_MAX_OUTPUT_LENGTH": "-1"},
        {"BASH_MAX_OUTPUT_LENGTH": "1.5"},
        {"CODEBUDDY_TOOL_RESULT_THRESHOLD_KB": "50KB"},
        {"TOOLSWAP_THRESHOLD_KB": "-3"},
        {"TOOLSWAP_HEAD_BYTES": "x"},
        {"TOOLSWAP_HEAD_BYTES": "30000", "TOOLSWAP_TAIL_BYTES": "30000"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "=5"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest=lots"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest=-5"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest=5pb"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest=neverkb"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest=\u0665"},
    ],
)
def test_bad_environment_values_raise_configuration_error(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        ExternalizerSettings.from_env(environ)


@pytest.mark.parametrize(("value", "expected"), [("off", False), ("NO", False), ("on", True)])
def test_toolswap_prewarm_switches_the_imports_ahead(value: str, expected: bool) -> None:
    assert ExternalizerSettings().prewarm is True
    assert ExternalizerSettings.from_env({"TOOLSWAP_PREWARM": value}).prewarm is expected
    with pytest.raises(ConfigurationError, match="TOOLSWAP_PREWARM"):
        ExternalizerSettings.from_env({"TOOLSWAP_PREWARM": "later"})
    with pytest.raises(ConfigurationError, match="prewarm"):
        ExternalizerSettings(prewarm="yes")  # type: ignore[arg-type]


def test_configuration_errors_name_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="BASH_MAX_OUTPUT_LENGTH"):
        ExternalizerSettings.from_env({"BASH_MAX_OUTPUT_LENGTH": "lots"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"max_chars": 1, "max_bytes": 1},
        {"max_bytes": 1, "never": True},
        {"max_chars": -1},
        {"max_bytes": True},
        {"max_bytes": 1.5},
    ],
)
def test_a_tool_threshold_takes_exactly_one_valid_rule(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        ToolThreshold(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bash_max_chars": -1},
        {"threshold_bytes": True},
        {"head_bytes": 20_000, "tail_bytes": 20_000},
        {"tools": {"x": 5}},
    ],
)
def test_invalid_settings_objects_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        ExternalizerSettings(**kwargs)  # type: ignore[arg-type]


def test_externalizer_reads_its_thresholds_from_the_environment(
    session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BASH_MAX_OUTPUT_LENGTH", "10")
    monkeypatch.setenv("CODEBUDDY_TOOL_RESULT_THRESHOLD_KB", "1")
    monkeypatch.setenv("TOOLSWAP_TOOL_THRESHOLDS", "secret=never,tiny=0")
    ext = ToolResultExternalizer(session_dir)

    assert ext.should_externalize("x" * 11, "bash")
    assert not ext.should_externalize("x" * 10, "bash")
    assert ext.should_externalize("x" * 1025, "grep")
    assert not ext.should_externalize("x" * 1024, "grep")
    assert not ext.should_externalize("x" * 10_000_000, "secret")
    assert ext.should_externalize("x", "tiny")
    assert not ext.should_externalize("", "tiny")


def test_externalizer_refuses_a_bad_environment_with_a_clear_error(
    session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSWAP_THRESHOLD_KB", "fifty")

    with pytest.raises(ConfigurationError, match="TOOLSWAP_THRESHOLD_KB"):
        ToolResultExternalizer(session_dir)


def test_tool_rules_and_the_proxy_threshold_share_one_syntax() -> None:
    settings = ExternalizerSettings.from_env(
        {"TOOLSWAP_TOOL_THRESHOLDS": "a=2mb,b=3k,c=40chars,d=never,e=7"}
    )
    assert settings.tools == {
        "a": parse_threshold("2mb"),
        "b": parse_threshold("3kb"),
        "c": parse_threshold("40chars"),
        "d": parse_threshold("never"),
        "e": parse_threshold("7"),
    }
    assert settings.tools["a"].max_bytes == 2 << 20
    assert settings.tools["c"].max_chars == 40


# -- the threshold rule ----------------------------------------------------------------


def test_a_rule_is_exceeded_only_past_its_limit() -> None:
    by_bytes = ToolThreshold(max_bytes=10)
    by_chars = ToolThreshold(max_chars=10)

    assert not by_bytes.exceeded(size_bytes=10, chars=99)
    assert by_bytes.exceeded(size_bytes=11, chars=0)
    assert not by_chars.exceeded(size_bytes=99, chars=10)
    assert by_chars.exceeded(size_bytes=0, chars=11)


def test_a_never_rule_is_never_exceeded() -> None:
    rule = ToolThreshold(never=True)

    assert not rule.exceeded(size_bytes=1 << 40, chars=1 << 40)
    assert not rule.exceeded_by("x" * 100_000)
    assert not rule.exceeded_by(b"\x00" * 100_000)


def test_a_zero_rule_is_exceeded_by_any_non_empty_output() -> None:
    rule = ToolThreshold(max_bytes=0)

    assert rule.exceeded_by("x")
    assert rule.exceeded_by(b"x")
    assert not rule.exceeded_by("")
    assert not rule.exceeded_by(b"")


def test_a_byte_rule_measures_text_as_the_utf8_its_artifact_holds() -> None:
    rule = ToolThreshold(max_bytes=6)

    assert not rule.exceeded_by("ééé")  # 6 bytes
    assert rule.exceeded_by("éééx")  # 7 bytes in 4 characters
    # A byte escaped by os.fsdecode is saved as that one byte again.
    assert not rule.exceeded_by("\udc80" * 6)
    # A lone surrogate cannot be saved as UTF-8: it becomes U+FFFD, three bytes.
    assert not rule.exceeded_by("\ud800" * 2)
    assert rule.exceeded_by("\ud800" * 2 + "x")


def test_a_character_rule_counts_the_characters_of_utf8_bytes() -> None:
    rule = ToolThreshold(max_chars=3)

    assert not rule.exceeded_by("ééé".encode())
    assert rule.exceeded_by("éééé".encode())
    assert not rule.exceeded_by("ééé")
    assert rule.exceeded_by("éééé")


@given(text=st.text(max_size=40), limit=st.integers(min_value=0, max_value=120))
def test_text_and_its_utf8_bytes_are_measured_alike(text: str, limit: int) -> None:
    for rule in (ToolThreshold(max_bytes=limit), ToolThreshold(max_chars=limit)):
        expected = rule.exceeded(size_bytes=len(text.encode()), chars=len(text))
        assert rule.exceeded_by(text) is expected
        assert rule.exceeded_by(text.encode()) is expected


@given(
    text=st.text(st.characters() | st.sampled_from("\ud800\udc7f\udc80\udcff\udfff"), max_size=40),
    limit=st.integers(min_value=0, max_value=120),
)
def test_any_text_is_measured_as_the_bytes_it_is_saved_as(text: str, limit: int) -> None:
    rule = ToolThreshold(max_bytes=limit)

    assert rule.exceeded_by(text) is (len(encode_output(text)) > limit)


def test_the_externalizer_decides_with_the_tools_rule(session_dir: Path) -> None:
    settings = ExternalizerSettings(tools={"t": ToolThreshold(max_bytes=4)})
    ext = ToolResultExternalizer(session_dir, settings=settings)

    assert not ext.should_externalize("éé", "t")
    assert ext.should_externalize("ééx", "t")
    assert isinstance(ext.process("éé", "t"), InlineToolResult)
    assert not isinstance(ext.process("ééx", "t"), InlineToolResult)


# -- the size and duration grammar ---------------------------------------------------

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 0),
        ("1048576", 1_048_576),
        ("7B", 7),
        ("7b", 7),
        ("20000 bytes", 20_000),
        ("3K", 3 * KIB),
        ("3k", 3 * KIB),
        ("3KB", 3 * KIB),
        ("3kb", 3 * KIB),
        ("3Ki", 3 * KIB),
        ("3KiB", 3 * KIB),
        ("3kib", 3 * KIB),
        ("500M", 500 * MIB),
        ("500MB", 500 * MIB),
        ("500MiB", 500 * MIB),
        ("2G", 2 * GIB),
        ("2g", 2 * GIB),
        ("2GB", 2 * GIB),
        ("2Gi", 2 * GIB),
        ("2GiB", 2 * GIB),
        ("1T", TIB),
        ("1TB", TIB),
        ("1TiB", TIB),
        ("1.5G", 3 * GIB // 2),
        ("0.5K", 512),
        ("1.5", 1),
        ("  100k  ", 100 * KIB),
        ("100 k", 100 * KIB),
        ("9007199254740993", 9_007_199_254_740_993),
    ],
)
def test_every_size_form_parses_to_bytes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "lots",
        "-1",
        "+1",
        "1e3",
        ".5K",
        "5.K",
        "5 P",
        "5PB",
        "5KiBB",
        "5 K B",
        "\u0665",
        "K",
    ],
)
def test_a_malformed_size_is_refused_with_the_grammar_in_the_message(text: str) -> None:
    with pytest.raises(ConfigurationError, match=r"is not a size: use bytes .* G/GB/GiB"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("90", 90.0),
        ("90s", 90.0),
        ("90S", 90.0),
        ("30m", 1800.0),
        ("24h", 86_400.0),
        ("24H", 86_400.0),
        ("7d", 604_800.0),
        ("2w", 1_209_600.0),
        ("1.5h", 5400.0),
        ("0.1h", 360.0),
        (" 5 m ", 300.0),
    ],
)
def test_every_duration_form_parses_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-1s", "1y", "5 min", "1h30m", "1e3", "\u0665s"])
def test_a_malformed_duration_is_refused_with_the_grammar_in_the_message(text: str) -> None:
    with pytest.raises(ConfigurationError, match=r"is not a duration: use seconds .* 24h"):
        parse_duration(text)


def test_an_absurdly_long_duration_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="too long"):
        parse_duration("9" * 400 + "w")


def test_a_threshold_size_is_read_with_the_size_grammar() -> None:
    for text in ("0", "20000", "7B", "50kb", "3KiB", "1mb", "2G", "2GiB", "1.5M", "20000 bytes"):
        assert parse_threshold(text) == ToolThreshold(max_bytes=parse_size(text))


def test_a_threshold_also_counts_characters_or_is_never() -> None:
    assert parse_threshold("30000chars") == ToolThreshold(max_chars=30_000)
    assert parse_threshold("30000 characters") == ToolThreshold(max_chars=30_000)
    assert parse_threshold("9c") == ToolThreshold(max_chars=9)
    assert parse_threshold("never") == ToolThreshold(never=True)
    assert parse_threshold(" NEVER ") == ToolThreshold(never=True)


@pytest.mark.parametrize("text", ["1.5chars", "neverkb", "never5", "5pb", "lots", "-5"])
def test_a_malformed_threshold_names_every_accepted_form(text: str) -> None:
    with pytest.raises(ConfigurationError, match=r"is not a threshold: use a size .* or never"):
        parse_threshold(text)


def test_pointer_preview_sizes_from_the_environment_use_the_size_grammar() -> None:
    settings = ExternalizerSettings.from_env(
        {"TOOLSWAP_HEAD_BYTES": "4K", "TOOLSWAP_TAIL_BYTES": "16KiB"}
    )

    assert (settings.head_bytes, settings.tail_bytes) == (4 * KIB, 16 * KIB)
    with pytest.raises(ConfigurationError, match="TOOLSWAP_TAIL_BYTES: 'x' is not a size"):
        ExternalizerSettings.from_env({"TOOLSWAP_TAIL_BYTES": "x"})


# -- the clock -------------------------------------------------------------------------

NAIVE = datetime(2026, 1, 1)
AWARE = datetime(2026, 1, 1, tzinfo=UTC)


class _NoOffset(tzinfo):
    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


def test_an_aware_time_passes_the_clock_check_unchanged() -> None:
    plus_two = datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))

    assert require_aware(AWARE) is AWARE
    assert require_aware(plus_two) is plus_two


@pytest.mark.parametrize(
    "when", [NAIVE, datetime(2026, 1, 1, tzinfo=_NoOffset()), "2026-01-01", None]
)
def test_a_time_without_an_offset_is_refused_as_a_configuration_error(when: object) -> None:
    with pytest.raises(ClockError, match="must give timezone-aware datetimes") as caught:
        require_aware(when)

    assert isinstance(caught.value, ConfigurationError)
    assert isinstance(caught.value, ValueError)


def _with_artifact(session_dir: Path) -> tuple[ToolResultExternalizer, str]:
    ext = ToolResultExternalizer(session_dir, now=lambda: AWARE)
    return ext, ext.externalize("line\n" * 20_000, "grep").artifact.source_id


def _capture(session_dir: Path) -> object:
    return ToolResultExternalizer(session_dir, now=lambda: NAIVE).externalize("x" * 99_999, "bash")


def _plan(session_dir: Path) -> object:
    ext, _ = _with_artifact(session_dir)
    return ext.plan_cleanup([], now=NAIVE)


def _apply(session_dir: Path) -> object:
    ext, _ = _with_artifact(session_dir)
    return ext.apply_cleanup(ext.plan_cleanup([], now=AWARE), [], now=NAIVE)


def _plan_session(session_dir: Path) -> object:
    ext, _ = _with_artifact(session_dir)
    return plan_cleanup(ext.session, [], now=NAIVE)


def _apply_session(session_dir: Path) -> object:
    ext, _ = _with_artifact(session_dir)
    return apply_cleanup(ext.session, plan_cleanup(ext.session, [], now=AWARE), [], now=NAIVE)


def _plan_from_journal(session_dir: Path) -> object:
    _with_artifact(session_dir)
    return plan_cleanup_from_journal(ArtifactRetentionJournal(session_dir), now=NAIVE)


def _apply_from_journal(session_dir: Path) -> object:
    _with_artifact(session_dir)
    journal = ArtifactRetentionJournal(session_dir)
    plan = plan_cleanup_from_journal(journal, now=AWARE)
    return apply_cleanup_from_journal(plan, journal, now=NAIVE)


def _journal_clock(session_dir: Path) -> object:
    ext, source_id = _with_artifact(session_dir)
    claim = ArtifactRetentionClaim.from_memory_reference(ext.get_artifact(source_id).for_memory())
    journal = ArtifactRetentionJournal(session_dir, owner=None, now=lambda: NAIVE)
    return journal.publish_reference(claim, lambda: None, transaction_id="tx")


def _journal_recover(session_dir: Path) -> object:
    _with_artifact(session_dir)
    return ArtifactRetentionJournal(session_dir).recover(now=NAIVE)


def _owner_clock(session_dir: Path) -> object:
    ext, source_id = _with_artifact(session_dir)
    owner = SqliteMemoryOwner(session_dir / "memory.sqlite3", now=lambda: NAIVE)
    return owner.publish("tx", ext.get_artifact(source_id).for_memory())


@pytest.mark.parametrize(
    "call",
    [
        _capture,
        _plan,
        _apply,
        _plan_session,
        _apply_session,
        _plan_from_journal,
        _apply_from_journal,
        _journal_clock,
        _journal_recover,
        _owner_clock,
    ],
)
def test_every_entry_point_that_takes_a_clock_refuses_a_naive_one_alike(
    session_dir: Path, call: Callable[[Path], object]
) -> None:
    with pytest.raises(ClockError, match="must give timezone-aware datetimes"):
        call(session_dir)


# -- the pointer budget ----------------------------------------------------------------


def test_the_pointer_budget_defaults_to_32_kib_for_every_tool() -> None:
    settings = ExternalizerSettings.from_env({})

    assert settings.pointer_bytes == 32 * KIB
    assert settings.pointer_bytes_for("bash") == settings.pointer_bytes_for("x") == 32 * KIB


def test_the_pointer_budget_is_one_variable_with_per_tool_budgets() -> None:
    settings = ExternalizerSettings.from_env(
        {"TOOLSWAP_POINTER_BYTES": "8K, pytest=16KiB ,grep=4096"}
    )

    assert settings.pointer_bytes == 8 * KIB
    assert settings.pointer_bytes_for("pytest") == 16 * KIB
    assert settings.pointer_bytes_for("grep") == 4 * KIB
    assert settings.pointer_bytes_for("bash") == 8 * KIB
    only_tools = ExternalizerSettings.from_env({"TOOLSWAP_POINTER_BYTES": "grep=2K"})
    assert (only_tools.pointer_bytes, only_tools.pointer_bytes_for("grep")) == (32 * KIB, 2 * KIB)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("x", "'x' is not a size"),
        ("512", "between 1024 bytes and 1 MiB"),
        ("2M", "between 1024 bytes and 1 MiB"),
        ("pytest=", "is not a size"),
        ("=8K", "is not 'SIZE' or 'tool=SIZE'"),
        ("my tool=8K", "is not 'SIZE' or 'tool=SIZE'"),
    ],
)
def test_a_malformed_pointer_budget_names_the_variable_and_the_entry(
    raw: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match="TOOLSWAP_POINTER_BYTES") as caught:
        ExternalizerSettings.from_env({"TOOLSWAP_POINTER_BYTES": raw})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pointer_bytes": 1023},
        {"pointer_bytes": (1 << 20) + 1},
        {"pointer_bytes": True},
        {"tool_pointer_bytes": {"grep": 10}},
    ],
)
def test_a_pointer_budget_out_of_range_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match="pointer_bytes"):
        ExternalizerSettings(**kwargs)  # type: ignore[arg-type]
