"""Watching live studies: their state, Prometheus metrics, the dashboard, the report's views."""
