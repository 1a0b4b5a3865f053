"""The ``toolswap`` command line. Each command's module registers it on the click group
(:mod:`toolswap.cli._group`) and is imported only when that command runs.

:data:`main` is what the console script and ``python -m toolswap`` call: the usual
``toolswap run [OPTION...] -- COMMAND`` runs without importing click (see
:mod:`toolswap.cli._run`); everything else, and every attribute, is the click group's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import click

__all__ = ["main"]


class _Toolswap:
    """The root command: the click group behind a front door for ``toolswap run``.

    Calling it is calling the group (``main(args, prog_name=...)``, ``main()``), except that
    a ``toolswap run`` command line that :func:`~toolswap.cli._run.parse_run` reads runs at
    once. Attributes are the group's, so ``CliRunner().invoke(main, ...)`` and
    ``main.commands`` work as on the group itself (they never take the front door).
    """

    @property
    def group(self) -> click.Group:
        """The click group (importing click and the group's module on first use)."""
        from ._group import main as group

        return group

    def __call__(self, args: Sequence[str] | None = None, *rest: Any, **extra: Any) -> Any:
        """Run the command line ``args`` (None: the program's own, ``sys.argv[1:]``).

        Called without ``args``, as the console script and ``python -m toolswap`` call it,
        a finished ``toolswap run`` ends the process with the command's status without the
        interpreter's teardown, unless an atexit callback or another thread needs it;
        otherwise it ends with SystemExit, as click's commands do.
        """
        if not rest and set(extra) <= {"prog_name"}:
            from ._run import fast_run

            own = args is None
            fast_run(sys.argv[1:] if own else list(args or ()), end_now=own)  # returns if not taken
        return self.group.main(args, *rest, **extra)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.group, name)

    def __repr__(self) -> str:
        return "<toolswap command line>"


main = _Toolswap()
"""``toolswap``: the console script's entry point."""
