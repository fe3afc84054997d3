"""Issue 17 item 5: secret forms the redactor used to miss. URL userinfo is read up to the
rightmost `@` before the host (a password may hold `:` or `@`); every value under a secret key
is redacted whatever its type; attached short options, block scalars, truncated private keys
and more secret names. The fast path (patterns only over lines holding a trigger) must give the
same result as running every pass over the whole text."""

from __future__ import annotations

import json

import pytest

from gpuctl import redact as rd

# (text, the secret that must not survive)
LEAKS = [
    # URL userinfo holding ':' or '@' (mirror and apt_proxy URLs), with and without a scheme
    ("deb https://alice:p@ss:w0rd@mirror.lab/cuda/ /", "p@ss"),
    ("deb https://alice:p@ss:w0rd@mirror.lab/cuda/ /", "w0rd"),
    ('Acquire::http::Proxy "http://px:pa:ss@proxy.lab:3128/";', "pa:"),
    ("pip install -i bob:se@cret@mirror.lab/simple x", "se@"),
    ("redis://:redispw1@10.0.0.5:6379/0", "redispw1"),
    ("amqp://user:amqp@pw2@broker:5672/", "amqp@pw2"),
    ("git clone https://ghp_tokenvalue3@github.com/org/repo.git", "ghp_tokenvalue3"),
    # attached short options
    ("ipmitool -I lanplus -H 10.0.0.5 -U admin -Phunter2 power status", "hunter2"),
    ("curl -uadmin:curlpw4 https://bmc/redfish/v1", "curlpw4"),
    ("curl -U proxyuser:proxypw5 https://x", "proxypw5"),
    ("smbclient //srv/share -U admin%smbpw6", "smbpw6"),
    # more secret names and tools
    ("MYSQL_PWD=mysqlpw7 mysql -u root db", "mysqlpw7"),
    ("REDISCLI_AUTH=redispw8 redis-cli ping", "redispw8"),
    ("redis-cli -h 10.0.0.5 -a redispw9 ping", "redispw9"),
    ("docker login -u bot -p dockerpw10 registry.lab", "dockerpw10"),
    ("openssl rsa -in k.pem -passin pass:opensslpw11 -out x", "opensslpw11"),
    ('{"auths": {"registry.lab": {"auth": "dXNlcjpkb2NrZXJwdzEy"}}}', "dXNlcjpkb2NrZXJwdzEy"),
    # ~/.netrc (curl, git, ftp) and chpasswd input
    ("machine mirror.lab login alice password netrcpw28", "netrcpw28"),
    ("default login anonymous password netrcpw29 macdef init", "netrcpw29"),
    ("echo 'alice:chpw30' | chpasswd", "chpw30"),
    ("printf '%s\\n' bob:chpw31 | sudo chpasswd -e", "chpw31"),
    # values under a secret key whatever their type
    ("password: |\n  blockpw13\n  second line\nuser: x", "blockpw13"),
    ("password: |\n  blockpw13\n  secondline14\nuser: x", "secondline14"),
    ("db:\n  password: >-\n    foldedpw15\n  host: h", "foldedpw15"),
    ("api_keys:\n  - listtok16\n  - listtok17\nnext: 1", "listtok16"),
    ("bmc_passwords:\n- listtok18\nnext: 1", "listtok18"),
    ("bmc_password: [flowpw19, flowpw20]", "flowpw19"),
    ('{"bmc_password": ["jsonlist21"], "n": 1}', "jsonlist21"),
    ('{"credentials": {"user": "u", "key": "nestedpw22"}, "n": 1}', "nestedpw22"),
    ("credentials:\n  user: u\n  key: nestedpw23\nother: 1", "nestedpw23"),
    ("bmc_password: 73519046", "73519046"),
    # a private key without its END line (a truncated output)
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\nAAAAtruncatedKEY24", "truncatedKEY24"),
    ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,AB\n\nMIIEpemKEY25",
     "MIIEpemKEY25"),
    ('{"key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQjsonKEY26\\nAAAAtail27"}', "MIIEvQjsonKEY26"),
    ('{"key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQjsonKEY26\\nAAAAtail27"}', "AAAAtail27"),
]


@pytest.mark.parametrize(("text", "secret"), LEAKS)
def test_secret_forms_are_redacted(text: str, secret: str) -> None:
    out = rd.redact(text)
    assert secret not in out, out
    assert rd.MARK in out or rd._PRIVATE_KEY_MARK in out


@pytest.mark.parametrize(("text", "expected"), [
    ("deb https://alice:p@ss:w0rd@mirror.lab/cuda/ /", f"deb https://alice:{rd.MARK}@mirror.lab/cuda/ /"),
    ('Proxy "http://px:pa:ss@proxy.lab:3128/";', f'Proxy "http://px:{rd.MARK}@proxy.lab:3128/";'),
    ("-i bob:se@cret@mirror.lab/simple x", f"-i bob:{rd.MARK}@mirror.lab/simple x"),
    ("redis://:pw@h:6379", f"redis://:{rd.MARK}@h:6379"),
    ("https://tok@github.com/o/r", f"https://{rd.MARK}@github.com/o/r"),
])
def test_url_userinfo_up_to_the_rightmost_at(text: str, expected: str) -> None:
    """The user stays; everything between the first ':' and the rightmost '@' before the host goes."""
    assert rd.redact(text) == expected


@pytest.mark.parametrize("text", [
    "git@github.com:org/repo.git", "ssh root@10.0.0.1 -p 22", "http://10.0.2.2:3142/", "scp root@h:/tmp/x .",
    "grep -Po '\\d+' x", "rsync -Pav a b", "id -un", "mgs_nids: 10.100.0.5@tcp", "pass: 3", '{"pass":22}',
    "ssh://root@10.0.0.1/", "PWD=/home/user", "OLDPWD=/tmp", "Layout : -unknown-", "mkdir -p /raid",
    "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----", "password_file: /etc/pw", "tokens_per_s: 12",
    "auth_method: publickey",
])
def test_ordinary_text_is_kept(text: str) -> None:
    assert rd.redact(text) == text


def test_truncated_key_stops_at_the_first_line_that_is_not_key_material() -> None:
    out = rd.redact("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\nnext: log line\n")
    assert "b3BlbnNzaC1rZXk" not in out and "next: log line" in out


def test_block_scalar_keeps_the_lines_around_it() -> None:
    out = rd.redact("a: 1\npassword: |\n  blockpw\n\n  more\nb: 2\n")
    assert out.splitlines()[0] == "a: 1" and out.splitlines()[-1] == "b: 2"
    assert "blockpw" not in out and "more" not in out and len(out.splitlines()) == 6


@pytest.mark.parametrize(("value", "hidden"), [
    (12345678, True), (3.25, True), (["a1", "b2"], True), ({"user": "u", "pw": "nested"}, True),
    ("plain", True), (None, False), (True, False), ("", False),
])
def test_redact_obj_redacts_every_value_under_a_secret_key(value: object, hidden: bool) -> None:
    out = rd.redact_obj({"bmc_password": value, "nested": [{"api_token": value}], "n": 1})
    assert out["n"] == 1
    for got in (out["bmc_password"], out["nested"][0]["api_token"]):
        assert (got == rd.MARK) is hidden
        if not hidden:
            assert got == value


def test_known_in_collects_every_value_under_a_secret_key_and_url_passwords() -> None:
    data = {"bmc": {"password": 73519046, "api_keys": ["tok-aaaa", "tok-bbbb"]},
            "credentials": {"user": "svc", "key": "nested-key-1"},
            "repos": {"mirror": "https://alice:p@ss:w0rd@m.lab/", "apt_proxy": "http://:pxpw@p.lab:3128"}}
    found = rd.known_in(data)
    assert {"73519046", "tok-aaaa", "tok-bbbb", "nested-key-1", "p@ss:w0rd", "pxpw"} <= found


def test_json_with_secret_lists_and_maps_stays_json() -> None:
    text = '{"bmc_password": ["a1", "b2"], "credentials": {"user": "u", "key": "k"}, "n": 1}'
    assert json.loads(rd.redact(text)) == {"bmc_password": rd.MARK, "credentials": rd.MARK, "n": 1}


def _full(text: str) -> str:
    """Every pass over the whole text (the reference for the fast path)."""
    text = rd._PRIVATE_KEY.sub(rd._PRIVATE_KEY_MARK, text)
    text = rd._blocks(text)
    for pattern, repl in rd._PATTERNS:
        text = pattern.sub(repl, text)
    return text


def test_fast_path_equals_full_pass_on_the_new_forms() -> None:
    texts = [t for t, _ in LEAKS]
    texts.append("intro\n" + "\n".join(texts) + "\nend")
    texts.append("x\n  password:\n    - a1\n    - b2\n  y: 1\n" * 3)
    for text in texts:
        assert rd.redact(text) == _full(text), text


# -- stdout: `spec` and `plan` (issue 17 item 5) ----------------------------------------------------

REPO_INV = __import__("pathlib").Path(__file__).resolve().parents[2] / "inventories" / "h100-8x4.yaml"
MIRROR = "https://alice:p@ss:w0rd@mirror.lab/"
PROXY = "http://px:pr@xy@proxy.lab:3128/"


def _secret_inventory(tmp_path):
    text = REPO_INV.read_text().replace("repos: {mirror: null}",
                                        f'repos: {{mirror: "{MIRROR}", apt_proxy: "{PROXY}"}}')
    assert MIRROR in text
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    return inv


@pytest.mark.parametrize("args", [["--json"], ["--host", "gpu-01", "--json"], []])
def test_spec_prints_no_secret(tmp_path, args) -> None:
    from click.testing import CliRunner

    from gpuctl.cli.main import main

    res = CliRunner().invoke(main, ["spec", str(_secret_inventory(tmp_path)), *args])
    assert res.exit_code == 0, res.output
    for piece in ("p@ss", "@ss:", "w0rd", "pr@xy", "@xy@"):
        assert piece not in res.output
    if "--json" in args:
        assert "https://alice:[redacted]@mirror.lab/" in res.output  # the rest of the URL is kept


def test_plan_output_prints_no_secret(capsys, monkeypatch) -> None:
    """`plan --json` (operation names and commands) and the plan's terminal listing."""
    monkeypatch.setenv("COLUMNS", "200")  # one table row per host
    from gpuctl.cli.provision import _print_changes
    from gpuctl.runner.engine import HostResult, OpResult
    from gpuctl.runner.summary import RunSummary

    op = OpResult(f"Send OS packages through the apt proxy {PROXY}", "nvidia_repo", "will change",
                  commands=[f"apt-get -o Acquire::http::Proxy={PROXY} update", "MYSQL_PWD=sqlpw99 true"])
    hosts = {"gpu-01": HostResult("gpu-01", "gpu-01", ops=[op]),
             "gpu-02": HostResult("gpu-02", "gpu-02", status="failed", error=f"curl: (22) {MIRROR}x: 404")}
    summary = RunSummary("plan", hosts, dry=True)
    from gpuctl.cli.common import console, emit_json

    emit_json(summary.to_json())
    _print_changes(summary)
    console().print(summary.table())
    out = capsys.readouterr().out
    assert "apt proxy http://px:[redacted]@proxy.lab:3128/" in out
    assert "https://alice:[redacted]@mirror.lab/x: 404" in out  # the table's error cell (markup escaped)
    for piece in ("pr@xy", "@xy@", "sqlpw99", "p@ss", "@ss:", "w0rd"):
        assert piece not in out


def test_run_record_keeps_no_url_password(tmp_path) -> None:
    """stages/plan.json and commands.log of a run whose inventory has a mirror and apt_proxy
    URL with `:`/`@` in the password: nothing of the password is written."""
    from gpuctl.runrecord import RunRecord

    rec = RunRecord.create("plan", _secret_inventory(tmp_path), root=tmp_path / "runs")
    rec.raw("gpu-01", "commands.log", f"$ apt-get -o Acquire::http::Proxy={PROXY} update\n"
                                     f"$ curl -fsSL {MIRROR}compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub\n")
    rec.stage("plan", {"hosts": {"gpu-01": {"changes": [{"operation": f"Add the NVIDIA repository {MIRROR}",
                                                         "commands": [f"echo {PROXY}"]}]}},
                       "bmc_password": 12345678, "tokens": ["x"]})
    rec.finish("ok")
    text = "\n".join(p.read_text() for p in rec.path.rglob("*") if p.is_file())
    for piece in ("p@ss", "@ss:", "w0rd", "pr@xy", "@xy@", "12345678"):
        assert piece not in text
    assert "alice:[redacted]@mirror.lab/" in text and "px:[redacted]@proxy.lab:3128/" in text


def test_terminal_log_is_redacted() -> None:
    """stderr logging (gpuctl's loggers, -v/-vv) passes the redactor like the run record's logs."""
    import subprocess
    import sys

    code = ("from gpuctl.cli.common import configure_logging; configure_logging(1); import logging; "
            "logging.getLogger('gpuctl.t').warning('fetching %s', 'https://alice:p@ss:w0rd@mirror.lab/x')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "fetching https://alice:[redacted]@mirror.lab/x" in res.stderr, res.stderr
    assert "w0rd" not in res.stderr and "p@ss" not in res.stderr


def test_unreadable_credential_source_is_could_not_run_not_a_failure() -> None:
    """A source holding a credential is root's alone on the node (0600): verifying as a
    non-root SSH user cannot read it. That is 'could not run' naming the file, not 'no
    package source names the repository'."""
    from gpuctl.checks.model import CouldNotRun
    from tests.unit.checks_support import inventory_spec, probe, role

    spec = inventory_spec("lab")
    src = "/etc/apt/sources.list.d/gpuctl-nvidia.sources"
    p = probe(spec, {"tail -n +1": (1, "", f"tail: cannot open '{src}' for reading: Permission denied\n")})
    with pytest.raises(CouldNotRun, match="Permission denied"):
        role("nvidia_repo").test_repo_source(None, spec, p)


def test_check_failures_carry_no_secret() -> None:
    """A verify check that names the repository URL (nvidia_repo: 'no package source names
    <url>') fails with the URL's password removed: the message reaches the terminal table,
    --json and the report."""
    from gpuctl.checks.model import CheckFailure, CouldNotRun

    f = CheckFailure(f"no package source names {MIRROR}x", expected=f"a source for {MIRROR}x",
                     found="MYSQL_PWD=sqlpw77", remediation="reconfigure")
    c = CouldNotRun(f"curl: (7) {PROXY}: refused")
    text = " ".join([*f.fields().values(), str(f), *c.fields().values(), str(c)])
    for piece in ("p@ss", "@ss:", "w0rd", "sqlpw77", "pr@xy", "@xy@"):
        assert piece not in text
    assert "alice:[redacted]@mirror.lab/x" in f.message


@pytest.mark.parametrize("url", ["https://alice:s3cr3t$pw@mirror.lab/", "ftp://alice:s3cr3tpw@mirror.lab/"])
def test_input_errors_name_the_field_not_its_password(tmp_path, url) -> None:
    """A refused URL is quoted back in the error (file:line, field, value): without its password."""
    from click.testing import CliRunner

    from gpuctl.cli.main import main

    inv = tmp_path / "inv.yaml"
    inv.write_text(REPO_INV.read_text().replace("repos: {mirror: null}", f'repos: {{mirror: "{url}"}}'))
    for args in (["inventory", "validate", str(inv)], ["spec", str(inv)]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, res.output
        assert "repos.mirror" in res.output and "alice:[redacted]@mirror.lab" in res.output
        assert "s3cr3t" not in res.output
