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


# ------------------------------------------------------------------ issue 17: hostile strings in every field

def _full_inventory() -> dict:
    """h100-8x4 with a mirror, a threshold and every knob at its default under role_vars
    (those the schema takes as an override), so every field and knob holds a string to fuzz."""
    import yaml

    from gpuctl.components import all_defaults as role_defaults

    data = yaml.safe_load(BASE)
    data["role_vars"] = {k: v for k, v in role_defaults().items() if v is not None
                         and not (isinstance(v, dict) and any(isinstance(x, dict) for x in v.values()))
                         and not (isinstance(v, list) and not all(isinstance(x, str) for x in v))}
    data["thresholds"] = {"all_reduce_busbw_gb_s": {"min": 1, "source": "site acceptance"}}
    data["repos"] = {"mirror": "http://mirror.example:8080/nvidia", "keyring_sha256": "0" * 64}
    return data


def _leaves(data: object, path: tuple = ()) -> list[tuple]:
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in _leaves(v, (*path, k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in _leaves(v, (*path, i))]
    return [path] if isinstance(data, str) else []


FULL = _full_inventory()
LEAVES = _leaves(FULL)
_CONTROL = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))] + ["\u2028", "\u2029"]
HOSTILE = st.one_of(
    st.lists(st.sampled_from(_CONTROL), min_size=1, max_size=3).map("".join),           # control characters
    st.sampled_from(["../", "/..", "/../../etc/passwd", "//", "/./", "..", "~root/", "/etc", "/"]),  # traversal
    st.sampled_from(["'", '"', "`id`", "$(id)", ";id", "|id", "&&id", "\\", " -f", " ", "*", "{x}"]),  # quotes/meta
    st.sampled_from([300, 5000, 70000]).map(lambda n: "a" * n),                            # overlong
    st.text(st.characters(min_codepoint=0x80, max_codepoint=0x2FFF, exclude_categories=("Cs",)), min_size=1,
            max_size=4),                                                                    # unicode
)


def hostile_value(original: str, payload: str, how: int) -> str:
    return [payload, original + payload, payload + original, original[:1] + payload + original[1:]][how]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LEAVES), HOSTILE, st.integers(0, 3))
def test_hostile_string_in_any_field_or_knob_is_refused_with_file_line_or_kept_whole(path, payload, how) -> None:
    """Exit 2 with `file:line: field` for the field that holds it, or (a value the field may
    hold: unicode in a threshold's source) an inventory whose value holds no control character
    and resolves to NodeSpecs without a traceback; the deploy tier checks those reach no
    command unquoted (tests/deploy/test_injection_walk.py)."""
    import copy
    import re

    import yaml

    from gpuctl.boundary import control_character
    from gpuctl.spec import resolve
    from gpuctl.yamlsrc import format_path

    data = copy.deepcopy(FULL)
    cur = data
    for part in path[:-1]:
        cur = cur[part]
    value = hostile_value(cur[path[-1]], payload, how)
    cur[path[-1]] = value
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**6)
    try:
        loaded = load_inventory_text(text, "fuzz.yaml", base_dir=inventories_dir())
    except InputError as exc:
        # the field named with its line, or (a value too long for the YAML reader) the line alone
        field = re.escape(format_path(path))
        assert any(re.match(rf"fuzz\.yaml:\d+: {field}[:.\[ ]", p) for p in exc.problems) or \
            (not exc.problems and re.match(r"fuzz\.yaml:\d+: ", str(exc))), (format_path(path), str(exc), exc.problems)
        return
    assert control_character(value) is None, f"{format_path(path)} accepted {value!r}"
    resolve(loaded)
