"""The shared package listings (`gpuctl.parsers.packages`) meet hostile lines: a name or version
holding a blank or a control character (an escape sequence, a carriage return), or a name no
package manager allows. Such a line is never taken as an installed package and never raises;
the lines around it are read as before (issue 18: package_mirror moves to this reader)."""

from __future__ import annotations

from gpuctl.parsers.packages import parse_dpkg, parse_rpm

GOOD = "apt-cacher-ng\t3.7.4-1\tinstall ok installed"
HOSTILE = [
    "pwn\x1b[31m\t1.0\tinstall ok installed",  # an escape sequence in the name
    "pwn\rnvidia-driver\t1.0\thold ok installed",  # a carriage return hides the first word on a terminal
    "two words\t1.0\tinstall ok installed",
    "-rf\t1.0\tinstall ok installed",  # not a Debian package name (must start with a letter or digit)
    "libfoo\t1.0 ;reboot\tinstall ok installed",  # a blank in the version
    "libbar\t1.0\x07\tinstall ok installed",
    "\t\t",
    "x" * 5000 + "\t1\tinstall ok installed",
]


def test_a_hostile_dpkg_line_is_no_package_and_no_traceback() -> None:
    snap = parse_dpkg([GOOD, *HOSTILE, "nvidia-open\t580.95.05-1\thold ok installed"])
    assert set(snap.packages) == {"apt-cacher-ng", "nvidia-open"}
    assert snap.packages["nvidia-open"].held and snap.version("apt-cacher-ng") == "3.7.4-1"
    half = parse_dpkg(["evil\x1b[2J\t1.0\tinstall reinstreq half-installed"])
    assert half.interrupted and half.unfinished == ("<an unreadable dpkg line>",)  # never the escape itself


def test_a_hostile_rpm_line_is_no_package_and_no_traceback() -> None:
    lines = ["nvidia-driver\t3:580.95.05-1.el9", "pwn\x1b]0;x\x07\t0:1-1", "two words\t0:1-1", "kmod\t0:1 -1",
             "##gpuctl-versionlock", "nvidia-driver-3:580.95.05-1.el9.*", "evil\x1b-0:1-1.*"]
    snap = parse_rpm(lines)
    assert set(snap.packages) == {"nvidia-driver"}
    assert snap.locks == frozenset({"nvidia-driver-3:580.95.05-1.el9"})
