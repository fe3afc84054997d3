"""The one redactor every writer of run records, logs, reports and bundles uses.

Secrets are removed by *structure*, not by guessing at values:
  * PEM/OpenSSH private key blocks;
  * URL userinfo, with or without a scheme (`https://u:p@h/`, `u:p@h/path`);
  * secret-named options with their value (`--password x`, `--password=x`,
    `--bmc-pass x`, ipmitool's `-P x`, sshpass's `-p x`), and `user:password` after
    curl/wget's `-u`/`--user`/`--proxy-user`;
  * secret-named assignments and keys: env (`BMC_PASSWORD=…`, `GH_TOKEN=…`,
    `AWS_SECRET=…`), YAML/INI (`password: …`), JSON (`"password": "…"`);
  * auth headers (`Authorization: Bearer …`, `Basic …`, `token …`);
and, as a second line, every *known* secret value (registered with `add_known`,
e.g. collected from the inventory and matrix by `known_from_files`) is replaced wherever
it occurs. `redact_obj` also blanks string values of secret-named mapping keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MARK = "[redacted]"

# A name that holds a secret: ends with one of the secret words (`bmc_password`,
# `GH_TOKEN`, `api-key`, `db_pass`); not a path/file/env *pointing* at one, and not a count
# or rate of tokens (`max_tokens`, `tokens_per_s`, `model_flops_per_token`: training and
# inference logs are full of them). A bare `pass` is a secret only as an option (`--pass x`):
# as a key it is a test count (`"pass": 22` in gpuctl's own verify counts).
_NAME = (r"(?:[A-Za-z0-9_.-]*?(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key"
         r"|private[_-]?key|credentials?)s?|[A-Za-z0-9_.-]*[_-]pass)")
_OPTION_NAME = rf"(?:{_NAME}|pass)"
_NOT_POINTER = r"(?<!file)(?<!path)(?<!_env)(?<!tokens)(?<!per_token)(?<!per-token)"
_VALUE = r"(\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[^\s\"'&,;]+)"

_MYSQL_CLIENT = re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\s")


def _capital_p(m: re.Match[str]) -> str:
    line = m.string[m.string.rfind("\n", 0, m.start()) + 1:m.start()]
    return m.group(0) if _MYSQL_CLIENT.search(line) else f"{m.group(1)}{MARK}"


_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)
_PRIVATE_KEY_MARK = "[redacted private key]"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # auth headers: keep the scheme word, drop the credential
    (re.compile(r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*)(?:(bearer|basic|token|digest|negotiate)\s+)?"
                r"([^\s\"',;]+)"),
     lambda m: f"{m.group(1)}{(m.group(2) + ' ') if m.group(2) else ''}{MARK}"),  # type: ignore[list-item]
    # URL userinfo with or without a scheme: user:secret@host
    (re.compile(r"(?i)((?:\b[a-z][a-z0-9+.-]*://)?(?<![\w.%+-])[\w.%+~-]+:)[^\s@/:'\"]+@(?=[\w\[])"),
     rf"\1{MARK}@"),
    # JSON: "password": "value"
    (re.compile(rf"(?i)(\"{_NAME}{_NOT_POINTER}\"\s*:\s*)\"(?:[^\"\\\n]|\\.)*\""), rf'\1"{MARK}"'),
    # JSON: "api_token": 123456 (a number under a secret name) -> a string mark, so the document stays JSON
    (re.compile(rf"(?i)(\"{_NAME}{_NOT_POINTER}\"\s*:\s*)-?\d[\d.eE+-]*"), rf'\1"{MARK}"'),
    # options: --password x, --password=x, --bmc-pass x
    (re.compile(rf"(?i)((?<![\w-])--?{_OPTION_NAME}{_NOT_POINTER}(?![\w-])(?:\s*=\s*|\s+))(?!-)" + _VALUE),
     rf"\1{MARK}"),
    # ipmitool style -P <password> (not after a MySQL/MariaDB client, whose -P is the port)
    (re.compile(r"((?<![\w-])-P\s+)(?!-)" + _VALUE), _capital_p),  # type: ignore[list-item]
    # curl/wget credentials as user:password: -u, --user, --proxy-user, -U (keep the user)
    (re.compile(r"((?<![\w-])(?:-u|-U|--user|--proxy-user)(?:\s+|=)[\"']?[^\s:\"']+:)[^\s\"']+"),
     rf"\1{MARK}"),
    # sshpass -p <password> (its -p is the password; elsewhere -p is a port or a flag)
    (re.compile(r"(\bsshpass\s+(?:-\w+\s+)*?-p\s*)" + _VALUE), rf"\1{MARK}"),
    # MySQL/MariaDB clients: -p<password> attached (a bare -p prompts; -P is their port)
    (re.compile(r"(\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\s+(?:[^\n|;&]*?\s)?-p)(?=[^\s-])" + _VALUE),
     rf"\1{MARK}"),
    # assignments and keys: PASSWORD=…, *_TOKEN=…, password: …, password = …
    (re.compile(rf"(?i)((?<![\w-]){_NAME}{_NOT_POINTER}(?![\w-])[\"']?\s*[=:]\s*)(?![\[{{]|[\"']?{re.escape(MARK)})"
                + _VALUE),
     rf"\1{MARK}"),
)

# Every pattern above needs one of these words or characters to match: only the lines that hold
# one (and the line after) go through the patterns; the rest of a large output is copied as is
# (verify at 32 nodes spent a seventh of its CPU in re.sub over whole outputs).
_TRIGGER = re.compile(r"(?i)passw|passp|[_-]pass|sshpass|secret|token|credential|(?:api|access|private)[_ -]?key"
                      r"|authorization|:[^\s@/:'\"]+@|(?<![\w-])(?:-[pu]|--(?:proxy-)?user)|mysql|mariadb")

# A superset of _TRIGGER as plain substrings of the lower-cased text.
_TRIGGER_WORDS = ("pass", "secret", "token", "credential", "key", "authorization", "@", "-p", "-u", "mysql",
                  "mariadb")

_SECRET_KEY = re.compile(rf"(?i)^{_NAME}{_NOT_POINTER}$")

#: Exact secret values known to this process (inventory/matrix credentials, BMC passwords).
_KNOWN: set[str] = set()
_MIN_KNOWN = 4  # shorter values would blank ordinary words


def add_known(values: Iterable[str]) -> None:
    """Register secret values to replace wherever they occur."""
    for v in values:
        if isinstance(v, str) and len(v) >= _MIN_KNOWN and v != MARK:
            _KNOWN.add(v)


def clear_known() -> None:
    _KNOWN.clear()


def secret_key(name: object) -> bool:
    """True for a mapping key that names a secret (password, bmc_pass, api_token, …)."""
    return isinstance(name, str) and bool(_SECRET_KEY.match(name))


def redact(text: str) -> str:
    """Remove private keys, credentials and every known secret value from text."""
    if not text:
        return text
    for value in sorted(_KNOWN, key=len, reverse=True):
        if value in text:
            text = text.replace(value, MARK)
    if "PRIVATE KEY" in text:
        text = _PRIVATE_KEY.sub(_PRIVATE_KEY_MARK, text)
    low = text.lower()
    if not any(word in low for word in _TRIGGER_WORDS):
        return text  # most short values: a few substring tests instead of a regex search
    out, pos = [], 0
    for start, end in _regions(text):
        segment = text[start:end]
        for pattern, repl in _PATTERNS:
            segment = pattern.sub(repl, segment)  # type: ignore[arg-type]
        out += [text[pos:start], segment]
        pos = end
    return "".join(out) + text[pos:] if out else text


def _regions(text: str) -> list[tuple[int, int]]:
    """The stretches of `text` the patterns must see: from the start of each line holding a
    trigger to the end of the line after it (a value may follow its name after one line
    break), overlapping stretches merged. Everything else cannot match any pattern."""
    spans: list[tuple[int, int]] = []
    for m in _TRIGGER.finditer(text):
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        end = len(text) if end < 0 else text.find("\n", end + 1)
        end = len(text) if end < 0 else end
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


_OPTION = re.compile(rf"(?i:^--?{_OPTION_NAME}{_NOT_POINTER}$)|^-P$")  # ipmitool's -P only; -p is a port or a flag


def redact_argv(argv: Iterable[str]) -> list[str]:
    """`redact` over each argument; the argument after a secret-named option
    (`--password x`, `-P x`) is replaced whole."""
    out: list[str] = []
    args = list(argv)
    for i, arg in enumerate(args):
        prev = args[i - 1] if i else ""
        if out and _OPTION.match(prev):
            out.append(MARK)
        elif prev in _USER_OPTIONS and ":" in arg:
            out.append(arg.split(":", 1)[0] + ":" + MARK)
        elif prev == "-p" and args and Path(args[0]).name == "sshpass":
            out.append(MARK)
        else:
            out.append(redact(arg))
    return out


_USER_OPTIONS = frozenset({"-u", "-U", "--user", "--proxy-user"})


def redact_obj(obj: Any) -> Any:
    """`redact` over every string of a JSON-like object; secret-named keys' string values
    are replaced whole."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: (MARK if secret_key(k) and isinstance(v, str) and v else redact_obj(v))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


_USERINFO = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?[\w.%+~-]+:([^\s@/:'\"]+)@", re.I)


def known_in(obj: Any) -> set[str]:
    """Secret values found by structure in parsed YAML/JSON data: values of secret-named
    keys and passwords in URL userinfo."""
    found: set[str] = set()

    def walk(o: Any, key: object = None) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, k)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, key)
        elif isinstance(o, str):
            if secret_key(key):
                found.add(o)
            found.update(m.group(1) for m in _USERINFO.finditer(o))

    walk(obj)
    return found


def known_from_files(paths: Iterable[str | Path | None]) -> None:
    """Register the secrets of the given YAML files (inventory, matrix); unreadable files
    are skipped (their loaders report them)."""
    from gpuctl.errors import InputError
    from gpuctl.yamlsrc import load_yaml

    for p in paths:
        if p is None:
            continue
        try:
            data, _ = load_yaml(p)
        except InputError:
            continue
        add_known(known_in(data))
