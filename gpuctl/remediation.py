"""What an operator does about a finding — shared by node checks and benchmark verdicts.

Its own module so the check runner does not import the benchmark parsers and verdict
rules just to name a remediation (verify's start-up, issue 8).
"""

from __future__ import annotations

from enum import StrEnum


class Remediation(StrEnum):
    NONE = "none"
    REBOOT = "reboot"
    RESEAT_OR_REPLACE = "reseat_or_replace"
    RECONFIGURE = "reconfigure"
    RERUN = "rerun"
    VENDOR_RMA = "vendor_rma"
