"""Round-trip times from geography: great-circle distance along a realistic fibre route."""

from __future__ import annotations

import math

EARTH_RADIUS_KM = 6371.0
FIBRE_KM_PER_MS = 204.0  # light in silica fibre travels at c/1.47, about 204 km per ms
ROUTE_FACTOR = 1.5  # fibre routes run about 1.5x the great-circle distance between cities
EQUIPMENT_RTT_MS = 1.0  # switching, amplification and the last mile, both ways


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(a))


def fibre_rtt_ms(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """RTT of a fibre path between two points, in milliseconds."""
    route_km = great_circle_km(lat1, lon1, lat2, lon2) * ROUTE_FACTOR
    return 2 * route_km / FIBRE_KM_PER_MS + EQUIPMENT_RTT_MS
