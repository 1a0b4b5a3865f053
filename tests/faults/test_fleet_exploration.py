"""Every request to the store and every statement to the database of every operation on a
shared session fails, and every state that leaves keeps the invariants (see ``fleet.py``).

The state each operation leaves without a fault is checked too. The run in the normal
suite samples: one fault kind (in turn) at every other request and every eighth statement
of every operation (109 states, two minutes); ``make faults``
(``TOOLSWAP_FAULTS=full``) injects every kind at every request and every statement (1,780
states, 25 minutes). Both print the count per operation and fault kind.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("boto3")
pytest.importorskip("psycopg")

from .fleet import FleetExplorer, FleetServers, fleet_operations

FULL = os.environ.get("TOOLSWAP_FAULTS") == "full"


def test_every_store_and_database_fault_of_every_fleet_operation_keeps_the_invariants(
    fleet_servers: FleetServers, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if FULL:
        explorer = FleetExplorer(fleet_servers, scratch)
    else:
        explorer = FleetExplorer(fleet_servers, scratch, stride=2, pg_stride=8, kinds_per_index=1)
    explorer.explore(fleet_operations())
    result = explorer.result

    with capsys.disabled():
        scope = "full" if FULL else "quick: one kind at every 2nd request and 8th statement"
        print(f"\n\nfleet fault exploration ({scope})")
        for name, (requests, statements) in explorer.dry_counts.items():
            print(f"  {name}: {requests} requests, {statements} statements without a fault")
        print(result.table())
    assert not result.violations, "\n".join(str(v) for v in result.violations[:30])
    assert result.states >= (1_500 if FULL else 80)
