"""The typed results of verify and bench: what `stages/verify.json` and `stages/bench.json`
hold, written through these models and read back through them (the report reads nothing else).

Results layer: the workflows (gpuctl.checks.runner, gpuctl.bench.run) hand their results in;
the report (gpuctl.report) and other readers take `VerifyStage` / `BenchStage` out, never the
raw dicts and never the workflows. The on-disk JSON is the shape gpuctl has always written:
every field is optional (an older record lacks some: a bench record from before issue 18 has
no per-node `thresholds`, older ones no `emulated`, `training`, `localisation`), fields a model
does not name are kept as they are, and a model is written with only the fields it was given
(`dump`), so writing a result through its model changes no byte of its shape.

A record without the cluster snapshot (a verify-only run, a bench record that predates it)
gets it from its inventory file while that still has the recorded sha256
(`snapshot_from_inventory`, the one conversion of an older record).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError

from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory
from gpuctl.runcontext import inventory_summary, matrix_summary
from gpuctl.runrecord import RunRecord, sha256_file
from gpuctl.runshape import kind_of
from gpuctl.spec import resolve
from gpuctl.verdicts import Status
from gpuctl.yamlsrc import format_path

# strict: a number is a JSON number (not "5", not true), a yes/no is true/false
Number = StrictInt | StrictFloat
Value = StrictBool | StrictInt | StrictFloat | str | None  # a verdict's value or threshold, as the verdict had it


class _Record(BaseModel):
    """A part of a run record: unknown fields are kept, nothing is coerced that JSON keeps apart."""

    model_config = ConfigDict(extra="allow", frozen=True)

    def dump(self) -> dict[str, Any]:
        """The JSON object as written: only the fields that were given, unknown ones kept."""
        return self.model_dump(mode="json", exclude_unset=True)


# ---------------------------------------------------------------------------- verify


class CheckStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"  # could not run


class HostStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNREACHABLE = "unreachable"  # no check could run (SSH failed)
    ERROR = "error"  # some checks could not run, none failed


class CheckRecord(_Record):
    """One check on one host (gpuctl.checks.model.CheckResult)."""

    host: str = ""
    check: str = ""
    role: str | None = None
    status: CheckStatus = CheckStatus.ERROR
    expected: str = ""
    found: str = ""
    remediation: str = ""
    message: str = ""
    duration_s: Number = 0.0
    unreachable: StrictBool = False


class CheckBrief(_Record):
    """A failed or could-not-run check as the host's summary lists it."""

    check: str = ""
    expected: str = ""
    found: str = ""
    remediation: str = ""
    message: str = ""


class VerifyHost(_Record):
    host: str = ""
    status: HostStatus = HostStatus.ERROR
    unreachable_reason: str | None = ""
    counts: dict[str, StrictInt] = Field(default_factory=dict)
    failed: list[CheckBrief] = Field(default_factory=list)
    could_not_run: list[CheckBrief] = Field(default_factory=list)
    checks: list[CheckRecord] = Field(default_factory=list)


class VerifyStage(_Record):
    """`stages/verify.json` (gpuctl.checks.model.VerifyResult plus the session's ssh_config and
    pytest arguments)."""

    status: HostStatus | None = None  # None: no status recorded
    run: str | None = None
    duration_s: Number = 0.0
    remote_commands: dict[str, StrictInt] = Field(default_factory=dict)
    hosts: dict[str, VerifyHost] = Field(default_factory=dict)
    ssh_config: str | None = None
    pytest_args: list[str] | None = None


# ---------------------------------------------------------------------------- bench


class ThresholdRecord(_Record):
    """A node's effective threshold as recorded (gpuctl.runcontext.thresholds_summary)."""

    min: Number | None = None
    max: Number | None = None
    warn_below: Number | None = None
    warn_above: Number | None = None
    not_applicable: StrictBool = False
    source: str | None = ""


class BenchResult(_Record):
    """One judged figure: the verdict's fields plus the test, the host, the raw output and why
    it is emulated (gpuctl.bench.judge.result_dict)."""

    check: str = ""
    status: Status = Status.ERROR
    subject: str = ""
    value: Value = None
    threshold: Value = None
    unit: str | None = ""
    source: str | None = ""
    remediation: str | None = "none"
    message: str | None = ""
    test: str | None = ""
    host: str | None = None
    raw: str | None = None
    emulated: str | None = None
    skipped: str | None = None  # the tool said it could not start (the training run without PyTorch)


class BenchTestRun(_Record):
    """One command the bench ran (its raw output under raw/)."""

    test: str = ""
    host: str = ""
    command: str = ""
    exit_status: StrictInt | None = None
    duration_s: Number = 0.0
    timed_out: StrictBool = False
    raw: str = ""


class BenchBucket(_Record):
    """A node's results (or the cluster's: pairs, multi-node runs)."""

    status: Status | None = None  # None: no status recorded
    results: list[BenchResult] = Field(default_factory=list)
    tests: list[BenchTestRun] = Field(default_factory=list)
    thresholds: dict[str, ThresholdRecord] | None = None  # a node's own (none in records before issue 18)


class NcclSeries(_Record):
    """Bus bandwidth against message size of one nccl-tests run, for the chart."""

    label: str = ""
    test: str | None = ""
    gpus: StrictInt | None = None
    emulated: str | None = None
    points: list[tuple[Number, Number]] = Field(default_factory=list)


class TrainingVersions(_Record):
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    gpus: StrictInt | None = None


class TrainingRank(_Record):
    rank: StrictInt | None = None
    node: str | None = ""
    host: str | None = ""
    checksum: str | None = ""
    differs: StrictBool = False


class TrainingRan(_Record):
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None


class TrainingRecord(_Record):
    """The training run across nodes (gpuctl.bench.run.training_summary and what led to it);
    no field given: the run did not start."""

    nodes: list[str] = Field(default_factory=list)
    endpoint: str = ""
    head: str = ""
    versions: dict[str, TrainingVersions] = Field(default_factory=dict)
    argv: dict[str, list[str]] = Field(default_factory=dict)
    rank0_node: str = ""
    loss: list[tuple[Number, Number]] | None = None  # None: the run did not finish
    ranks: list[TrainingRank] = Field(default_factory=list)
    ranks_agree: StrictBool | None = None
    world_size: StrictInt | None = None
    model: str | None = ""
    backend: str | None = ""
    tokens_per_s: Number | None = None
    tokens_per_s_per_rank: Number | None = None
    single_node_tokens_per_s: dict[str, Number | None] = Field(default_factory=dict)
    single_node_loss: dict[str, list[tuple[Number, Number]]] = Field(default_factory=dict)
    ran: TrainingRan | None = None

    @property
    def started(self) -> bool:
        return bool(self.model_fields_set)


class LocalisationFinding(_Record):
    kind: str = ""
    nodes: list[str] = Field(default_factory=list)
    message: str = ""
    evidence: list[StrictInt] = Field(default_factory=list)  # indexes of `LocalisationRecord.steps`
    hcas: list[str] = Field(default_factory=list)
    interfaces: list[str] = Field(default_factory=list)
    rail_note: str = ""


class LocalisationStep(_Record):
    round: StrictInt | None = None
    stage: str = ""
    kind: str = ""
    nodes: list[str] = Field(default_factory=list)
    rail: StrictInt | None = None  # an index into the nodes' rails; None: every rail
    value: Number | None = None
    unit: str = ""
    reference: Number | None = None
    floor: Number | None = None
    slow: StrictBool | None = None
    error: str | None = None
    raw: str | None = ""
    text: str | None = ""


class LocalisationRecord(_Record):
    """The fault finding (gpuctl.bench.localise.Localisation.as_dict); no field given: it did not run."""

    nodes: list[str] = Field(default_factory=list)
    trigger: str | None = ""
    rounds: StrictInt | None = None
    bound: StrictInt | None = None
    findings: list[LocalisationFinding] = Field(default_factory=list)
    steps: list[LocalisationStep] = Field(default_factory=list)
    limits: list[str] = Field(default_factory=list)
    slow_fraction: Number | None = None
    slow_fraction_source: str | None = ""

    @property
    def ran(self) -> bool:
        return bool(self.model_fields_set)


class PackagePin(_Record):
    name: str = ""
    version: str = ""
    pin: str = ""


class ComponentRecord(_Record):
    component: str = ""
    version: str | None = ""
    enabled: StrictBool = True
    reason: str | None = ""
    packages: list[PackagePin] = Field(default_factory=list)


class DriverRecord(_Record):
    version: str | None = ""
    branch: str | None = ""
    flavour: str | None = ""


class MatrixRecord(_Record):
    """The exact matrix the run used (gpuctl.runcontext.matrix_summary)."""

    name: str = ""
    driver: DriverRecord = Field(default_factory=DriverRecord)
    components: list[ComponentRecord] = Field(default_factory=list)


class InventoryRecord(_Record):
    """The cluster the run was made on (gpuctl.runcontext.inventory_summary)."""

    path: str = ""
    sha256: str = ""
    cluster: str = ""
    sku: str = ""
    os: str = ""
    matrix: str = ""
    nodes: list[str] = Field(default_factory=list)
    gpus_per_node: StrictInt = 0
    gpu_model: str = ""


class BenchStage(_Record):
    """`stages/bench.json` (gpuctl.bench.run.run_bench's shape)."""

    suite: str = ""
    run_id: str | None = None
    started: str | None = None
    finished: str | None = None
    status: Status | None = None  # None: no status recorded
    inventory: InventoryRecord | None = None
    matrix: MatrixRecord | None = None
    thresholds: dict[str, ThresholdRecord] = Field(default_factory=dict)  # the first node's: the cluster rows'
    pairing: list[list[list[str]]] = Field(default_factory=list)
    hosts: dict[str, BenchBucket] = Field(default_factory=dict)
    cluster: BenchBucket = Field(default_factory=BenchBucket)
    nccl_series: list[NcclSeries] = Field(default_factory=list)
    training: TrainingRecord = Field(default_factory=TrainingRecord)
    localisation: LocalisationRecord = Field(default_factory=LocalisationRecord)

    def thresholds_of(self, host: str) -> dict[str, ThresholdRecord]:
        """The thresholds `host`'s rows were judged against: its own, or (a record from before
        issue 18) the first node's."""
        own = self.hosts[host].thresholds if host in self.hosts else None
        return own or self.thresholds


# ---------------------------------------------------------------------------- reading and writing


def _field(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The part of a validation error's location that is in the data (the rest names which
    member of a union was tried)."""
    path: list[Any] = []
    for part in loc:
        present = (part in data) if isinstance(data, dict) else (
            isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data))
        if not present:
            break
        data = data[part]
        path.append(part)
    return tuple(path)


#: a validation error's type → what the field should have been, in the run record's words
_WANT = {"dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
         "list_type": "an array", "tuple_type": "an array", "int_type": "a number", "float_type": "a number",
         "string_type": "a string", "bool_type": "true/false"}


def _problem(path: Path | str, data: Any, exc: ValidationError) -> InputError:
    """The run record's own error (worded as `gpuctl.runshape` words a wrong shape): the file,
    then each field that is not what its model says ('hosts.n1.checks: expected an array,
    found a string'; a status outside its set names the set and the value)."""
    fields: dict[tuple[Any, ...], tuple[list[str], Any]] = {}
    for e in exc.errors():
        want = _WANT.get(e["type"]) or e["msg"].removeprefix("Input should be ")
        wants, _ = fields.setdefault(_field(data, tuple(e["loc"])), ([], e["input"]))
        if want not in wants:
            wants.append(want)
    found = [f"{format_path(loc)}: expected {' or '.join(wants)}, found "
             + (repr(value)[:60] if isinstance(value, str) else kind_of(value))
             for loc, (wants, value) in list(fields.items())[:20]]
    return InputError(f"{path}: not a run record gpuctl can read ({len(fields)} field(s) of the wrong "
                      "shape); remove or repair the file", found)


def verify_stage(data: dict[str, Any], where: Path | str = "stages/verify.json") -> VerifyStage:
    """A verify result (as `VerifyResult.as_dict` gives it, or as read from a record)."""
    try:
        return VerifyStage.model_validate(data)
    except ValidationError as exc:
        raise _problem(where, data, exc) from None


def bench_stage(data: dict[str, Any], where: Path | str = "stages/bench.json") -> BenchStage:
    """A bench result (as `BenchRun.run` builds it, or as read from a record)."""
    try:
        return BenchStage.model_validate(data)
    except ValidationError as exc:
        raise _problem(where, data, exc) from None


def read_verify(rec: RunRecord) -> VerifyStage | None:
    """The run's `stages/verify.json` through its model (None: the run has none)."""
    data = rec.read_stage("verify")
    return None if data is None else verify_stage(data, rec.path / "stages" / "verify.json")


def read_bench(rec: RunRecord) -> BenchStage | None:
    """The run's `stages/bench.json` through its model (None: the run has none)."""
    data = rec.read_stage("bench")
    return None if data is None else bench_stage(data, rec.path / "stages" / "bench.json")


def snapshot_from_inventory(inventory: dict[str, Any]) -> tuple[InventoryRecord, MatrixRecord] | None:
    """The cluster summary and the exact matrix of a record that has no snapshot of them (a
    verify-only run, an older bench record), resolved from its inventory file (`run.json`'s
    `inventory`: path, sha256) while the file still has the recorded sha256; None otherwise."""
    path, sha = inventory.get("path"), inventory.get("sha256")
    if not path or not Path(path).is_file() or sha256_file(path) != sha:
        return None
    loaded = load_inventory(path)
    specs = resolve(loaded)
    return (InventoryRecord.model_validate(inventory_summary(loaded, specs)),
            MatrixRecord.model_validate(matrix_summary(specs[0])))
