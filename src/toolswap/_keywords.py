"""Keyword arguments typed as a ``TypedDict`` (``**options: Unpack[...]``): a name the
dictionary does not declare is refused, with the names it does."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import InvalidArgumentError

__all__ = ["refuse_unknown"]


def refuse_unknown(given: Mapping[str, object], known: frozenset[str], what: str) -> None:
    """Raise unless every key of ``given`` is in ``known``.

    Raises:
        InvalidArgumentError: naming the unknown keys and ``what`` the known ones are.
    """
    unknown = sorted(given.keys() - known)
    if unknown:
        raise InvalidArgumentError(
            f"unknown argument(s) {', '.join(unknown)}; {what} are {', '.join(sorted(known))}"
        )
