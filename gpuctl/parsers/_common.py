"""Helpers shared by the parsers: input checks, error quoting, ANSI stripping, paste noise,
key=value lines.

Paste noise (`is_noise`) is what a person adds around a tool's output when pasting it into
a ticket or a file: the shell prompt and command line at the top, an elision line where
they cut the middle, a shell trace or a launcher's own status line. `require_text` drops
it for every parser, so a paste is refused only when what remains cannot be judged.
"""

from __future__ import annotations

import re

from gpuctl.errors import ParseError

# "\x1b[4mGPU0\tCPU Affinity\x1b[0m" (nvidia-smi topo -m on a terminal-less run of 580.x)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """`text` without ANSI escape sequences."""
    return _ANSI.sub("", text)


# mpirun --tag-output: "[1,0]<stdout>:" / "[1,3]<stderr>:" before every line
_MPI_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr|stddiag)>:", re.MULTILINE)


def strip_mpi_tags(text: str) -> str:
    """`text` without Open MPI ``--tag-output`` line prefixes."""
    return _MPI_TAG.sub("", text)


def quote(line: str, limit: int = 160) -> str:
    """A line shortened for an error message, in quotes."""
    line = line.strip()
    if len(line) > limit:
        line = line[: limit - 3] + "..."
    return repr(line)


# The tools gpuctl reads (and the launchers and filters that run them): a line whose first
# word is one of them, after an optional prompt, is a command line, not output.
_COMMANDS = (
    "nvidia-smi|nvidia-bug-report\\.sh|dcgmi|ibstat|ibstatus|ibv_devinfo|ibv_devices|perfquery|ib_write_bw|ib_write_lat"
    "|ib_read_bw|ib_read_lat|ib_send_bw|ib_send_lat|fio|nvbandwidth|gdsio|dmesg|journalctl|lspci"
    "|all_reduce_perf|all_gather_perf|alltoall_perf|broadcast_perf|reduce_scatter_perf|reduce_perf"
    "|sendrecv_perf|gather_perf|scatter_perf|hypercube_perf|mpirun|mpiexec|srun|sudo|grep|cat|tail|head|less"
    "|ssh|pdsh|clush|kubectl|docker|numactl|taskset|timeout|watch|time|gpuctl|bash|sh"
)
# "user@host:~$ ibstat", "[root@node-3 ~]# nvidia-smi -q", "(venv) user@h100:~/x$ dcgmi diag -r 3"
_USER_PROMPT = r"(?:\([^()\s]+\)\s*)*(?:\[[^\]\s]+@[^\]]+\]|[\w.\-]+@[\w.\-]+(?::[^\s$#]*)?)\s?[$#%>]"
# "$ ibstat", "# nvidia-smi topo -m", "### nvidia-smi --query-gpu=...", "> fio ...", "PS C:\\> nvidia-smi"
_BARE_PROMPT = r"(?:PS [^>]*>|[$%>]|#+)"
# a command typed without a prompt: "nvidia-smi nvlink -s", "nvidia-smi", "ibstat mlx5_0", "dcgmi diag -r 3"
# (not "nvidia-smi has failed because ...": that is the tool's own error and must reach the parser)
_BARE_COMMAND = (r"(?:\S*/)?(?:nvidia-smi(?:\s+(?:-|nvlink\b|topo\b|nvswitch\b|mig\b|c2c\b).*)?"
                 r"|dcgmi\s+(?:diag|discovery|health|nvlink|dmon|stats|group)\b.*|ibstat(?:\s+[\w\-]+)*)")
_PROMPT_LINE = re.compile(
    rf"^\s*(?:{_USER_PROMPT}\s*(?:\S.*)?|{_BARE_PROMPT}\s+(?:\S*/)?(?:{_COMMANDS})(?:\s.*)?|[~\w/.\-]*\$\s+\S.*"
    rf"|(?:\S*/)?(?:{_COMMANDS})(?:\s+-.*)?|{_BARE_COMMAND})\s*$"
)
# an elision where the paste was cut: "....", "...", "…", "[...]", "[…]", "<snip>", "(snip)",
# "... (truncated)", "[ 8 lines omitted ]", "--- snip ---"
_ELISION = re.compile(
    r"^\s*(?:\.{3,}|…+|\[\s*(?:\.{3,}|…)\s*\]|\(\s*(?:\.{3,}|…)\s*\)|<\s*snip\s*>|\(\s*snip\s*\)"
    r"|-+\s*snip\s*-+|\.{3,}\s*\(?(?:truncated|snip|cut|omitted)[^)]*\)?"
    r"|\[\s*\d*\s*(?:more\s+)?lines?\s+(?:omitted|removed|cut|truncated)\s*\])\s*$",
    re.I,
)
# a shell trace ("+ mpirun ...", "++ ibstat") or a launcher's own status line before the output
# ("srun: job 1234 queued and waiting for resources", "pdsh@head: node-2: ssh exited with exit code 1")
_TRACE = re.compile(r"^\s*(?:\++\s+\S.*|(?:srun|salloc|sbatch|pdsh@[\w.\-]+|clush)\s*:\s.*)$")


# markup a paste brings from a ticket or a README: a code fence ("```", "```console") or a
# Markdown heading ("## server", "### nvidia-smi nvlink -e"); no tool gpuctl reads prints either
_MARKUP = re.compile(r"^\s*(?:```[\w+-]*|~~~[\w+-]*|#{2,6}\s+\S.*)\s*$")


def noise_kind(line: str) -> str | None:
    """What paste noise `line` is ('command line', 'elision', 'trace', 'markup'), or None
    for output."""
    if _ELISION.match(line):
        return "elision"
    if _TRACE.match(line):
        return "trace"
    if _PROMPT_LINE.match(line):
        return "command line"
    if _MARKUP.match(line):
        return "markup"
    return None


def is_noise(line: str) -> bool:
    """True for a line a person added around a tool's output (see the module docstring)."""
    return noise_kind(line) is not None


def noise_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, line) of every noise line of `text` (1-based line numbers)."""
    out = []
    for n, line in enumerate(strip_ansi(text).splitlines(), 1):
        kind = noise_kind(line)
        if kind is not None:
            out.append((n, kind, line.strip()))
    return out


def drop_noise(text: str) -> str:
    """`text` without its noise lines (each dropped line becomes an empty line, so line
    numbers in later messages still point into the original)."""
    return "\n".join("" if is_noise(line) else line for line in text.split("\n"))


def require_text(text: str, tool: str, *, keep_noise: bool = False) -> str:
    """`text` with ANSI codes and paste noise removed (`keep_noise`: noise kept, for a parser
    that reads the command line itself); ParseError if it holds nothing but whitespace, or
    nothing but noise."""
    if text is None or not text.strip():
        raise ParseError(f"{tool}: empty output")
    text = strip_ansi(text).replace("\r\n", "\n")
    if keep_noise:
        return text
    kept = drop_noise(text)
    if not kept.strip():
        raise ParseError(f"{tool}: nothing but a command line, elision or trace lines in the output")
    return kept


def to_float(token: str, tool: str, line: str) -> float:
    """`token` as a float; ParseError quoting `line` if it is not a number."""
    try:
        return float(token)
    except ValueError:
        raise ParseError(f"{tool}: expected a number, got {token!r} in {quote(line)}") from None


def to_int(token: str, tool: str, line: str) -> int:
    """`token` as an int; ParseError quoting `line` if it is not an integer."""
    try:
        return int(token)
    except ValueError:
        raise ParseError(f"{tool}: expected an integer, got {token!r} in {quote(line)}") from None


def key_values(lines: list[str]) -> dict[str, str]:
    """``key=value`` lines (the probes' own output) as a dict, both sides stripped; lines
    without ``=`` are ignored."""
    kv: dict[str, str] = {}
    for line in lines:
        k, sep, v = line.partition("=")
        if sep:
            kv[k.strip()] = v.strip()
    return kv
