"""Session backends: where a session's names, records and bytes really live.

:class:`~toolswap.backends.base.SessionBackend` is the interface;
:class:`~toolswap.backends.base.LocalBackend` (the session directory is the authority) and
:class:`~toolswap.backends.replica.ReplicaBackend` (a shared store is, the directory is its
replica) implement it. :meth:`toolswap.session.Session.at` chooses one, once.
"""

from .base import LocalBackend, SessionBackend

__all__ = ["LocalBackend", "SessionBackend"]
