"""``externalize_tool``: a Python function tool whose large return value becomes a pointer.

::

    from toolswap import externalize_tool

    @externalize_tool
    def search_logs(pattern: str) -> str:
        ...  # may return megabytes

    search_logs("ERROR")   # small: returned unchanged; large: the artifact pointer

The wrapper keeps the function's name, docstring, signature and type hints (it is a
:func:`functools.wraps` wrapper), so agent frameworks that build a tool schema from the
function see the original. Put it *under* the framework's decorator, so the framework
registers the wrapped function. Register :func:`toolswap.tools.artifact_tools` beside your
tools so the model can page the artifacts the pointers name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast, overload

from ._fork import renew_in_child, track
from .errors import InvalidArgumentError
from .externalizer import ToolResultExternalizer
from .session import Session, toolswap_home, workspace_slug

__all__ = ["default_externalizer", "externalize_result", "externalize_tool"]

F = TypeVar("F", bound=Callable[..., Any])

ExternalizerSource = ToolResultExternalizer | Callable[[], ToolResultExternalizer] | Path | str
"""An externalizer, a zero-argument factory for one, or a session directory."""

_DEFAULTS: dict[tuple[str, str, str], ToolResultExternalizer] = {}
_DEFAULTS_LOCK = threading.Lock()
renew_in_child(globals(), "_DEFAULTS_LOCK")  # (see _fork)
_MARK = "__toolswap_externalized__"


def default_externalizer() -> ToolResultExternalizer:
    """The session wrapped tools use unless given one.

    ``$TOOLSWAP_SESSION`` (default ``default``) in the current workspace under
    ``$TOOLSWAP_HOME``, opened on first use (not at import or decoration time) and shared
    by every wrapped tool of the process. Its pointers name the ``read_artifact`` /
    ``grep_artifact`` tools of :func:`toolswap.tools.artifact_tools`.
    """
    session_id = os.environ.get("TOOLSWAP_SESSION") or "default"
    home = toolswap_home()
    workspace = workspace_slug()
    key = (str(home), workspace, session_id)
    with _DEFAULTS_LOCK:
        ext = _DEFAULTS.get(key)
        if ext is None:
            session = Session.open(session_id, workspace=workspace, home=home)
            ext = ToolResultExternalizer(session, read_hint="mcp")
            _DEFAULTS[key] = ext
        return ext


def _resolver(source: ExternalizerSource | None) -> Callable[[], ToolResultExternalizer]:
    if source is None:
        return default_externalizer
    if isinstance(source, ToolResultExternalizer):
        ext = source
        return lambda: ext
    if isinstance(source, (str, Path)):
        return _AtPath(Path(source))
    if callable(source):
        return source
    raise InvalidArgumentError(
        "externalizer must be a ToolResultExternalizer, a factory returning one, or a "
        f"session directory, not {type(source).__name__}"
    )


class _AtPath:
    """The externalizer of a session directory, made on the first call."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._opened: ToolResultExternalizer | None = None
        self._lock = threading.Lock()
        track(self)

    def _forked(self) -> None:
        self._lock = threading.Lock()

    def __call__(self) -> ToolResultExternalizer:
        with self._lock:
            if self._opened is None:
                self._opened = ToolResultExternalizer(self._path, read_hint="mcp")
            return self._opened


def _tool_name(func: Any) -> str:
    for attr in ("name", "__name__"):
        value = getattr(func, attr, None)
        if isinstance(value, str) and value.strip():
            return value
    inner = getattr(func, "func", None)  # functools.partial
    if inner is not None:
        return _tool_name(inner)
    return type(func).__name__


def _is_async(func: Any) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(type(func), "__call__", None)  # noqa: B004 - a callable object's method
    return call is not None and not inspect.isfunction(func) and inspect.iscoroutinefunction(call)


def _as_text(value: Any) -> tuple[str | bytes, str | None] | None:
    """What the context would receive for ``value`` (text or bytes) and its media type;
    None for scalars that are never large."""
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, str):
        return value, None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), None
    data: Any = value
    dump = getattr(value, "model_dump", None)  # pydantic v2 models
    if callable(dump):
        try:
            data = dump(mode="json")
        except Exception:
            data = value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = dataclasses.asdict(value)
    try:
        return json.dumps(data, indent=2, ensure_ascii=False, default=str), "application/json"
    except (TypeError, ValueError):
        return str(value), None


def _writer(
    value: Any, tool: str, resolve: Callable[[], ToolResultExternalizer], summary: str | None
) -> Callable[[], str] | None:
    """What saves a value over the tool's threshold and returns its pointer; None for a
    value that stays inline."""
    rendered = _as_text(value)
    if rendered is None:
        return None
    text, media_type = rendered
    ext = resolve()
    if not ext.should_externalize(text, tool):
        return None

    def write() -> str:
        return ext.externalize(text, tool, summary=summary, media_type=media_type).context_text

    return write


def _shrink_sync(
    value: Any, tool: str, resolve: Callable[[], ToolResultExternalizer], summary: str | None
) -> Any:
    write = _writer(value, tool, resolve, summary)
    return value if write is None else write()


async def _shrink_async(
    value: Any, tool: str, resolve: Callable[[], ToolResultExternalizer], summary: str | None
) -> Any:
    write = _writer(value, tool, resolve, summary)
    if write is None:
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio): write inline
        return write()
    # Writing and fsyncing megabytes would stall every other task on the loop.
    return await asyncio.to_thread(write)


async def _await_then_shrink(
    awaitable: Awaitable[Any],
    tool: str,
    resolve: Callable[[], ToolResultExternalizer],
    summary: str | None,
) -> Any:
    return await _shrink_async(await awaitable, tool, resolve, summary)


def _decorate(
    func: F, name: str | None, source: ExternalizerSource | None, summary: str | None
) -> F:
    if not callable(func):
        raise InvalidArgumentError(f"externalize_tool wraps a callable, not {type(func).__name__}")
    if getattr(func, _MARK, False):
        return func
    tool = name or _tool_name(func)
    ToolResultExternalizer._check_tool(tool)
    resolve = _resolver(source)

    wrapper: Callable[..., Any]
    if _is_async(func):

        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await _shrink_async(await func(*args, **kwargs), tool, resolve, summary)

        wrapper = async_wrapper
    else:

        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            value = func(*args, **kwargs)
            if inspect.isawaitable(value):
                # A sync callable that hands back an awaitable (some frameworks do).
                return _await_then_shrink(value, tool, resolve, summary)
            return _shrink_sync(value, tool, resolve, summary)

        wrapper = sync_wrapper
    # A callable object's __dict__ (a framework's tool model, say) is not copied onto the
    # wrapper function; a function's attributes are.
    updated = functools.WRAPPER_UPDATES if inspect.isfunction(func) else ()
    functools.update_wrapper(wrapper, func, updated=updated)
    setattr(wrapper, _MARK, True)
    return cast(F, wrapper)


@overload
def externalize_tool(func: F, /) -> F: ...


@overload
def externalize_tool(
    *,
    name: str | None = None,
    externalizer: ExternalizerSource | None = None,
    summary: str | None = None,
) -> Callable[[F], F]: ...


def externalize_tool(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    externalizer: ExternalizerSource | None = None,
    summary: str | None = None,
) -> F | Callable[[F], F]:
    """Wrap a tool function so a large return value is saved and replaced by a pointer.

    Works as ``@externalize_tool`` and ``@externalize_tool(name=..., externalizer=...)``,
    on sync and async functions and on callable objects (an object with an async
    ``__call__`` gets an async wrapper). A ``str`` or ``bytes`` result over the tool's
    threshold (the externalizer's settings for ``name``: 50 KB for most tools, 30,000
    characters for ``bash``, per-tool rules from ``TOOLSWAP_TOOL_THRESHOLDS``) becomes the
    pointer text; other results (dicts, lists, dataclasses, pydantic models) are measured
    as indented JSON and, when large, saved as JSON and replaced by the pointer. Small
    results are returned unchanged, as the very same object. Exceptions propagate.

    Args:
        func: the tool function (when used without arguments).
        name: tool name recorded as the artifact's provenance (default: the function's
            ``name`` attribute or ``__name__``).
        externalizer: where artifacts go: a :class:`ToolResultExternalizer`, a factory
            called on first use, or a session directory (default:
            :func:`default_externalizer`).
        summary: a fixed one-line summary for this tool's pointers (default: generated
            from the output).

    Returns:
        The wrapper (same name, docstring, signature and type hints as ``func``).
    """
    if summary is not None:
        from .pointer import validate_summary

        validate_summary(summary)
    if func is not None:
        return _decorate(func, name, externalizer, summary)

    def decorator(f: F) -> F:
        return _decorate(f, name, externalizer, summary)

    return decorator


def externalize_result(
    value: Any, tool: str, externalizer: ExternalizerSource | None = None
) -> Any:
    """One tool result through the wrapper's rule: ``value`` itself when it is small (or a
    scalar), else the pointer text of the artifact it was saved as.

    For adapters that see a tool's result after the call (framework middleware), where
    :func:`externalize_tool` cannot wrap the function.
    """
    ToolResultExternalizer._check_tool(tool)
    return _shrink_sync(value, tool, _resolver(externalizer), None)
