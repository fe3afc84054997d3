"""The CLI's conventions: --version, --help everywhere, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gpuctl.cli.main import main
from gpuctl.paths import inventories_dir

EXAMPLES = sorted(inventories_dir().glob("*.yaml"))


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += all_commands(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "gpuctl, version" in result.output


@pytest.mark.parametrize("path", all_commands(main), ids=lambda p: " ".join(p) or "gpuctl")
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_top_level_help_documents_exit_codes() -> None:
    out = CliRunner().invoke(main, ["--help"]).output
    assert "0 ok, 1 checks failed, 2 usage or input error, 3 execution error" in out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_inventory_validate_examples(path: Path) -> None:
    result = CliRunner().invoke(main, ["inventory", "validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["valid"] is True


def test_bad_inventory_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((inventories_dir() / "h100-8x4.yaml").read_text().replace("rack: r02", "rack: r07"))
    proc = subprocess.run([sys.executable, "-m", "gpuctl", "inventory", "validate", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "nodes[2].rack: 'r07' is not a rack defined under racks" in proc.stderr


def test_no_color_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    result = CliRunner().invoke(main, ["matrix", "list"])
    assert result.exit_code == 0 and "\x1b[" not in result.output
