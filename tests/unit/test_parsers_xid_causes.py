"""Issue 19, class 6: Xid 45 lines that name their cause ("caused by previous Xid 149/145")
lead to the NVLink fault they point at, even when the cause's own line is not in the log
(tests/data/fixtures/issue19/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from gpuctl.analyze import analyze_text
from gpuctl.parsers.xid import parse_xid_log
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures"
ONLY_45 = FIX / "issue19" / "journal-xid45-caused-by-previous-xid149-145-4gpu-ogkm1150.txt"
GB200_149 = FIX / "xid" / "journalctl-gb200-xid149-netir-fatal-xid154-drain-reset.txt"


def test_the_named_cause_is_read() -> None:
    r = parse_xid_log(ONLY_45.read_text())
    assert [(e.bus_id, e.xid, e.caused_by) for e in r.events[:2]] == [("0000:dc:00", 45, 149), ("0000:ed:00", 45, 145)]


def test_each_gpu_fails_on_the_nvlink_fault_its_xid45_names() -> None:
    a = analyze_text("xid", ONLY_45.read_text())
    assert a.status is Status.FAIL
    causes = sorted((v.subject.bus_id, v.value) for v in a.verdicts if v.status is Status.FAIL)
    assert causes == [("0000:97:00", 145), ("0000:ba:00", 145), ("0000:dc:00", 149), ("0000:ed:00", 145)]
    v = next(v for v in a.verdicts if v.subject.bus_id == "0000:dc:00" and v.status is Status.FAIL)
    assert "named as the cause of 2 Xid 45 lines" in v.message and "caused by previous Xid" in v.source


def test_a_cause_whose_own_line_is_in_the_log_is_not_judged_twice() -> None:
    text = GB200_149.read_text()
    bus = "0018:01:00"
    text += (f"Sep 19 10:30:07 coastline-turtle-cn02 kernel: NVRM: Xid (PCI:{bus}): 45, pid=4242, name=python3, "
             "Ch 00000001 caused by previous Xid 149\n")
    a = analyze_text("xid", text)
    named = [v for v in a.verdicts if v.value == 149]
    assert len(named) == 1 and "named as the cause" not in named[0].message
