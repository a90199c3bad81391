"""What a study records as it runs, for its results and for listeners outside it, a part of
the engine (`sim.engine`): the decision log (a journal hears of each decision) and the usage
metering (a ledger hears of each flush's records).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from xdscheduler.planner.placement import Placement
from xdscheduler.sim.jobs import JobRun
from xdscheduler.sim.measurement import Action, DecisionLog, DecisionRecord
from xdscheduler.sim.metering import Metering, Usage

if TYPE_CHECKING:
    from xdscheduler.sim.engine import Engine


class Recorder:
    """The engine's decision log and usage metering, and who listens to them."""

    def __init__(self, eng: Engine, classes: list[str], prices: list[float]):
        self.eng = eng
        self.log = DecisionLog()
        self.metering = Metering(list(eng.names), classes, prices)

    def decision(
        self,
        r: JobRun,
        action: Action,
        p: Placement,
        why: str,
        ms: float,
        before: dict[str, int] | None = None,
    ) -> None:
        """Job r's decision now: `action` onto p, why, how long it took to make, and the free
        accelerators `before` it."""
        names = {self.eng.names[i]: g for i, g in p.taken.items()}
        self.log.append(
            DecisionRecord(
                self.eng.now, r.name, action, names, p.plan.as_dict(), why, ms, before or {}
            )
        )

    def subscribe(self, listener: Callable[[int, DecisionRecord], None]) -> None:
        """Call `listener(index, record)` with every decision as it is logged (a journal)."""
        self.log.on_record = listener

    def meter_to(self, listener: Callable[[list[Usage]], None]) -> None:
        """Call `listener(usages)` with the usage records of each flush (a ledger)."""
        self.metering.listener = listener

    @property
    def decisions(self) -> list[DecisionRecord]:
        return self.log.records
