"""`nvidia-smi --query-gpu=... --format=csv`: the CSV form, read into `NvidiaSmiResult`."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text
from gpuctl.parsers.nvidia_smi.model import QUERY_GPU_FIELDS, TOOL, GpuInfo, NvidiaSmiResult, check_failure
from gpuctl.parsers.nvidia_smi.values import clean, flag, number

# ---------------------------------------------------------------- --query-gpu CSV

_CSV_MAP: dict[str, tuple[str, Callable[[str | None, str], Any]]] = {
    "index": ("index", lambda v, w: number(v, w)),
    "name": ("name", lambda v, w: clean(v)),
    "pci.bus_id": ("bus_id", lambda v, w: clean(v)),
    "driver_version": ("driver_version", lambda v, w: clean(v)),
    "pcie.link.gen.current": ("pcie_gen_current", number),
    "pcie.link.gen.gpucurrent": ("pcie_gen_current", number),
    "pcie.link.gen.max": ("pcie_gen_max", number),
    "pcie.link.gen.gpumax": ("pcie_gen_max", number),
    "pcie.link.width.current": ("pcie_width_current", number),
    "pcie.link.width.max": ("pcie_width_max", number),
    "memory.total": ("memory_total_mib", number),
    "persistence_mode": ("persistence_mode", flag),
    "ecc.mode.current": ("ecc_mode", flag),
    "ecc.errors.uncorrected.volatile.total": ("ecc_volatile_uncorrectable", number),
    "ecc.errors.uncorrected.aggregate.total": ("ecc_aggregate_uncorrectable", number),
    "ecc.errors.corrected.aggregate.total": ("ecc_aggregate_correctable", number),
    "retired_pages.pending": ("retired_pending", flag),
    "retired_pages.single_bit_ecc.count": ("retired_sbe", number),
    "retired_pages.double_bit.count": ("retired_dbe", number),
    "remapped_rows.correctable": ("remapped_correctable", number),
    "remapped_rows.uncorrectable": ("remapped_uncorrectable", number),
    "remapped_rows.pending": ("remap_pending", flag),
    "remapped_rows.failure": ("remap_failure", flag),
    "serial": ("serial", lambda v, w: clean(v)),
    "uuid": ("uuid", lambda v, w: clean(v)),
}
_GPU_FIELDS = {f.name for f in fields(GpuInfo)}
# "memory.total [MiB]" in a header written without `nounits`
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")
# a header cell: a --query-gpu field name ("pci.bus_id", "clocks_event_reasons.active"), never a value
_FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*$")


# "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |"
_TABLE = re.compile(r"^\|\s*NVIDIA-SMI \S+", re.M)
# "GPU 0: NVIDIA H200 (UUID: GPU-...)"
_LIST = re.compile(r"^GPU \d+: .*\(UUID: ", re.M)
_CSV_HINT = "run nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits"


def _csv_refuse_other_forms(text: str) -> None:
    """The plain table, `-L` and `-q` are common wrong pastes: name them."""
    if _TABLE.search(text):
        raise ParseError(f"{TOOL} --query-gpu: this is the plain nvidia-smi table, not CSV; {_CSV_HINT}")
    if _LIST.search(text):
        raise ParseError(f"{TOOL} --query-gpu: this is nvidia-smi -L (the GPU list), not CSV; {_CSV_HINT}")
    if "NVSMI LOG" in text:
        raise ParseError(f"{TOOL} --query-gpu: this is nvidia-smi -q text (use the nvidia-smi-q kind); {_CSV_HINT}")


def parse_query_gpu_csv(text: str, query_fields: tuple[str, ...] = QUERY_GPU_FIELDS) -> NvidiaSmiResult:
    """Parse `nvidia-smi --query-gpu=<query_fields> --format=csv[,noheader][,nounits]`.

    A header line, if present, decides the columns (so `query_fields` may be omitted);
    units left in by a missing `nounits` ("81559 MiB") are removed. Columns gpuctl does
    not read (memory.used, pstate, ...) are skipped and named in `notes`.
    """
    text = require_text(text, TOOL)
    check_failure(text)
    _csv_refuse_other_forms(text)
    reader = csv.reader(io.StringIO(text.strip()), skipinitialspace=True)
    records = [r for r in reader if r and any(c.strip() for c in r)]
    columns = list(query_fields)
    if records and records[0] and all(_FIELD_NAME.match(_HEADER_UNIT.sub("", c.strip())) for c in records[0]):
        columns = [_HEADER_UNIT.sub("", c.strip()) for c in records[0]]
        records = records[1:]
    if not records:
        raise ParseError(f"{TOOL} --query-gpu: a header but no GPU lines")
    # A column gpuctl does not judge (memory.used, pstate, power.draw, ...) is skipped, not
    # refused: only the columns it reads matter, and one of them must be there.
    unknown = [c for c in columns if c not in _CSV_MAP]
    if len(unknown) == len(columns):
        raise ParseError(f"{TOOL} --query-gpu: none of the fields gpuctl reads ({', '.join(unknown)}); "
                         f"{_CSV_HINT}")
    notes = (f"columns not judged by gpuctl, skipped: {', '.join(unknown)}",) if unknown else ()
    gpus = []
    for n, record in enumerate(records):
        line = ", ".join(record)
        if len(record) != len(columns):
            raise ParseError(
                f"{TOOL} --query-gpu: {len(record)} values where {len(columns)} fields were asked for: {quote(line)}"
            )
        values: dict[str, Any] = {}
        for column, raw in zip(columns, record, strict=True):
            if column not in _CSV_MAP:
                continue
            attr, convert = _CSV_MAP[column]
            try:
                values[attr] = convert(raw, f"{column} in {quote(line)}")
            except ParseError:
                raise
        values.setdefault("index", n)
        if values["index"] is None:
            values["index"] = n
        values.setdefault("name", None)
        values.setdefault("bus_id", None)
        gpus.append(GpuInfo(**{k: v for k, v in values.items() if k in _GPU_FIELDS}))
    drivers = {g.driver_version for g in gpus if g.driver_version}
    return NvidiaSmiResult("csv", drivers.pop() if len(drivers) == 1 else None, None, tuple(gpus), notes)
