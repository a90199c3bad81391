"""What a step's pipeline stages wait for their neighbours' activations and gradients, and what
of it hides behind compute. The counts are those of the schedules in `costmodel.schedules`,
whose event simulation the tests check them against; `steptime` adds the fill's round trip and
the tied embedding's exchange."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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
    `_paced_by_a_crossing` for WAN crossings among more stages), that; else once over every
    link, each way, each crossing at its own time where told (where the forms hold, that is
    off by up to several transfers). A single micro-batch waits for every link twice, and for
    nothing else.
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
    # links after each WAN crossing, (plans, crossings) in the pipeline's order, -1 past its
    # last; or one number a plan, its one crossing's (-1: not known)
    after: Seconds = -1
    # a micro-batch's transfer over each crossing, in the order of `after` (nan past the
    # last; None: not known, the slowest's for each)
    crossing_s: np.ndarray | None = None
    # where the crossings are not told (`after` one number a plan): 0 where no stage sits
    # alone between two crossings (each domain of the pipeline's middle holds two stages or
    # more), 1 where one may
    between: Seconds = 1

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        """Seconds the busiest stage waits for its exchanges a step, and the seconds of them
        hidden behind its compute."""
        pp, vp, m, crossings = self.pp, self.vp, self.micro_batches, self.crossings
        has_pp = pp > 1
        zero = np.zeros_like(pp, dtype=float)
        intra = vp * self.intra_s
        link = vp * np.where(crossings > 0, self.wan_s, self.intra_s)  # the slowest link
        # Beside a pipeline's one WAN crossing, a stage's other side is inside its domain; with
        # more, a stage may sit alone between two: the busiest waits on both its sides or,
        # where a stage beside the slowest has a link inside its domain on its other side, on
        # those two.
        between, _ = self._lone_pair
        beside = np.where((crossings == 1) | (between == 0), intra, self._other_side(link))
        fwd = self.t_mb / 3 if self.fwd_s is None else self.fwd_s
        every_link_twice = self._every_link_twice()
        exact, known = self._exact_fill(link, fwd)
        paced, crossing = self._paced_by_a_crossing(fwd)
        fill = np.where(known, exact, every_link_twice)
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
        waits = np.where(crossing & ~known, every_link_twice + paced, m * per_mb + fill)
        waits = np.where(alone, every_link_twice, waits)
        return np.where(has_pp, waits, zero), hidden

    def _other_side(self, link: Seconds) -> Seconds:
        """What a stage between two crossings waits for beyond the slowest, a micro-batch: the
        other side of the busiest such stage, at least a link inside a domain; the slowest
        again where that stage is not known."""
        both = self.vp * self._lone_pair[1]
        intra = self.vp * np.asarray(self.intra_s, dtype=float)
        with np.errstate(invalid="ignore"):  # a link that carries nothing: inf - inf
            other = np.where(np.isposinf(both), np.inf, np.maximum(both - link, intra))
        return np.where(np.isnan(both), link, other)

    def _every_link_twice(self) -> Seconds:
        """Every link's transfer each way, each crossing at its own time where told, else at
        the slowest's."""
        inside = self.pp - 1 - self.crossings
        if self.crossing_s is None:
            crossed = self.crossings * self.wan_s
        else:
            crossed = np.nansum(self.crossing_s, axis=-1)
        return 2 * (inside * self.intra_s + crossed)

    @cached_property
    def _lone_pair(self) -> tuple[Seconds, np.ndarray]:
        """Where a stage may sit alone between two crossings (as `between` where the links
        after each crossing are not told), and a micro-batch's transfers over both crossings
        beside the one that waits longest (nan: none, or not told)."""
        if self.crossing_s is None:
            after = np.asarray(self.after, dtype=float)
            if after.ndim < 2 or not after.shape[-1]:
                return self.between, np.asarray(np.nan)
            return np.asarray(_alone_before(after).any(axis=-1)), np.asarray(np.nan)
        cross, _, lone = self._crossings
        pair = np.where(lone[..., 1:], cross[..., 1:] + cross[..., :-1], -np.inf)
        both = pair.max(axis=-1, initial=-np.inf)
        return np.asarray(lone.any(axis=-1)), np.where(np.isneginf(both), np.nan, both)

    def _exact_fill(self, link: Seconds, fwd: Seconds) -> tuple[np.ndarray, np.ndarray]:
        """What a step of uniform stages waits for its transfers beyond `micro_batches` times
        their count a micro-batch, and where that is exact: without interleaving, two stages
        (one link, whatever it crosses), more stages whose links all take `link` (none
        crosses the WAN), or three stages a domain each whose two crossings are told (`a` the
        first, `both` the two), with at least two micro-batches. Derived from the schedules'
        programs and equal to their event simulation (`costmodel.schedules`; the tests check
        it), for a backward pass at least as long as the forward one."""
        pp, t_mb = self.pp, self.t_mb
        two = pp == 2
        a = both = np.asarray(np.nan)
        cross = self._crossings[0]
        if self.crossing_s is not None and cross.shape[-1] >= 2:
            a, both = cross[..., 0], cross[..., 0] + cross[..., 1]
        three = (pp == 3) & (self.crossings == 2) & ~np.isnan(both)
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

    def _paced_by_a_crossing(self, f: Seconds) -> tuple[np.ndarray, np.ndarray]:
        """What a pipeline of uniform stages over fast links of `intra_s` and WAN crossings
        waits beyond every link's two transfers, and where that is known: without
        interleaving, three stages or more, two micro-batches or more. Exact with one
        crossing; with more, within a few percent where the pipeline has more micro-batches
        than links after its first crossing (`_paced`; with fewer, 1F1B over crossings longer
        than the compute can be up to a fifth over)."""
        cross, after, lone = self._crossings
        pp, vp, m, crossings, intra, t, fwd, _ = np.broadcast_arrays(
            self.pp,
            self.vp,
            self.micro_batches,
            self.crossings,
            self.intra_s,
            self.t_mb,
            f,
            cross[..., 0],
        )
        cross = np.broadcast_to(cross, pp.shape + cross.shape[-1:])
        after = np.broadcast_to(after, cross.shape)
        lone = np.broadcast_to(lone, cross.shape)
        told = (crossings == 1) | (self.crossing_s is not None)
        known = np.array(
            (vp == 1) & (pp > 2) & (m >= 2) & told & np.isfinite(intra) & (after[..., 0] >= 0)
        )
        paced = np.zeros(pp.shape)
        if not known.any():
            return paced, known
        k = np.flatnonzero((after[known] >= 0).any(axis=0)).max() + 1  # crossings come first
        cross, after, lone = (x[known][:, :k] for x in (cross, after, lone))
        valid = after >= 0
        # Not known: a link that carries nothing; no crossing slower than the links inside (a
        # link inside then paces).
        finite = np.where(valid, np.isfinite(cross), True).all(axis=-1)
        paces = (valid & (cross >= intra[known][:, None])).any(axis=-1)
        ok = finite & paces
        rows = np.flatnonzero(known)[ok]
        i, tt, mm, ff = (x.reshape(-1)[rows] for x in (intra, t, m, fwd))
        paced.reshape(-1)[rows] = _paced(
            cross[ok], after[ok], lone[ok], i, tt, mm, ff, self.overlap
        )
        known[known] = ok
        return paced, known

    @cached_property
    def _crossings(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each crossing's transfer time, the links after it and whether the stage before it
        sits alone between it and the crossing before (`_alone_before`), (plans, crossings):
        as told, or the one crossing at `wan_s`."""
        after = np.asarray(self.after, dtype=float)
        if self.crossing_s is None:  # the first crossing's, as one crossing's
            first = after[..., 0] if after.ndim > 1 and after.shape[-1] else after
            wan, one = np.broadcast_arrays(np.asarray(self.wan_s, dtype=float), first)
            return wan[..., None], one[..., None], np.zeros((*one.shape, 1), dtype=bool)
        cross = np.asarray(self.crossing_s, dtype=float)
        if not cross.shape[-1]:  # no crossing a plan
            none = (*cross.shape[:-1], 1)
            return np.full(none, np.nan), np.full(none, -1.0), np.zeros(none, dtype=bool)
        after = np.where(np.isnan(cross), -1.0, np.broadcast_to(after, cross.shape))
        return cross, after, _alone_before(after)


def _paced(cross, after, lone, intra, t, m, f, overlap: bool) -> np.ndarray:
    """Rows of pipelines over WAN crossings (`cross`, each one's transfer, `after`, the links
    after it, (rows, crossings), -1 past the last, and `lone`, `_alone_before(after)`) and
    fast links of `intra` between:
    the largest over the crossings of what the step waits, beyond every link's two
    transfers, paced by the stage beside that crossing. The fill hides part of its transfers
    behind each link after it, up to one fewer links than micro-batches; a link hides the
    less the nearer its own time is to the crossing's. The stage before a crossing that sits
    alone between it and the crossing before waits on that one too: behind the links after,
    the two are as one crossing of their time less a link inside a domain. The one-crossing
    form is derived from the schedules' programs and equal to their event simulation; the
    several-crossings and lone-stage terms were found on that simulation, and are within a few
    percent of it (the tests check both)."""
    valid = after >= 0
    # the rows by their crossings, most first: the rows with a j-th are the first `rows[j]`
    count = valid.sum(axis=1)
    order = np.argsort(-count, kind="stable")
    rows = np.cumsum(np.bincount(count, minlength=cross.shape[1] + 1)[::-1])[::-1]
    cross, after, valid, lone = cross[order], after[order], valid[order], lone[order]
    intra, t, m, f = (np.asarray(x, dtype=float)[order, None] for x in (intra, t, m, f))
    # the stage before a crossing waits on its other side too: the crossing before it where it
    # sits alone between two, else a link inside its domain
    side = np.where(lone, np.roll(cross, 1, axis=-1), intra)
    s = side - intra  # what a lone stage's first crossing adds to the second's time
    if overlap:  # 1F1B
        # and the first link after a crossing is the next crossing where a stage sits alone
        # between them, else one inside a domain
        first = np.where(np.roll(lone, -1, axis=-1), np.roll(cross, -1, axis=-1), intra)
        first[:, -1] = intra[:, 0]

        def further(d, c, n=None, j=None):
            d = d + s[:n, :j]
            return np.minimum(np.minimum(d, f[:n]), t[:n] - d)

        at_last = cross + side + np.minimum(np.minimum(side, f), t - side)
        one_after = np.minimum(np.minimum(at_last + cross - first, cross + side + f), side + t)
        # a lone stage's crossings hide behind the first link after as behind the others,
        # less a link inside
        one_after = np.where(lone, at_last + further(cross - first, cross) - intra, one_after)
        per_mb = cross + side
        reach = np.minimum(after, m - 1)
    else:  # blocking calls

        def further(d, c, n=None, j=None):
            o = s[:n, :j]
            return np.minimum(np.minimum(2 * (d + o), c + o + f[:n]), t[:n] + 2 * intra[:n])

        base = 2 * cross + 4 * side
        e = np.maximum(np.maximum(0.0, side - f), 2 * side - t)
        at_last = base - e
        one_after = np.minimum(
            np.minimum(at_last + 2 * (cross - intra + s), base + cross + side - 3 * intra + f),
            at_last + t + np.where(lone, 0.0, e - 2 * intra),
        )
        per_mb = np.maximum(2 * (cross + side), 4 * intra)
        # a lone stage's second crossing takes one of the fill's micro-batches
        reach = np.minimum(after, m - 1 - lone)

    def later(n, j):
        """What the j-th crossing hides among the links after each before it (rows `:n`):
        as a link by its gap to that crossing; with 1F1B, where neither stage beside them
        sits alone, at least what a crossing that outlasts the compute leaves it (found on
        the simulation)."""
        cq, cr = cross[:n, :j], cross[:n, j, None]
        by_gap = further(cq - cr, cq, n, j)
        if not overlap:
            return by_gap
        i, tt = intra[:n], t[:n]
        slower = np.minimum(
            np.minimum(2 * cr - cq + tt - i, 3 * cq - 2 * cr - tt + i), cq - f[:n] - 2 * i
        )
        plain = ~lone[:n, :j] & ~lone[:n, j, None]
        return np.where(plain, np.maximum(by_gap, slower), by_gap)

    crossed, near = np.zeros(cross.shape), np.zeros(cross.shape)
    for j in range(1, cross.shape[1]):  # a later crossing within reach of each before it
        n = rows[j + 1]
        at = after[:n, :j] - after[:n, j, None]  # its place among the links after each
        seen = (at >= 2) & (at <= reach[:n, :j])  # the first link after is `first`'s
        crossed[:n, :j] += np.where(seen, later(n, j), 0.0)
        near[:n, :j] += seen
    inside = np.maximum(reach - 1 - near, 0)  # links inside domains, past the first
    hidden = one_after + crossed + inside * further(cross - intra, cross)
    hidden = np.where(reach <= 0, at_last, hidden)
    # a crossing faster than the links inside paces nothing (its form does not hold there)
    paces = valid & (cross >= intra)
    paced = np.empty(len(order))
    paced[order] = np.where(paces, m * per_mb - hidden, -np.inf).max(axis=1, initial=-np.inf)
    return paced


def _alone_before(after: np.ndarray) -> np.ndarray:
    """(..., crossings): where the stage before each crossing sits alone in its domain between
    it and the crossing before (the two one link apart)."""
    lone = np.zeros(after.shape, dtype=bool)
    lone[..., 1:] = (after[..., 1:] >= 0) & (after[..., :-1] - after[..., 1:] == 1)
    return lone
