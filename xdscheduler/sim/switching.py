"""A running job's switch to its next plan, a part of the engine (`sim.engine`).

Make-before-break: the accelerators of the next plan that the job does not hold are taken
alongside its own (under the allocation `<job>#next`) until the switch, when it moves with a
short pause; a switch cancelled gives them back.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from xdscheduler.planner.placement import Placement
from xdscheduler.sim.jobs import JobRun

if TYPE_CHECKING:
    from xdscheduler.sim.engine import Engine

PREPARING = "#next"  # suffix of the allocation a job holds for its next plan while preparing


class Switches:
    """Prepares, makes and cancels the engine's jobs' switches to their next plans."""

    def __init__(self, eng: Engine):
        self.eng = eng

    def prepare(self, r: JobRun, new: Placement, switch_at: float, pause_s: float) -> None:
        """The accelerators of `new` the job does not hold are taken alongside its own until
        `switch_at`, when it switches with a `pause_s` pause."""
        eng = self.eng
        r.next, r.switch_at, r.switch_pause_s = new, switch_at, pause_s
        eng.domains.apply(r.name + PREPARING, r.preparing, eng.now)
        eng.take(r.preparing)
        eng.events.schedule(("switch", r.name), switch_at)

    def switch(self, r: JobRun) -> Placement:
        """The job moves to its prepared plan now; returns the plan it leaves."""
        eng = self.eng
        assert r.next is not None, f"job {r.name} has no plan prepared"
        new, old, pause_s = r.next, r.placed, r.switch_pause_s
        self._drop_next(r)
        eng.release(r)
        eng.domains.restore(r.name, new.taken)  # its accelerators stay its own
        r.placement, r.paused_until = new, eng.now + pause_s
        if eng.faults:
            r.checkpoint_every_s = eng.faults.checkpoint_every_s(eng.scn, r)
        eng.replanning.placed(eng, r)
        eng.speeds.update(r, placed=True)
        eng.take(new.taken)
        return old

    def cancel(self, r: JobRun) -> None:
        """Give back what was taken for a next plan that will not happen; a relocation under
        way stops with it."""
        self.eng.replanning.cancel_move(self.eng, r)
        if r.next is not None:
            self._drop_next(r)
            self.eng.swing_meter.abort(r)

    def _drop_next(self, r: JobRun) -> None:
        eng = self.eng
        eng.domains.release(r.name + PREPARING)
        eng.view = eng.view.adjust_free(r.preparing)
        r.next, r.switch_at = None, math.inf
        eng.events.cancel(("switch", r.name))
