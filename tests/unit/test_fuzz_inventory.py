"""Property test: mutated or random YAML never produces a traceback, only a clean InputError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory_text
from gpuctl.paths import inventories_dir

BASE = (inventories_dir() / "h100-8x4.yaml").read_text()
LINES = BASE.splitlines()

yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                         st.text(max_size=12))
yaml_values = st.recursive(yaml_scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                             st.dictionaries(st.text(max_size=8), c, max_size=3)),
                           max_leaves=8)


def _load(text: str) -> None:
    try:
        load_inventory_text(text, "fuzz.yaml", base_dir=inventories_dir())
    except InputError as exc:
        assert str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_random_text_never_tracebacks(text: str) -> None:
    _load(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(LINES) - 1), st.text(max_size=40))
def test_replaced_line_never_tracebacks(index: int, replacement: str) -> None:
    lines = list(LINES)
    lines[index] = replacement
    _load("\n".join(lines))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(LINES) - 1), st.integers(1, 40))
def test_truncated_or_spliced_never_tracebacks(index: int, cut: int) -> None:
    _load(BASE[: index * cut % max(len(BASE), 1)])
    _load("\n".join(LINES[:index] + LINES[index + 1:]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["cluster", "ssh", "repos", "fabric", "vlans", "storage", "racks", "nodes", "thresholds",
                        "management", "handover"]), yaml_values)
def test_structured_mutation_never_tracebacks(key: str, value: object) -> None:
    import yaml

    data = yaml.safe_load(BASE)
    data[key] = value
    _load(yaml.safe_dump(data))
