"""NCCL debug logs (`NCCL_DEBUG=INFO`/`WARN` output of any program): the NET/IB work
completion errors in them.

NCCL prints one line when an InfiniBand/RoCE work request completes with an error; the
forms seen across versions (each kept as a real sample in tests/data/fixtures/nccl_log)::

    host:pid:tid [dev] ... NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12,
        opcode 0, len 0, vendor err 129 (Recv)                                      (2.1x)
    ... NET/IB : Got completion from peer 172.36.143.59<44206> with status=12 opcode=129 len=65536
        vendor err 129 (Recv) localGid ::ffff:... remoteGids::ffff:...             (2.19+, plugins)
    ... NET/IB: Got completion from peer 10.153.235.13<40554> with status=IBV_WC_RETRY_EXC_ERR(12)
        opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) vendor_err=129 localGid ... hca mlx5_1   (2.2x+)
    ... NET/IB : Got completion with error 4, opcode 1, len 21938, vendor err 81     (old: no peer)

Each becomes an `IbCompletion`: the logging host (the line's `host:pid:tid` prefix), the
peer, the `ibv_wc_status` with its rdma-core name and text, the vendor syndrome, the
direction and the HCA where printed. A log is refused only when it holds no NCCL line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import require_text, strip_mpi_tags

TOOL = "NCCL log"

# rdma-core libibverbs/verbs.h `enum ibv_wc_status` and the text ibv_wc_status_str() gives
# (libibverbs/enum_strs.c), https://github.com/linux-rdma/rdma-core
WC_STATUS: dict[int, tuple[str, str]] = {
    0: ("IBV_WC_SUCCESS", "success"),
    1: ("IBV_WC_LOC_LEN_ERR", "local length error"),
    2: ("IBV_WC_LOC_QP_OP_ERR", "local QP operation error"),
    3: ("IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"),
    4: ("IBV_WC_LOC_PROT_ERR", "local protection error"),
    5: ("IBV_WC_WR_FLUSH_ERR", "Work Request Flushed Error"),
    6: ("IBV_WC_MW_BIND_ERR", "memory management operation error"),
    7: ("IBV_WC_BAD_RESP_ERR", "bad response error"),
    8: ("IBV_WC_LOC_ACCESS_ERR", "local access error"),
    9: ("IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"),
    10: ("IBV_WC_REM_ACCESS_ERR", "remote access error"),
    11: ("IBV_WC_REM_OP_ERR", "remote operation error"),
    12: ("IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"),
    13: ("IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"),
    14: ("IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"),
    15: ("IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"),
    16: ("IBV_WC_REM_ABORT_ERR", "aborted error"),
    17: ("IBV_WC_INV_EECN_ERR", "invalid EE context number"),
    18: ("IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"),
    19: ("IBV_WC_FATAL_ERR", "fatal error"),
    20: ("IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"),
    21: ("IBV_WC_GENERAL_ERR", "general error"),
    22: ("IBV_WC_TM_ERR", "TM error"),
    23: ("IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous"),
}
WC_STATUS_SOURCE = ("rdma-core libibverbs/verbs.h enum ibv_wc_status and ibv_wc_status_str() "
                    "(https://github.com/linux-rdma/rdma-core)")

# "NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, opcode 0, len\n0, vendor err 129 (Recv)"
# (also NET/IBP, NET/IB/GIN; the fields may wrap onto the next line in a paste)
_COMPLETION = re.compile(
    r"NET/(?P<net>IB\w*(?:/GIN)?)\s*:\s*Got completion\s+(?:from peer\s+(?P<peer>(?!with\b)\S+)\s+)?with\s+"
    r"(?:status=(?:(?P<sname>IBV_WC_\w+)\()?(?P<status>\d+)\)?|error\s+(?P<error>\d+))"
    r"(?P<rest>[^\n]*(?:\n(?!\S*:\d+:\d+ \[)[^\n]*?(?:vendor[ _]err)[^\n]*)?)")
_VENDOR = re.compile(r"vendor[ _]err[ =](\d+)")
_DIRECTION = re.compile(r"\((Send|Recv)\)")
_HCA = re.compile(r"\bhca (\S+)")
# "ubuntu2:319733:319761 [1] " (after an optional "[2026-09-09 10:46:33] " timestamp)
_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)?(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]")
# any NCCL line: "NCCL INFO", "NCCL WARN", "NET/IB"
_NCCL_LINE = re.compile(r"\bNCCL (?:INFO|WARN|ERROR|TRACE)\b|\bNET/IB")


@dataclass(frozen=True)
class IbCompletion:
    """One NET/IB work completion error line."""

    line: int  # 1-based line number in the input
    host: str | None  # the logging host (None where the line has no host:pid:tid prefix)
    device: int | None  # the CUDA device of the logging rank ([4])
    peer: str | None  # "172.36.143.59<44206>" as printed; None in the oldest form
    status: int
    vendor_err: int | None
    direction: str | None  # Send / Recv
    hca: str | None

    @property
    def peer_address(self) -> str | None:
        """The peer without its port ('172.36.143.59')."""
        return self.peer.split("<", 1)[0] if self.peer else None

    @property
    def status_name(self) -> str:
        return WC_STATUS.get(self.status, (f"status {self.status}", ""))[0]

    @property
    def status_text(self) -> str:
        return WC_STATUS.get(self.status, ("", "unknown ibv_wc_status"))[1]


@dataclass(frozen=True)
class NcclLogResult:
    nccl_lines: int  # lines of NCCL output seen
    completions: tuple[IbCompletion, ...]
    hosts: tuple[str, ...]  # the hosts whose lines are in the log


def find_ib_completions(text: str) -> list[IbCompletion]:
    """The NET/IB completion errors in `text` (any log; ANSI, MPI tags already removed)."""
    out = []
    for m in _COMPLETION.finditer(text):
        start = text.rfind("\n", 0, m.start()) + 1
        prefix = _PREFIX.match(text[start:m.start()])
        rest = m.group("rest")
        vendor, direction, hca = _VENDOR.search(rest), _DIRECTION.search(rest), _HCA.search(rest)
        named, number = m.group("sname"), int(m.group("status") or m.group("error"))
        if named and named in {n for n, _ in WC_STATUS.values()} and WC_STATUS.get(number, ("",))[0] != named:
            raise ParseError(f"{TOOL}: line {text.count(chr(10), 0, m.start()) + 1}: status {named}({number}) "
                             "does not match rdma-core's numbering")
        out.append(IbCompletion(
            line=text.count("\n", 0, m.start()) + 1,
            host=prefix.group("host") if prefix else None,
            device=int(prefix.group("dev")) if prefix else None,
            peer=m.group("peer"), status=number,
            vendor_err=int(vendor.group(1)) if vendor else None,
            direction=direction.group(1) if direction else None,
            hca=hca.group(1) if hca else None))
    return out


def parse_nccl_log(text: str) -> NcclLogResult:
    """Read an NCCL debug log; ParseError only when it holds no NCCL line at all."""
    text = strip_mpi_tags(require_text(text, TOOL))
    lines = [ln for ln in text.splitlines() if _NCCL_LINE.search(ln)]
    if not lines:
        raise ParseError(f"{TOOL}: no NCCL line ('NCCL INFO', 'NCCL WARN', 'NET/IB') in the input")
    hosts = sorted({m.group("host") for ln in lines if (m := _PREFIX.match(ln))})
    return NcclLogResult(len(lines), tuple(find_ib_completions(text)), tuple(hosts))
