"""The states in which the fleet explorer (``fleet.py``) found toolswap breaking an
invariant, kept: a real S3 server (moto's) behind the fault proxy of ``fault_proxy.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_proxy import HttpFaultProxy, S3Fault
from toolswap import ArtifactWriteError, ToolResultExternalizer
from toolswap.verify import FindingKind, verify_session

from .scenarios import text_output

pytest.importorskip("boto3")


@pytest.fixture
def proxy(s3_server: Any, bucket: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpFaultProxy]:
    proxy = HttpFaultProxy(s3_server.port)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("TOOLSWAP_STORE", f"s3://{bucket}/team")
    monkeypatch.setattr("toolswap.backends.store._STORES", {})
    try:
        yield proxy
    finally:
        proxy.close()


def _cut_the_first_head(proxy: HttpFaultProxy) -> None:
    """Cut the reply to the next HEAD of an artifact half way through its headers."""
    heads = [i for i, r in enumerate(proxy.trace, 1) if r.startswith("HEAD ") and "/tool-" in r]
    proxy.arm(heads[0], S3Fault.LOST_REPLY)


def test_a_capture_whose_store_reply_is_cut_in_its_headers_hands_back_the_preview(
    proxy: HttpFaultProxy, s3_server: Any, bucket: str, tmp_path: Path
) -> None:
    session = tmp_path / "a" / "projects" / "ws" / "s1"
    output = text_output(3, 900)
    ToolResultExternalizer(session).externalize(output, "bash")
    # Another host's upload holds the next name: the capture's HEAD finds it (200).
    key = "team/ws/s1/tool-results/tool_result_002.txt"
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=b"another host's\n")
    proxy.arm()
    ToolResultExternalizer(session).externalize(output, "bash")  # counts its requests
    s3_server.client().put_object(Bucket=bucket, Key=key.replace("002", "004"), Body=b"again\n")
    _cut_the_first_head(proxy)

    with pytest.raises(ArtifactWriteError) as failed:
        ToolResultExternalizer(session).externalize(output, "bash")

    assert proxy.injected and "without its ContentLength" in str(failed.value)
    assert output.splitlines()[0] in failed.value.preview
    proxy.arm()
    after = ToolResultExternalizer(session).externalize(output, "bash").artifact
    assert after is not None and after.path.name == "tool_result_005.txt"


def test_verify_whose_store_reply_is_cut_in_its_headers_says_so_in_a_finding(
    proxy: HttpFaultProxy, tmp_path: Path
) -> None:
    session = tmp_path / "a" / "projects" / "ws" / "s1"
    ext = ToolResultExternalizer(session)
    names = [ext.externalize(text_output(i, 900), "bash").artifact.path.name for i in range(2)]  # type: ignore[union-attr]
    proxy.arm()
    verify_session(ext.session)
    _cut_the_first_head(proxy)

    findings = verify_session(ext.session)

    assert proxy.injected
    assert sorted((f.name, f.kind) for f in findings) == [
        (names[0], FindingKind.OK),  # this host's copy
        (names[0], FindingKind.STORE_UNREACHABLE),  # the store's, unknown
        (names[1], FindingKind.OK),
    ]
