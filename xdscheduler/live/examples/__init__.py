"""Training code of one's own for live jobs, written against `live.plan` (see docs/live.md)."""
