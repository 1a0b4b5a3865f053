"""Thresholds: the spec's defaults, environment overrides, per-tool rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolswap import (
    ConfigurationError,
    ExternalizerSettings,
    InlineToolResult,
    ToolResultExternalizer,
    ToolThreshold,
)
from toolswap._utf8 import encode_output


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
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest=5gb"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest=neverkb"},
        {"TOOLSWAP_TOOL_THRESHOLDS": "pytest=\u0665"},
    ],
)
def test_bad_environment_values_raise_configuration_error(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        ExternalizerSettings.from_env(environ)


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
    from toolswap.settings import parse_threshold

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
