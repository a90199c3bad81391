"""xdscheduler: schedules large-model training across compute domains joined by WAN links."""

__version__ = "0.1.0"
