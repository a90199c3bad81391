"""The operator's views, rendered as HTML and SVG on the server (jinja2): the resource graph,
the jobs table, the queue, the decision log and the fault timeline. The live dashboard swaps
them in as they change (a small script polling `/api/view`); the study report embeds the graph.
"""

from __future__ import annotations

import math
from functools import cache

import jinja2

LINK_OK, LINK_LOW = 0.9, 0.7  # bandwidth now over leased: green at or above OK, red below LOW
NODE_R = (14.0, 40.0)  # node radius of the smallest and the largest domain, px
GRAPH_SIZE = (640, 420)


@cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("xdscheduler.monitor", "templates"),
        autoescape=jinja2.select_autoescape(("html", "svg", "j2")),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["hours"] = lambda s: "–" if s is None else f"{s / 3600:.2f} h"
    env.filters["num"] = lambda x, fmt="{:.3g}": "–" if x is None else fmt.format(x)
    return env


def graph_svg(domains: list[dict], links: list[dict], title: str = "") -> str:
    """Domains as nodes sized by capacity and filled by the share allocated, links coloured by
    bandwidth now against the lease, and where a link gives `sent_gbps` (what jobs sent over
    it) a line over it as wide as that share of the lease; placed by latitude and longitude
    when every domain has them, else on a circle. Each element carries `data-domain` or
    `data-link`."""
    width, height = GRAPH_SIZE
    pos = _layout(domains, width, height)
    biggest = max((d["total"] for d in domains), default=1) or 1
    nodes = []
    for d, (x, y) in zip(domains, pos, strict=True):
        share = d["allocated"] / d["total"] if d["total"] else 0.0
        r = NODE_R[0] + (NODE_R[1] - NODE_R[0]) * math.sqrt(d["total"] / biggest)
        nodes.append(
            {
                **d,
                "x": x,
                "y": y,
                "r": r,
                "share": min(share, 1.0),
                "fill": _blue(share) if d["up"] else "#9e9e9e",
            }
        )
    where = {d["name"]: (n["x"], n["y"]) for d, n in zip(domains, nodes, strict=True)}
    top = max((lk["leased_gbps"] for lk in links), default=1.0)
    edges = []
    for lk in links:
        leased = lk["leased_gbps"]
        ratio = lk["bandwidth_gbps"] / leased if leased else 0.0
        sent = lk.get("sent_gbps") or 0.0
        (x1, y1), (x2, y2) = where[lk["a"]], where[lk["b"]]
        edges.append(
            {
                **lk,
                "x1": x1,
                "y1": y1,
                "x2": x2,
                "y2": y2,
                "ratio": ratio,
                "color": link_color(ratio),
                "width": 1.5 + 4.5 * math.log1p(leased) / math.log1p(top),
                "sent": sent,
                "sent_width": 1.0 + 5.0 * min(sent / leased if leased else 0.0, 1.0),
                "labels": _beside((x1, y1), (x2, y2)),
            }
        )
    return (
        _env()
        .get_template("graph.svg.j2")
        .render(
            nodes=nodes,
            edges=edges,
            width=width,
            height=height,
            title=title,
            ok=LINK_OK,
            low=LINK_LOW,
            sent=any(e["sent"] > 0 for e in edges),
        )
    )


def _beside(a: tuple[float, float], b: tuple[float, float], gap: float = 7.0) -> list[dict]:
    """Where a link's two labels go: either side of its middle, off the line (the bandwidth
    on one side, what was sent on the other), anchored away from it."""
    (x1, y1), (x2, y2) = a, b
    length = math.hypot(x2 - x1, y2 - y1) or 1.0
    nx, ny = (y1 - y2) / length, (x2 - x1) / length  # the line's normal
    out = []
    for side in (1.0, -1.0):
        dx, dy = side * nx, side * ny
        anchor = "middle" if abs(dx) < 0.5 else ("start" if dx > 0 else "end")
        x = (x1 + x2) / 2 + gap * dx
        # text rises from its baseline: a label under the line goes down more to clear it
        y = (y1 + y2) / 2 + gap * dy + (4.0 if dy > 0.5 else 0.0 if dy > -0.5 else -2.0)
        out.append({"x": x, "y": y, "anchor": anchor})
    return out


def link_color(ratio: float) -> str:
    return "#2e7d32" if ratio >= LINK_OK else "#f9a825" if ratio >= LINK_LOW else "#c62828"


def fragments(state: dict) -> dict[str, str]:
    """Each section of the dashboard for one policy's state."""
    env = _env()
    jobs = state["jobs"]
    return {
        "status": env.get_template("status.html").render(s=state),
        "graph": graph_svg(state["domains"], state["links"]),
        "jobs": env.get_template("jobs.html").render(jobs=jobs),
        "queue": env.get_template("queue.html").render(queue=state["queue"]),
        "decisions": env.get_template("decisions.html").render(
            decisions=list(reversed(state["decisions"][-50:]))
        ),
        "faults": env.get_template("faults.html").render(
            faults=state["faults"], now_s=state["now_s"]
        ),
    }


def page(policy: str | None, refresh_ms: int = 1000) -> str:
    """The dashboard's page: empty sections its script fills from `/api/view`."""
    return _env().get_template("dashboard.html").render(policy=policy or "", refresh_ms=refresh_ms)


def _layout(domains: list[dict], width: float, height: float) -> list[tuple[float, float]]:
    pad = NODE_R[1] + 30
    height -= 16  # the legend's line
    coords = [(d.get("lon"), d.get("lat")) for d in domains]
    if len(domains) > 1 and all(x is not None and y is not None for x, y in coords):
        xs = [x for x, _ in coords if x is not None]  # all of them, as checked above
        ys = [y for _, y in coords if y is not None]
        span_x, span_y = max(xs) - min(xs), max(ys) - min(ys)
        if span_x > 0 and span_y > 0:
            scale = min((width - 2 * pad) / span_x, (height - 2 * pad) / span_y)
            ox = (width - scale * span_x) / 2
            oy = (height - scale * span_y) / 2
            placed = [
                (ox + scale * (x - min(xs)), height - oy - scale * (y - min(ys)))
                for x, y in zip(xs, ys, strict=True)
            ]
            if (
                min(math.dist(p, q) for i, p in enumerate(placed) for q in placed[i + 1 :])
                >= 2 * NODE_R[1] + 10
            ):  # else nodes of nearby sites would hide each other
                return placed
    k = max(len(domains), 1)
    rx, ry = width / 2 - pad, height / 2 - pad
    return [
        (
            width / 2 + rx * math.cos(2 * math.pi * i / k - math.pi / 2),
            height / 2 + ry * math.sin(2 * math.pi * i / k - math.pi / 2),
        )
        for i in range(k)
    ]


def _blue(share: float) -> str:
    """White (nothing allocated) to deep blue (all of it)."""
    share = min(max(share, 0.0), 1.0)
    light, dark = (227, 242, 253), (13, 71, 161)
    r, g, b = (round(a + (z - a) * share) for a, z in zip(light, dark, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"
