"""Host lists folded into ranges for the operator's summary."""

from gpuctl.hostlist import fold


def test_consecutive_padded_names_fold_into_one_range() -> None:
    assert fold([f"gpu-{i:02d}" for i in range(1, 65)]) == "gpu-[01-64]"


def test_gaps_other_prefixes_and_plain_names_keep_their_order() -> None:
    assert fold(["gpu-01", "gpu-02", "gpu-03", "gpu-07", "head", "gpu-09"]) == "gpu-[01-03,07,09], head"
    assert fold(["b-2", "a-1", "b-1"]) == "b-[1-2], a-1"


def test_a_lone_name_and_duplicates_are_left_readable() -> None:
    assert fold(["gpu-05"]) == "gpu-05"
    assert fold(["login"]) == "login"
    assert fold(["gpu-01", "gpu-01", "gpu-02"]) == "gpu-[01-02]"
    assert fold([]) == ""


def test_different_widths_are_different_names() -> None:
    assert fold(["n9", "n10", "n11"]) == "n9, n[10-11]"
