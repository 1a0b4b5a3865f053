"""The names inside a session directory (one home for them; only :mod:`toolswap.session`
turns a session ID into a path)::

    <home>/projects/<workspace>/<session>/
        tool-results/tool_result_NNN.txt   immutable artifacts
        manifest.jsonl                     one record per artifact, collection, journal anchor
        manifest.head                      the manifest's highest head and name (evidence)
        manifest.checked                   both as the last full readiness check found them
        store.json                         the shared store this session lives in, if any
        retention.json                     where its leases and memory owner live, once known
        retention-leases.jsonl             the lease journal
        memory.sqlite3                     the embedded memory owner's database
        .lock                              the session lock (flock)
"""

from __future__ import annotations

__all__ = [
    "JOURNAL_NAME",
    "LOCK_NAME",
    "MANIFEST_CHECKED_NAME",
    "MANIFEST_HEAD_NAME",
    "MANIFEST_NAME",
    "OWNER_DB_NAME",
    "RETENTION_CHOICE_NAME",
    "STORE_BINDING_NAME",
    "STORE_ENV",
    "TOOL_RESULTS_DIR",
]

TOOL_RESULTS_DIR = "tool-results"
MANIFEST_NAME = "manifest.jsonl"
MANIFEST_HEAD_NAME = "manifest.head"
MANIFEST_CHECKED_NAME = "manifest.checked"
STORE_BINDING_NAME = "store.json"
RETENTION_CHOICE_NAME = "retention.json"
JOURNAL_NAME = "retention-leases.jsonl"
OWNER_DB_NAME = "memory.sqlite3"
LOCK_NAME = ".lock"

STORE_ENV = "TOOLSWAP_STORE"
"""The environment variable naming the shared store new sessions are kept in (here, not in
:mod:`toolswap.backends.store`, so a local session never imports the store code)."""
