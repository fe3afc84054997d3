"""Templates are compiled once per process, not per host and render (issue 18), and still
follow their file when it changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuctl import operations
from gpuctl.operations import UnsafeValue, render, template_env


def test_one_environment_per_folder() -> None:
    assert template_env("base") is template_env("base")
    assert template_env("network", trim=False) is template_env("network", trim=False)
    assert template_env("network", trim=False) is not template_env("network")


def test_a_template_compiles_once(monkeypatch: pytest.MonkeyPatch) -> None:
    env = template_env("base")
    compiled: list[str] = []
    real = type(env)._compile

    def counting(self, source, filename):  # type: ignore[no-untyped-def]
        compiled.append(filename)
        return real(self, source, filename)

    monkeypatch.setattr(type(env), "_compile", counting)
    env.cache.clear()
    for _ in range(20):
        render("base", "blacklist.conf.j2", modules=["nouveau"])
    assert len(compiled) == 1


def test_changed_template_file_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "demo").mkdir()
    tpl = tmp_path / "demo" / "x.j2"
    tpl.write_text("one {{ v }}\n")
    monkeypatch.setattr(operations, "templates_dir", lambda: tmp_path)
    assert render("demo", "x.j2", v="a") == "one a\n"
    tpl.write_text("two {{ v }}\n")
    st = tpl.stat()
    os.utime(tpl, (st.st_atime, st.st_mtime + 5))
    assert render("demo", "x.j2", v="a") == "two a\n"


def test_shared_environment_still_refuses_control_characters() -> None:
    render("base", "blacklist.conf.j2", modules=["nouveau"])
    with pytest.raises(UnsafeValue):
        render("base", "blacklist.conf.j2", modules=["nou\x07veau"])
