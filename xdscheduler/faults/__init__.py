"""Failures: a published-rate failure model, heartbeat and log detectors combined into verdicts,
the detector benchmark, and checkpoint intervals (Young/Daly)."""
