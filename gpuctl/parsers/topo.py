"""`nvidia-smi topo -m`: the GPU/NIC connection matrix.

Reads tab- or space-separated matrices, with or without ANSI escape codes (580.x
underlines the header), with NIC columns named ``mlx5_0`` (older drivers) or ``NIC0``
plus a ``NIC Legend`` (newer ones). The trailing affinity columns are ignored. The header
may have lost its leading indent (a Markdown paste); it is told from the GPU0 row by what
follows 'GPU0': another column name, not a link code.

Link codes: ``X`` (self), ``SYS``, ``NODE``, ``PHB``, ``PXB``, ``PIX``, ``NV#`` (a
bonded set of # NVLinks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text

TOOL = "nvidia-smi topo -m"

# "GPU0", "NIC3", "mlx5_0", "mlx5_bond_0"
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\w+|ib\w+|bnxt_\w+|irdma\w*)$")
# "  NIC0: mlx5_0"
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_NVLINK = re.compile(r"^NV(\d+)$")
# one device name / one link code inside a run-together token ("NIC10NIC11", "SYSSYS"); the
# codes: "NV18", "SYS", "NODE", "PHB", "PXB", "PIX", "X" (older drivers: "SOC", "PSB")
_DEVICE_PART = re.compile(r"GPU\d+|NIC\d+|mlx\d+_(?:bond_)?\d+")
_CODE_PART = re.compile(r"X|NV\d+|SYS|NODE|PHB|PXB|PIX|SOC|PSB")
# PCIe paths from nearest to farthest, as the Legend lists them (PIX: at most one PCIe
# bridge ... SYS: across the SMP interconnect between NUMA nodes); older drivers print
# PSB (one on-board PCIe switch) and SOC (across CPU sockets) for the two ends.
PCIE_PATHS: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")
_PATH_ALIASES = {"PSB": "PIX", "SOC": "SYS"}


def path_rank(code: str) -> int | None:
    """Position of a PCIe path code in `PCIE_PATHS` (0 = PIX, nearest); None for NV#/X."""
    code = _PATH_ALIASES.get(code, code)
    return PCIE_PATHS.index(code) if code in PCIE_PATHS else None


@dataclass(frozen=True)
class TopoLink:
    a: str
    b: str
    code: str

    @property
    def nvlinks(self) -> int:
        """Number of bonded NVLinks (0 when the pair talks over PCIe/SMP)."""
        m = _NVLINK.match(self.code)
        return int(m.group(1)) if m else 0


@dataclass(frozen=True)
class TopoResult:
    """The matrix: `gpus` ('GPU0'...), `nics` (column names), `links` (every ordered pair)."""

    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    nic_names: tuple[tuple[str, str], ...]
    links: tuple[TopoLink, ...]
    notes: tuple[str, ...] = ()  # why the NIC part was left out, when it was

    def link(self, a: str, b: str) -> str:
        """The code printed in row `a`, column `b`."""
        for link in self.links:
            if link.a == a and link.b == b:
                return link.code
        raise KeyError(f"no link {a} -> {b}")

    def gpu_pairs(self) -> tuple[TopoLink, ...]:
        """Each unordered GPU pair once (row < column), in matrix order."""
        order = {g: i for i, g in enumerate(self.gpus)}
        return tuple(
            link for link in self.links
            if link.a in order and link.b in order and order[link.a] < order[link.b]
        )

    def asymmetric_pairs(self) -> tuple[tuple[str, str, str, str], ...]:
        """(a, b, code a→b, code b→a) for every pair whose two cells disagree."""
        out = []
        for link in self.links:
            back = self.link(link.b, link.a)
            if link.a < link.b and back != link.code:
                out.append((link.a, link.b, link.code, back))
        return tuple(out)

    def nic_label(self, nic: str) -> str:
        """'NIC0 (mlx5_0)' where the NIC Legend names the column, else the column name."""
        names = dict(self.nic_names)
        return f"{nic} ({names[nic]})" if nic in names else nic

    def nic_sites(self) -> tuple[tuple[str, ...], ...]:
        """The NICs grouped by where they sit: NICs at PIX from each other share one PCIe
        switch (the ports and virtual functions of one adapter, or adapters on one switch)
        and count as one site; the number of sites is the number of places a GPU can have
        a near NIC."""
        groups: list[set[str]] = []
        for nic in self.nics:
            joined = [g for g in groups if any(self.link(nic, other) == "PIX" for other in g)]
            merged = {nic}.union(*joined) if joined else {nic}
            groups = [g for g in groups if g not in joined] + [merged]
        order = {n: i for i, n in enumerate(self.nics)}
        return tuple(sorted((tuple(sorted(g, key=order.__getitem__)) for g in groups), key=lambda g: order[g[0]]))

    def nearest_nic(self, gpu: str) -> tuple[str, str] | None:
        """(NIC column, path code) of the NIC closest to `gpu` over PCIe (the first in
        column order among equals); None when the matrix has no NIC columns."""
        best: tuple[int, str, str] | None = None
        for nic in self.nics:
            code = self.link(gpu, nic)
            rank = path_rank(code)
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, nic, code)
        return (best[1], best[2]) if best else None

    def unconnected_pairs(self, expected_code: str | None = None) -> tuple[TopoLink, ...]:
        """GPU pairs that are not NVLink-connected (code not NV#), or, with
        `expected_code` ('NV18'), every pair whose code differs from it."""
        if expected_code is None:
            return tuple(p for p in self.gpu_pairs() if p.nvlinks == 0)
        return tuple(p for p in self.gpu_pairs() if p.code != expected_code)

    def nvlink_full_mesh(self, expected_code: str | None = None) -> bool:
        """True when every GPU pair is NVLink-connected (with `expected_code`, exactly it).
        A single GPU has no pairs: that is not a mesh, so False."""
        return bool(self.gpu_pairs()) and not self.unconnected_pairs(expected_code)


def _split(token: str, part: re.Pattern[str]) -> list[str] | None:
    """'NIC10NIC11' → ['NIC10', 'NIC11'], 'SYSSYS' → ['SYS', 'SYS'] (columns run together
    in a narrow terminal or a paste); None when `token` is not made of `part`s."""
    pieces = [m.group(0) for m in part.finditer(token)]
    return pieces if pieces and "".join(pieces) == token else None


def _header(line: str) -> tuple[list[str], str | None]:
    """The device columns of the header, and a note when the NIC part is unreadable."""
    devices: list[str] = []
    for tok in line.split():
        if tok == "CPU":
            break
        pieces = _split(tok, _DEVICE_PART)
        if pieces is None and _DEVICE.match(tok):
            pieces = [tok]
        if pieces is None:
            if any(d.startswith("GPU") for d in devices) and not tok.startswith("GPU"):
                return devices, f"unreadable NIC column {tok!r} in the header"
            raise ParseError(f"{TOOL}: unexpected column {tok!r} in the header {quote(line)}")
        devices.extend(pieces)
    return devices, None


def _is_header(line: str, tokens: list[str]) -> bool:
    """True for the matrix header: 'GPU0' first, indented as nvidia-smi prints it, or
    (pasted with the indent lost, as Markdown does to a first line) followed by another
    column name; the GPU0 row is followed by a link code ('X') instead."""
    if not tokens or not tokens[0].startswith("GPU0"):
        return False
    if line[:1] in (" ", "\t") or len(tokens) == 1:
        return True
    nxt = tokens[1]
    return nxt == "CPU" or bool(_DEVICE.match(nxt)) or _split(nxt, _DEVICE_PART) is not None


def _codes(tokens: list[str]) -> tuple[list[str], str | None]:
    """The link codes at the start of a row (merged cells split), and the first token
    that is not one (the CPU affinity, or a bad cell)."""
    cells: list[str] = []
    for tok in tokens:
        pieces = _split(tok, _CODE_PART)
        if pieces is None:
            return cells, tok
        cells.extend(pieces)
    return cells, None


def parse_topo_matrix(text: str) -> TopoResult:
    """Parse `nvidia-smi topo -m` output.

    The GPU×GPU block must be complete. When only the NIC part cannot be read (columns
    run together, a NIC row cut off), the result keeps the GPUs alone and says why in
    `notes`."""
    text = require_text(text, TOOL)
    lines = text.splitlines()
    header_at = None
    devices: list[str] = []
    notes: list[str] = []
    for i, line in enumerate(lines):
        tokens = line.split()
        if _is_header(line, tokens):
            # "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\tNUMA Affinity"
            devices, note = _header(line)
            if note:
                notes.append(note)
            header_at = i
            break
    if header_at is None:
        first = next((ln for ln in lines if ln.strip()), "")
        raise ParseError(f"{TOOL}: no matrix header (a line starting with GPU0) found; first line {quote(first)}")
    gpus = tuple(d for d in devices if d.startswith("GPU"))
    nics = [d for d in devices if not d.startswith("GPU")]
    if list(gpus) + nics != devices or len(set(gpus)) != len(gpus):
        raise ParseError(f"{TOOL}: the header's GPU columns are not GPU0..GPU{len(gpus) - 1} first: "
                         f"{quote(lines[header_at])}")
    if len(set(nics)) != len(nics):
        notes.append(f"NIC columns named twice in the header ({', '.join(nics)})")
    rows: dict[str, list[str]] = {}
    nic_names: list[tuple[str, str]] = []
    extra: list[str] = []
    for line in lines[header_at + 1 :]:
        if m := _NIC_LEGEND.match(line):
            nic_names.append((m.group(1), m.group(2)))
            continue
        tokens = line.split()
        if tokens and tokens[0] not in devices and not tokens[0].startswith("GPU") and _DEVICE.match(tokens[0]) \
                and len(tokens) > 1 and _split(tokens[1], _CODE_PART):
            extra.append(tokens[0])  # a NIC row whose column the header lacks (cut-off paste)
        if not tokens or tokens[0] not in devices or tokens[0] in rows:
            continue
        # "GPU0\t X \tNV18\tNV18 ... \t0-47\t0\t\tN/A"
        cells, stop = _codes(tokens[1:])
        if tokens[0] in gpus and len(cells) < len(gpus):
            if stop is not None and stop not in ("N/A",) and not stop[:1].isdigit():
                raise ParseError(f"{TOOL}: unknown link code {stop!r} in {quote(line)}")
            raise ParseError(f"{TOOL}: row {tokens[0]} has {len(cells)} of {len(devices)} cells: {quote(line)}")
        if len(cells) != len(devices) and not notes:
            notes.append(f"row {tokens[0]} has {len(cells)} cells for {len(devices)} columns")
        rows[tokens[0]] = cells
    missing = [d for d in gpus if d not in rows]
    if missing:
        raise ParseError(f"{TOOL}: no row for {', '.join(missing)} (truncated output?)")
    if extra and not notes:
        notes.append(f"rows for {', '.join(extra)} but no such columns in the header (columns cut off?)")
    missing_nics = [d for d in nics if d not in rows]
    if missing_nics and not notes:
        notes.append(f"no row for {', '.join(missing_nics)}")
    if notes:  # keep the GPU block only
        devices = list(gpus)
        notes[0] = f"NIC part not read ({notes[0]}): GPU×GPU block only"
    links = []
    for a in devices:
        for b, code in zip(devices, rows[a][: len(devices)], strict=True):
            if a == b:
                if code != "X":
                    raise ParseError(f"{TOOL}: {a} to itself should be 'X', got {code!r}")
                continue
            links.append(TopoLink(a, b, code))
    return TopoResult(
        gpus=gpus,
        nics=tuple(d for d in devices if not d.startswith("GPU")),
        nic_names=tuple(nic_names),
        links=tuple(links),
        notes=tuple(notes),
    )
