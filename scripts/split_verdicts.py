"""One-off (issue 18): split a one-file gpuctl/verdicts.py into the gpuctl/verdicts/ package.

Why it is a script: other branches of issue 18 still change the one-file verdicts.py; after
merging them, rerun this on the merged file instead of porting each change by hand:

    git show OTHER_BRANCH:gpuctl/verdicts.py > /tmp/verdicts.py    # or the merged file
    .venv/bin/python scripts/split_verdicts.py /tmp/verdicts.py gpuctl/verdicts
    .venv/bin/ruff check --fix gpuctl/verdicts && git diff --stat

The file's `# ------ <subject>` section headers decide where each part goes (SUBJECTS; an
unknown header stops the script); everything before the first header is `core`. A name one
subject module uses from another is imported from it; the package's __init__ re-exports every
public name. Delete this script once no branch holds a one-file verdicts.py.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

#: section header (its start, after the dashes) -> module
SUBJECTS = {
    "nccl-tests": "nccl", "NCCL debug log": "nccl",
    "error counters": "counters",
    "lspci": "pcie", "topo -m": "pcie",
    "nvidia-smi": "gpu", "nvlink --status": "gpu", "bandwidth": "gpu", "dcgm": "gpu", "xid": "gpu",
    "ibstat": "fabric", "perftest": "fabric",
    "fio": "storage", "gdsio": "storage",
    "training": "training",
}
DOCS = {
    "nccl": "NCCL: nccl-tests results (bus bandwidth per collective, #wrong) and the NCCL debug log's\n"
            "NET/IB completion errors.",
    "counters": "Error counters judged by their change between two samples (NVLink, InfiniBand port counters).",
    "pcie": "PCIe: lspci -vvv (ACS redirects, AER errors) and the `nvidia-smi topo -m` connection matrix\n"
            "(symmetry, GPU↔NIC paths).",
    "gpu": "The GPUs: nvidia-smi (health, ECC and row remapping, PCIe link, clock events, fabric state),\n"
           "NVLink status, memory/host bandwidth, DCGM diagnostics and Xid events.",
    "fabric": "The InfiniBand/RoCE fabric: ibstat port state and rate, perftest bandwidth and latency.",
    "storage": "Storage: fio (disk throughput and IOPS, with what makes a figure no disk measurement) and gdsio.",
    "training": "Training: the single-node run's loss, the multi-node launchers, scaling efficiency.",
}
ORDER = ("core", "nccl", "counters", "pcie", "gpu", "fabric", "storage", "training")
HEADER = re.compile(r"^# -{8,} (.+)$")
PACKAGE_DOC = '''"""Verdicts: a parsed measurement judged against a threshold from the SKU catalog.

One module per subject, each judgement made once, by one function:
  core      Status, Subject, Verdict; `judge()` (numbers against a threshold), `judge_fact()`,
            `could_not_run()`, `overall()`, partial pastes
  gpu       nvidia-smi (health, ECC/remap, PCIe link, clock events, fabric), NVLink status,
            memory/host bandwidth, DCGM, Xid
  pcie      lspci ACS/AER, the topo -m matrix
  fabric    ibstat, perftest
  counters  error counters between two samples (NVLink, InfiniBand)
  nccl      nccl-tests, the NCCL debug log's NET/IB completions
  storage   fio, gdsio
  training  the training run, its launchers, scaling efficiency

This package's namespace is the API callers use (`from gpuctl.verdicts import judge_nccl`):
a caller needs no knowledge of which subject module holds a judgement. The rules
themselves: see `gpuctl.verdicts.core`.
"""
'''


def _defined(tree: ast.Module) -> list[str]:
    out: list[str] = []
    for n in tree.body:
        if isinstance(n, ast.FunctionDef | ast.ClassDef):
            out.append(n.name)
        elif isinstance(n, ast.Assign):
            out += [t.id for t in n.targets if isinstance(t, ast.Name)]
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out.append(n.target.id)
    return out


def split(text: str) -> dict[str, str]:
    lines = text.split("\n")
    heads = [(i, m.group(1)) for i, line in enumerate(lines) if (m := HEADER.match(line))]
    if not heads:
        raise SystemExit("no '# ------ <subject>' section header found")
    core = "\n".join(lines[: heads[0][0]]).rstrip() + "\n"
    tree = ast.parse(core)
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    import_block = "\n".join(lines[imports[0].lineno - 1: imports[-1].end_lineno])
    parts: dict[str, list[str]] = {}
    for k, (start, title) in enumerate(heads):
        module = next((m for prefix, m in SUBJECTS.items() if title.startswith(prefix)), None)
        if module is None:
            raise SystemExit(f"section {title!r}: not in SUBJECTS; say which module it belongs to")
        end = heads[k + 1][0] if k + 1 < len(heads) else len(lines)
        parts.setdefault(module, []).append("\n".join(lines[start:end]).strip("\n"))
    bodies = {m: "\n\n\n".join(p) for m, p in parts.items()}
    defined = {"core": _defined(tree)} | {m: _defined(ast.parse(b)) for m, b in bodies.items()}
    owner = {name: m for m, names in defined.items() for name in names}
    out = {"core": core}
    for m, body in bodies.items():
        used = {n.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Name)}
        wanted: dict[str, list[str]] = {}
        for name in sorted(used):
            if owner.get(name) not in (None, m):
                wanted.setdefault(owner[name], []).append(name)
        ours = "\n".join(f"from gpuctl.verdicts.{src} import {', '.join(names)}"
                         for src, names in sorted(wanted.items(), key=lambda kv: ORDER.index(kv[0])))
        out[m] = f'"""{DOCS[m]}"""\n\n{import_block}\n{ours}\n\n\n{body}\n'
    public = {m: sorted(n for n in defined[m] if not n.startswith("_")) for m in ORDER if m in out}
    init = PACKAGE_DOC + "\n" + "\n".join(
        f"from gpuctl.verdicts.{m} import (\n" + "".join(f"    {n},\n" for n in names) + ")"
        for m, names in public.items() if names)
    every = sorted({n for v in public.values() for n in v})
    init += "\n\n__all__ = [\n" + "".join(f'    "{n}",\n' for n in every) + "]\n"
    out["__init__"] = init
    return out


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit(__doc__)
    target = Path(argv[2])
    target.mkdir(parents=True, exist_ok=True)
    for name, text in split(Path(argv[1]).read_text()).items():
        (target / f"{name}.py").write_text(text)


if __name__ == "__main__":
    main(sys.argv)
