"""One externalizer shared by threads (as agent frameworks do with worker threads)."""

from __future__ import annotations

import threading
from pathlib import Path

from toolswap import ToolResultExternalizer


def test_readers_and_a_writer_share_one_externalizer_without_errors(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1")
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                for art in ext.list_artifacts()[-3:]:
                    ext.read_artifact(art.source_id, 0, 1)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        written = [ext.externalize(f"{i}:" + "x" * 60_000, "t").artifact for i in range(60)]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len({a.filename for a in written}) == 60
    assert [a.source_id for a in ext.list_artifacts()] == [a.source_id for a in written]


def test_writers_in_several_threads_never_share_a_name(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1")
    results: list[str] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        for i in range(20):
            art = ext.externalize(f"{n}-{i}:" + "y" * 60_000, "t").artifact
            with lock:
                results.append(art.filename)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(results)) == 80
    for art in ext.list_artifacts():
        ext.reader.verify(art.source_id)
