"""Parsers for the output of every tool gpuctl runs or judges.

One module per tool. Every parser is a pure function: text in, a frozen dataclass out.
No subprocess, no logging, no thresholds (those live in `gpuctl.verdicts`). Unusable
input (empty, truncated, the tool's own error output) raises `gpuctl.errors.ParseError`
whose message quotes the offending line or part.
"""
