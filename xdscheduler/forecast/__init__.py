"""Demand forecasting: known jobs (structure), history models, their hybrid, backtests."""

TARGETS = ("occupancy", "arrivals")
HORIZONS = {"10m": 10, "1h": 60, "6h": 360}  # minutes
