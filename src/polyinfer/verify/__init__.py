"""The verification battery a winning candidate must pass before it becomes an artifact."""

from polyinfer.verify.battery import ALL_CHECKS, verify_candidate
from polyinfer.verify.config import TOLERANCES, BatteryConfig, Tolerance
from polyinfer.verify.report import CheckResult, Report, record_verdicts

__all__ = [
    "ALL_CHECKS",
    "TOLERANCES",
    "BatteryConfig",
    "CheckResult",
    "Report",
    "Tolerance",
    "record_verdicts",
    "verify_candidate",
]
