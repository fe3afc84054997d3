"""gpuctl mirror wheels (issue 16, item 3): the lock's wheels for the cluster's Python land in a
PEP 503 tree once (a second fill fetches nothing), each checked against its locked sha256; a hash
upstream lacks is named; pip installs from the tree with --require-hashes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from gpuctl.matrix import LockedWheel
from gpuctl.wheelhouse import fill_wheelhouse, wheel_fits

INDEX = "https://upstream.example/simple"


def _wheel(name: str, version: str, tag: str = "py3-none-any") -> tuple[str, bytes]:
    filename = f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n")
        z.writestr(f"{info}/RECORD", "")
    return filename, buf.getvalue()


class Upstream:
    """A PEP 691 index in memory; counts what is downloaded."""

    def __init__(self, projects: dict[str, list[tuple[str, bytes]]]) -> None:
        self.blobs = {f"https://files.example/{fn}": data for files in projects.values() for fn, data in files}
        self.pages = {f"{INDEX}/{p}/": {"files": [{"filename": fn, "url": f"https://files.example/{fn}",
                                                   "hashes": {"sha256": hashlib.sha256(d).hexdigest()}}
                                                  for fn, d in files]} for p, files in projects.items()}
        self.downloads: list[str] = []

    def __call__(self, url: str, headers: dict[str, str]) -> bytes:
        if url in self.pages:
            assert headers.get("Accept", "").startswith("application/vnd.pypi.simple.v1+json")
            return json.dumps(self.pages[url]).encode()
        self.downloads.append(url)
        return self.blobs[url]


def _locked(name: str, *files: tuple[str, bytes]) -> LockedWheel:
    version = files[0][0].split("-")[1]
    return LockedWheel(name=name, version=version, sha256=tuple(hashlib.sha256(d).hexdigest() for _, d in files))


def test_fill_once_then_nothing_and_pip_installs_from_it(tmp_path: Path) -> None:
    demo = _wheel("demo", "1.0")
    native311, native312 = _wheel("fast", "2.0", "cp311-cp311-manylinux_2_28_x86_64"), \
        _wheel("fast", "2.0", "cp312-cp312-manylinux_2_28_x86_64")
    up = Upstream({"demo": [demo], "fast": [native311, native312]})
    lock = [_locked("demo", demo), _locked("fast", native311, native312)]
    dest = tmp_path / "wh"

    first = fill_wheelhouse(lock, "3.11", dest, INDEX, fetch=up)
    assert first.ok and sorted(first.fetched) == [demo[0], native311[0]]  # not the 3.12 wheel
    assert first.bytes_fetched == len(demo[1]) + len(native311[1])
    page = (dest / "simple" / "fast" / "index.html").read_text()
    assert f'href="{native311[0]}#sha256={hashlib.sha256(native311[1]).hexdigest()}"' in page
    assert 'href="demo/"' in (dest / "simple" / "index.html").read_text()

    again = fill_wheelhouse(lock, "3.11", dest, INDEX, fetch=up)
    assert again.ok and again.fetched == [] and again.bytes_fetched == 0 and len(again.cached) == 2
    assert len(up.downloads) == 2

    # pip (this interpreter's) reads the tree as an index and checks the locked hash
    req = tmp_path / "req.txt"
    req.write_text(f"demo==1.0 --hash=sha256:{lock[0].sha256[0]}\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull}
    res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "-d",
                          str(tmp_path / "dl"), "--index-url", (dest / "simple").as_uri(), "-r", str(req)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "dl" / demo[0]).is_file()


def test_a_hash_upstream_lacks_is_named(tmp_path: Path) -> None:
    demo = _wheel("demo", "1.0")
    up = Upstream({"demo": [demo]})
    bad = LockedWheel(name="demo", version="1.0", sha256=("0" * 64,))
    report = fill_wheelhouse([bad], "3.11", tmp_path, INDEX, fetch=up)
    assert not report.ok and report.missing == [f"demo==1.0: no wheel for Python 3.11 with a locked sha256 on {INDEX}"]
    assert up.downloads == []


def test_a_download_with_another_hash_is_not_kept(tmp_path: Path) -> None:
    demo = _wheel("demo", "1.0")
    up = Upstream({"demo": [demo]})
    up.blobs[f"https://files.example/{demo[0]}"] = b"tampered"
    report = fill_wheelhouse([_locked("demo", demo)], "3.11", tmp_path, INDEX, fetch=up)
    assert report.missing == [f"demo==1.0: {demo[0]} downloaded with another sha256 than the lock's"]
    assert not (tmp_path / "simple" / "demo" / demo[0]).exists()


def test_wheel_tags() -> None:
    assert wheel_fits("torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl", "3.11")
    assert not wheel_fits("torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl", "3.12")
    assert not wheel_fits("torch-2.8.0-cp311-cp311-manylinux_2_28_aarch64.whl", "3.11")
    assert wheel_fits("cuda_bindings-13.4.4-cp310-abi3-manylinux_2_28_x86_64.whl", "3.12")
    assert wheel_fits("sympy-1.14.0-py3-none-any.whl", "3.10")


def test_cli_mirror_wheels_names_what_upstream_lacks(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    import gpuctl.wheelhouse as wh
    from gpuctl.cli.main import main
    from gpuctl.paths import inventories_dir

    def empty_index(url: str, headers: dict[str, str]) -> bytes:
        return b'{"files": []}'

    monkeypatch.setattr(wh, "_urlopen", empty_index)
    res = CliRunner().invoke(main, ["mirror", "wheels", str(inventories_dir() / "h100-8x4.yaml"), str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "missing: torch==2.8.0: no wheel for Python 3.10 with a locked sha256 on https://pypi.org/simple" \
        in res.output




def test_remote_fill_script_runs_with_a_plain_python3_against_an_http_index(tmp_path: Path) -> None:
    """The script the cache host runs: this module's source + the job, on a bare python3 (no
    gpuctl, no packaging), against a real HTTP index on 127.0.0.1; twice (second: nothing fetched)."""
    import http.server
    import shutil
    import threading

    from gpuctl.wheelhouse import parse_remote_report, remote_fill_script

    if shutil.which("python3") is None:
        import pytest

        pytest.skip("needs python3")
    demo = _wheel("demo", "1.0")
    blobs = {f"/files/{demo[0]}": demo[1]}
    page = {"files": [{"filename": demo[0], "url": "", "hashes": {"sha256": hashlib.sha256(demo[1]).hexdigest()}}]}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/simple/demo/":
                body = json.dumps(page).encode()
            elif self.path in blobs:
                body = blobs[self.path]
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    page["files"][0]["url"] = f"{base}/files/{demo[0]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        script = remote_fill_script([_locked("demo", demo)], "3.11", str(tmp_path / "wh"), f"{base}/simple")
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
        runs = [subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120)
                for _ in range(2)]
    finally:
        server.shutdown()
    first, second = (parse_remote_report(r.stdout) for r in runs)
    assert first == {"status": "ok", "fetched": 1, "cached": 0, "bytes_fetched": len(demo[1]), "missing": []}, runs[0]
    assert second is not None and second["fetched"] == 0 and second["cached"] == 1
    assert (tmp_path / "wh" / "simple" / "demo" / demo[0]).read_bytes() == demo[1]


def test_fill_cache_wheels_needs_a_serving_cache_host(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from gpuctl import mirror
    from gpuctl.errors import InputError
    from gpuctl.inventory import load_inventory_text
    from gpuctl.paths import inventories_dir

    text = (inventories_dir() / "h100-8x4.yaml").read_text().replace(
        "repos: {mirror: null}", "repos: {cache_host: gpu-01, apt_proxy: 'http://10.0.0.1:3128'}")
    assert text != (inventories_dir() / "h100-8x4.yaml").read_text()
    off = load_inventory_text(text, "inv.yaml", inventories_dir())
    with pytest.raises(InputError, match="serves no wheelhouse"):
        mirror.fill_cache_wheels(off)
    on = load_inventory_text(text + "role_vars: {package_mirror_wheels: true}\n", "inv.yaml", inventories_dir())
    sent: dict = {}

    class Res:
        stdout = '##gpuctl-wheels {"status": "ok", "fetched": 25, "cached": 0, "bytes_fetched": 9, "missing": []}\n'
        stderr = ""

    def fake_run(target, script, timeout_s):  # type: ignore[no-untyped-def]
        sent["script"] = script
        return Res()

    import gpuctl.bench.remote as remote

    monkeypatch.setattr(remote, "run", fake_run)
    res = mirror.fill_cache_wheels(on)
    assert res["status"] == "ok" and res["node"] == "gpu-01" and res["dir"] == "/var/cache/gpuctl-wheels"
    assert sent["script"].startswith("export http_proxy=http://10.0.0.1:3128 https_proxy=http://10.0.0.1:3128; ")
    assert '"torch"' in sent["script"] and "python3 - <<'GPUCTL_WHEELS_EOF'" in sent["script"]
    # every node's train_env now reads the cache's wheelhouse; the cache node through 127.0.0.1
    from gpuctl.spec import resolve

    specs = {s.node: s for s in resolve(on)}
    assert specs["gpu-01"].train_env.index_url == "http://127.0.0.1:3143/simple"
    assert specs["gpu-02"].train_env.index_url == f"http://{specs['gpu-01'].address}:3143/simple"
    assert all(s.train_env.index_url == "https://pypi.org/simple" for s in resolve(off))


class HtmlUpstream:
    """A PEP 503 (HTML only) index as download.pytorch.org/whl/cpu serves it: site-relative
    hrefs with `#sha256=` (torch, its `+` quoted), absolute ones to another host (a dependency)."""

    def __init__(self, index: str, files: dict[str, list[tuple[str, bytes, str]]]) -> None:
        self.index, self.blobs, self.pages = index, {}, {}
        for project, entries in files.items():
            links = []
            for fn, data, where in entries:
                url = (f"/whl/cpu/{fn.replace('+', '%2B')}" if where == "relative" else f"https://files.example/{fn}")
                self.blobs[url if where != "relative" else "https://pytorch.example" + url] = data
                links.append(f'<a href="{url}#sha256={hashlib.sha256(data).hexdigest()}">{fn}</a><br/>')
            self.pages[f"{index}/{project}/"] = "<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>"
        self.downloads: list[str] = []

    def __call__(self, url: str, headers: dict[str, str]) -> bytes:
        if url in self.pages:
            return self.pages[url].encode()
        self.downloads.append(url)
        return self.blobs[url]


def test_fill_reads_pep503_html_pages_like_the_pytorch_cpu_index(tmp_path: Path) -> None:
    """download.pytorch.org serves PEP 503 HTML only (no PEP 691 JSON): the fill reads its links'
    #sha256= fragments and resolves site-relative hrefs; before, every page was 'could not be read'."""
    torch = _wheel("torch", "2.13.0+cpu", "cp311-cp311-manylinux_2_28_x86_64")
    other = _wheel("torch", "2.13.0+cpu", "cp312-cp312-manylinux_2_28_x86_64")
    dep = _wheel("filelock", "4.3.2")
    index = "https://pytorch.example/whl/cpu"
    up = HtmlUpstream(index, {"torch": [(*torch, "relative"), (*other, "relative")], "filelock": [(*dep, "abs")]})
    lock = [_locked("torch", torch, other), _locked("filelock", dep)]
    report = fill_wheelhouse(lock, "3.11", tmp_path, index, fetch=up)
    assert report.ok, report.missing
    assert sorted(report.fetched) == sorted([torch[0], dep[0]])
    assert up.downloads == [f"https://pytorch.example/whl/cpu/{torch[0].replace('+', '%2B')}",
                            f"https://files.example/{dep[0]}"]
    assert (tmp_path / "simple" / "torch" / torch[0]).read_bytes() == torch[1]
    assert f'href="{torch[0]}#sha256={hashlib.sha256(torch[1]).hexdigest()}"' in \
        (tmp_path / "simple" / "torch" / "index.html").read_text()
    again = fill_wheelhouse(lock, "3.11", tmp_path, index, fetch=up)
    assert again.fetched == [] and sorted(again.cached) == sorted([torch[0], dep[0]])


def test_an_html_page_without_the_locked_hash_names_the_package(tmp_path: Path) -> None:
    torch = _wheel("torch", "2.13.0+cpu", "cp311-cp311-manylinux_2_28_x86_64")
    index = "https://pytorch.example/whl/cpu"
    up = HtmlUpstream(index, {"torch": [(*torch, "relative")]})
    wrong = LockedWheel(name="torch", version="2.13.0+cpu", sha256=("0" * 64,))
    report = fill_wheelhouse([wrong], "3.11", tmp_path, index, fetch=up)
    assert report.missing == [f"torch==2.13.0+cpu: no wheel for Python 3.11 with a locked sha256 on {index}"]
    assert up.downloads == []
