"""A numeric knob reaches a role as a number or a string of digits; anything else is refused with
its field named (`gpuctl.operations.whole_number` / `decimal_number`), never a bare ValueError from
int()/float() (issue 18: package_mirror's ports, gds's sizes, nvidia_driver's reboot seconds)."""

from __future__ import annotations

import pytest

from gpuctl.operations import UnsafeValue, decimal_number, whole_number


def test_whole_numbers() -> None:
    assert whole_number(3142, "p") == 3142 and whole_number("8080", "p") == 8080
    for bad in ("80\nPWN", "", "١٢", "0x50", True, 1.5, None, ["80"]):
        with pytest.raises(UnsafeValue, match=r"refusing package_mirror_port = .*: not a whole number"):
            whole_number(bad, "package_mirror_port")


def test_decimal_numbers() -> None:
    assert decimal_number(0, "s") == 0.0 and decimal_number("2.5", "s") == 2.5 and decimal_number(1.5, "s") == 1.5
    for bad in ("5\n; reboot", "nan", float("inf"), False, "1e309", None):
        with pytest.raises(UnsafeValue, match=r"refusing nvidia_driver_reboot_delay_s = .*: not a number"):
            decimal_number(bad, "nvidia_driver_reboot_delay_s")
