"""What a step's pipeline stages wait for their neighbours' activations and gradients, and what
of it hides behind compute. The counts are those of the schedules in `costmodel.schedules`,
whose event simulation the tests check them against; `steptime` adds the fill's round trip and
the tied embedding's exchange."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Seconds = np.ndarray | float


@dataclass(frozen=True)
class PipelineExchanges:
    """One step's exchanges between stages, each field an array over plans or one value.

    - Interleaved (`vp` > 1) with the exchanges on their own stream (`overlap`, Megatron's
      overlap_p2p_comm): the next exchange is posted before this micro-batch's compute, so only
      what outlasts it waits.
    - Megatron's 1F1B without interleaving (`overlap`, `vp` == 1): each exchange sends and
      receives at once, and the next pass needs what it receives, so a stage waits for one
      exchange a micro-batch with each neighbour: one link at the ends of a two-stage pipeline,
      both sides in the middle of a longer one.
    - Blocking calls (DeepSpeed's engine, not `overlap`): each send and receive waits on its
      own, two a micro-batch on each side.

    The fill and drain: where the schedule's step has a closed form (`_exact_fill`, and
    `_crossing_hidden` for one WAN crossing among more stages), that; else once over every
    link, each way (where the forms hold, that is off by up to several transfers). A single
    micro-batch waits for every link twice, and for nothing else.
    """

    pp: Seconds  # stages
    vp: Seconds  # virtual stages a stage (interleaving)
    micro_batches: Seconds
    crossings: Seconds  # links between stages that cross the WAN
    wan_s: Seconds  # a micro-batch's transfer over a crossing
    intra_s: Seconds  # and over a link inside a domain
    t_mb: Seconds  # a micro-batch's forward and backward on the busiest stage
    overlap: bool  # Megatron's exchanges both ways at once; False: blocking calls
    fwd_s: Seconds | None = None  # the forward share of `t_mb` (None: a third)
    after: Seconds = -1  # links after a pipeline's one WAN crossing (-1: not known)
    # 0 where no stage sits between two crossings (each domain of the pipeline's middle holds
    # two stages or more), 1 where one may
    between: Seconds = 1
    # a micro-batch's transfers over both crossings beside the stage between two that waits
    # longest (nan: not known, twice the slowest crossing), and over the first of them
    between_s: Seconds = np.nan
    between_first_s: Seconds = np.nan

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        """Seconds the busiest stage waits for its exchanges a step, and the seconds of them
        hidden behind its compute."""
        pp, vp, m, crossings = self.pp, self.vp, self.micro_batches, self.crossings
        has_pp = pp > 1
        zero = np.zeros_like(pp, dtype=float)
        intra = vp * self.intra_s
        link = vp * np.where(crossings > 0, self.wan_s, self.intra_s)  # the slowest link
        # Beside a pipeline's one WAN crossing, a stage's other side is inside its domain; with
        # more, a stage may sit between two (`between`): the busiest waits on both its sides
        # (`between_s`) or, where a stage beside the slowest has a link inside its domain on
        # its other side, on those two.
        beside = np.where((crossings == 1) | (self.between == 0), intra, self._other_side(link))
        fwd = self.t_mb / 3 if self.fwd_s is None else self.fwd_s
        every_link_twice = self._every_link_twice()
        exact, known = self._exact_fill(link, fwd)
        overlapped, crossing = self._crossing_hidden(fwd)
        fill = np.where(known, exact, every_link_twice - np.where(crossing, overlapped, 0.0))
        if self.overlap:
            interleaved = vp > 1
            plain = np.where(pp > 2, link + beside, link)
            per_mb = np.where(interleaved, np.maximum(0.0, link - self.t_mb), plain)
            hidden = np.where(has_pp & interleaved, m * np.minimum(link, self.t_mb), zero)
        else:
            per_mb = np.where(pp > 2, np.maximum(2 * (link + beside), 4 * intra), 2 * link)
            hidden = zero
        # one micro-batch goes down the pipeline and back: every link twice, nothing overlaps
        alone = (m == 1) & (vp == 1)
        waits = np.where(alone, every_link_twice, m * per_mb + fill)
        return np.where(has_pp, waits, zero), hidden

    def _other_side(self, link: Seconds) -> Seconds:
        """What a stage between two crossings waits for beyond the slowest, a micro-batch: the
        other side of the busiest such stage, at least a link inside a domain; the slowest
        again where that stage is not known."""
        both = self.vp * np.asarray(self.between_s, dtype=float)
        intra = self.vp * np.asarray(self.intra_s, dtype=float)
        with np.errstate(invalid="ignore"):  # a link that carries nothing: inf - inf
            other = np.where(np.isposinf(both), np.inf, np.maximum(both - link, intra))
        return np.where(np.isnan(both), link, other)

    def _every_link_twice(self) -> Seconds:
        """Every link's transfer each way: the crossings at the slowest's time, or where there
        are two beside a stage between them, each at its own."""
        inside = self.pp - 1 - self.crossings
        both = np.asarray(self.between_s, dtype=float)
        pair = (self.crossings == 2) & ~np.isnan(both)
        crossed = np.where(pair, both, self.crossings * self.wan_s)
        return 2 * (inside * self.intra_s + crossed)

    def _exact_fill(self, link: Seconds, fwd: Seconds) -> tuple[np.ndarray, np.ndarray]:
        """What a step of uniform stages waits for its transfers beyond `micro_batches` times
        their count a micro-batch, and where that is exact: without interleaving, two stages
        (one link, whatever it crosses), more stages whose links all take `link` (none
        crosses the WAN), or three stages a domain each whose two crossings are known (`a` the
        first, `both` the two), with at least two micro-batches. Derived from the schedules'
        programs and equal to their event simulation (`costmodel.schedules`; the tests check
        it), for a backward pass at least as long as the forward one."""
        pp, t_mb = self.pp, self.t_mb
        two = pp == 2
        a = np.asarray(self.between_first_s, dtype=float)
        both = np.asarray(self.between_s, dtype=float)
        three = (pp == 3) & (self.crossings == 2) & ~np.isnan(a)
        if self.overlap:  # 1F1B, exchanges both ways at once: (m + 1)(t + L) with two stages
            wait = np.where(
                two, link, 2 * link * (pp - 2) - np.minimum(np.minimum(link, fwd), t_mb - link)
            )
            wait = np.where(three, both - np.minimum(np.minimum(a, fwd), t_mb - a), wait)
        else:  # blocking calls: (m + 1)t + 2mL with two stages
            edge = np.maximum(np.maximum(0.0, link - fwd), 2 * link - t_mb)
            wait = np.where(two, 0.0, 2 * link * (pp - 4) + edge)
            first = np.maximum(np.maximum(0.0, a - fwd), 2 * a - t_mb)
            with np.errstate(invalid="ignore"):  # a link that carries nothing: inf - inf
                wait = np.where(three, np.where(np.isposinf(a), np.inf, first - 2 * a), wait)
        many = (self.crossings == 0) | three
        known = (self.vp == 1) & (two | (many & (self.micro_batches >= 2)))
        return wait, np.asarray(known)

    def _crossing_hidden(self, f: Seconds) -> tuple[np.ndarray, np.ndarray]:
        """Of every link's two transfers, what the fill hides in a pipeline of uniform stages
        over fast links of `intra_s` and one slower WAN crossing of `wan_s` with `after` links
        past it, and where that is exact: without interleaving, three stages or more, two
        micro-batches or more. Derived from the schedules' programs and equal to their event
        simulation (the tests check it): each further link after the crossing hides the same
        step more, up to one fewer links than micro-batches."""
        wan, intra, t, m = self.wan_s, self.intra_s, self.t_mb, self.micro_batches
        d = wan - intra
        if self.overlap:  # 1F1B
            at_last = wan + intra + np.minimum(np.minimum(intra, f), t - intra)
            one_after = np.minimum(np.minimum(at_last + d, wan + intra + f), intra + t)
            each_further = np.minimum(np.minimum(d, f), t - d)
        else:  # blocking calls
            at_last = 2 * wan + 4 * intra - np.maximum(np.maximum(0.0, intra - f), 2 * intra - t)
            one_after = np.minimum(
                np.minimum(at_last + 2 * d, 3 * wan + 2 * intra + f), 2 * wan + t + 2 * intra
            )
            each_further = np.minimum(np.minimum(2 * d, wan + f), t + 2 * intra)
        reach = np.minimum(self.after, m - 1)
        hidden = np.where(reach <= 0, at_last, one_after + np.maximum(reach - 1, 0) * each_further)
        known = (
            (self.vp == 1) & (self.pp > 2) & (self.crossings == 1) & (m >= 2) & (self.after >= 0)
        )
        # a link that carries nothing (no bandwidth) leaves the step infinite, as the old count
        # does
        return hidden, known & (d >= 0) & np.isfinite(wan) & np.isfinite(intra)
