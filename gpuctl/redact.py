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

import functools
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuctl.errors import InputError
from gpuctl.yamlsrc import load_yaml

MARK = "[redacted]"

# A name that holds a secret: ends with one of the secret words (`bmc_password`,
# `GH_TOKEN`, `api-key`, `db_pass`); not a path/file/env *pointing* at one, and not a count
# or rate of tokens (`max_tokens`, `tokens_per_s`, `model_flops_per_token`: training and
# inference logs are full of them). A bare `pass` is a secret only as an option (`--pass x`):
# as a key it is a test count (`"pass": 22` in gpuctl's own verify counts). `*_PWD` (MySQL's
# MYSQL_PWD; not the shell's PWD/OLDPWD) and `auth`/`*_auth` (docker's config.json "auth",
# REDISCLI_AUTH) are secrets too.
_NAME = (r"(?:[A-Za-z0-9_.-]*?(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key"
         r"|private[_-]?key|credentials?)s?|[A-Za-z0-9_.-]*[_-](?:pass|pwd)|(?:[A-Za-z0-9_.-]*[_-])?auths?)")
_OPTION_NAME = rf"(?:{_NAME}|pass)"
_NOT_POINTER = r"(?<!file)(?<!path)(?<!_env)(?<!tokens)(?<!per_token)(?<!per-token)"
_VALUE = r"(\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[^\s\"'&,;]+)"

_MYSQL_CLIENT = re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\s")


def _line_before(m: re.Match[str]) -> str:
    return m.string[m.string.rfind("\n", 0, m.start()) + 1:m.start()]


def _capital_p(m: re.Match[str]) -> str:
    """ipmitool's -P password, separate or attached (`-Phunter2`). Kept: a MySQL/MariaDB
    client's -P (its port), and an attached short or numeric word off an ipmitool line
    (`grep -Po`, `rsync -Pav`, `-P3306`)."""
    line = _line_before(m)
    if _MYSQL_CLIENT.search(line):
        return m.group(0)
    value = m.group(2)
    if m.group(1) == "-P" and "ipmitool" not in line and (len(value) < 4 or value.isdigit()):
        return m.group(0)
    return f"{m.group(1)}{MARK}"


def _userinfo(m: re.Match[str]) -> str:
    """`scheme://user:secret@host`: the user stays, everything up to the rightmost `@` before
    the host goes (a password may hold `:` or `@`); `http(s)://token@host` loses the token."""
    scheme, info = m.group(1), m.group(2)
    if ":" in info:
        return f"{scheme}{info.split(':', 1)[0]}:{MARK}@"
    if scheme.lower() in ("http://", "https://") and info:
        return f"{scheme}{MARK}@"
    return m.group(0)


# A whole key block, or one whose END line is missing (a truncated output): the BEGIN line and
# every following line of key material (base64, PEM headers, blank), with real or JSON-escaped
# line breaks.
_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
    r"(?:(?:(?!-----BEGIN )[\s\S])*?-----END [A-Z0-9 ]*PRIVATE KEY-----"
    r"|(?:(?:\r?\n|\\r\\n|\\n)(?:[A-Za-z0-9+/=]*|(?:Proc-Type|DEK-Info|Comment): [^\r\n\\]*)"
    r"(?=[\r\n\"']|\\[rn\"]|\Z))*)")
_PRIVATE_KEY_MARK = "[redacted private key]"

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#'\"<>]*)@")
_BARE_USERINFO = re.compile(r"(?i)((?<![\w.%+~:/@-])[\w.%+~-]+:)(?!//)[^\s/'\"<>]*@(?=[\w\[])")
# A flow list or map as a value: [a, b], {"u": "x", "k": {"n": 1}} (one level of nesting inside)
_FLOW = r"(?:\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]|\{(?:[^{}\n]|\{[^{}\n]*\})*\})"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # auth headers: keep the scheme word, drop the credential
    (re.compile(r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*)(?:(bearer|basic|token|digest|negotiate)\s+)?"
                r"([^\s\"',;]+)"),
     lambda m: f"{m.group(1)}{(m.group(2) + ' ') if m.group(2) else ''}{MARK}"),  # type: ignore[list-item]
    # URL userinfo: scheme://user:secret@host, up to the rightmost `@` of the authority
    (_URL_USERINFO, _userinfo),  # type: ignore[list-item]
    # the same without a scheme (pip's `-i user:secret@host/…`): user:secret@host
    (_BARE_USERINFO, rf"\1{MARK}@"),
    # JSON: "password": "value"
    (re.compile(rf"(?i)(\"{_NAME}{_NOT_POINTER}\"\s*:\s*)\"(?:[^\"\\\n]|\\.)*\""), rf'\1"{MARK}"'),
    # JSON: "api_token": 123456 (a number under a secret name) -> a string mark, so the document stays JSON
    (re.compile(rf"(?i)(\"{_NAME}{_NOT_POINTER}\"\s*:\s*)-?\d[\d.eE+-]*"), rf'\1"{MARK}"'),
    # JSON: a list or map (one level of nesting inside) under a secret name -> a string mark
    (re.compile(rf"(?i)(\"{_NAME}{_NOT_POINTER}\"\s*:\s*){_FLOW}"), rf'\1"{MARK}"'),
    # YAML/INI flow list or map under a secret name: password: [a, b]
    (re.compile(rf"(?i)((?<![\w-]){_NAME}{_NOT_POINTER}(?![\w-])[\"']?\s*[=:]\s*){_FLOW}"), rf"\1{MARK}"),
    # options: --password x, --password=x, --bmc-pass x
    (re.compile(rf"(?i)((?<![\w-])--?{_OPTION_NAME}{_NOT_POINTER}(?![\w-])(?:\s*=\s*|\s+))(?!-)" + _VALUE),
     rf"\1{MARK}"),
    # ipmitool style -P <password> or -P<password> (see _capital_p for the -P kept)
    (re.compile(r"((?<![\w-])-P(?:\s+|(?=[^\s-])))(?!-)" + _VALUE), _capital_p),  # type: ignore[list-item]
    # credentials as user:password or user%password (curl/wget, smbclient): -u, -U (attached too),
    # --user, --proxy-user (keep the user)
    (re.compile(r"((?<![\w-])(?:(?:-u|-U)(?:\s+|=)?|(?:--user|--proxy-user)(?:\s+|=))[\"']?[^\s:%\"']+[:%])"
                r"[^\s\"']+"),
     rf"\1{MARK}"),
    # redis-cli -a <password>; docker/podman/... login -p <password>
    (re.compile(r"(\bredis-cli\b[^\n|;&]*?(?<![\w-])-a(?:\s+|(?=[^\s-])))(?!-)" + _VALUE), rf"\1{MARK}"),
    (re.compile(r"(\b(?:docker|podman|nerdctl|buildah|skopeo|helm|oras)\b[^\n|;&]*?\blogin\b[^\n|;&]*?"
                r"(?<![\w-])-p(?:\s+|(?=[^\s-])))(?!-)" + _VALUE), rf"\1{MARK}"),
    # ~/.netrc: machine <host> login <user> password <secret> (the words on one line)
    (re.compile(r"(\b(?:machine|default|login)\b[^\n]*?(?<![\w-])password\s+)(?![\"']?\[)" + _VALUE),
     rf"\1{MARK}"),
    # chpasswd input: user:password piped into chpasswd (keep the user)
    (re.compile(r"((?<![\w.-])[\w.-]+:)[^\s\"':|]+(?=[\"']?\s*\|\s*(?:sudo\s+)?chpasswd\b)"), rf"\1{MARK}"),
    # OpenSSL pass phrase arguments: -passin pass:<secret>
    (re.compile(r"((?<![\w\"':-])pass:)(?=[^\s\"'])" + _VALUE), rf"\1{MARK}"),
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
# The leading lookahead (every alternative's first character) lets the regex engine skip most
# positions at once: a third of the time of the bare alternation on the fixtures.
_TRIGGER = re.compile(r"(?i)(?=[pstcamr:_-])(?:passw|passp|[_-]pass|pass:|sshpass|[_-]pwd|secret|token|credential"
                      r"|(?:api|access|private)[_ -]?key|auth|:[^\s'\"]*@|(?<![\w-])(?:-[pu]|--(?:proxy-)?user)"
                      r"|mysql|mariadb|redis-cli)")

# A superset of _TRIGGER as plain substrings of the lower-cased text.
_TRIGGER_WORDS = ("pass", "pwd", "secret", "token", "credential", "key", "auth", "@", "-p", "-u", "mysql",
                  "mariadb", "redis-cli")
_TRIGGER_WORD = re.compile("|".join(re.escape(w) for w in _TRIGGER_WORDS))

# A secret key whose value is on the lines below it: a block scalar (`password: |`, `key: >-`),
# a block list or map (`tokens:` then `- a`), or a JSON list/map opened at the end of the line.
_BLOCK_KEY = re.compile(rf"(?i)([ \t]*)(-[ \t]+)?[\"']?{_NAME}{_NOT_POINTER}[\"']?[ \t]*:[ \t]*"
                        r"(?:[|>][-+0-9]*|[\[{])?[ \t]*(?:#[^\n]*)?")


def _block_end(text: str, eol: int, key: re.Match[str]) -> int:
    """The end of the value lines under the key line ending at `eol`: the following lines
    indented deeper than the key (blank lines inside included), and a YAML list written at the
    key's own indentation (`tokens:` then `- a`)."""
    col = len(key.group(1)) + len(key.group(2) or "")
    end = pos = eol
    while pos < len(text):
        nxt = text.find("\n", pos + 1)
        nxt = len(text) if nxt < 0 else nxt
        line = text[pos + 1:nxt]
        body = line.lstrip(" \t")
        if body:
            indent = len(line) - len(body)
            if not (indent > col or (indent == col and not key.group(2) and (body == "-" or body.startswith("- ")))):
                break
            end = nxt
        pos = nxt
    return end


def _blocks(text: str) -> str:
    """Every non-blank line of each secret key's block value replaced by the mark (indentation
    kept, so the line count and the lines around stay as they were)."""
    if ":" not in text:
        return text
    out: list[str] = []
    last = pos = 0
    while pos <= len(text):
        eol = text.find("\n", pos)
        eol = len(text) if eol < 0 else eol
        key = _BLOCK_KEY.fullmatch(text, pos, eol) if text.find(":", pos, eol) >= 0 else None
        if key:
            end = _block_end(text, eol, key)
            if end > eol:
                lines = text[eol + 1:end].split("\n")
                out += [text[last:eol + 1],
                        "\n".join(ln[:len(ln) - len(ln.lstrip(" \t"))] + MARK if ln.strip() else ln for ln in lines)]
                last = pos = end
                continue
        pos = eol + 1
    return "".join(out) + text[last:] if out else text


_SECRET_KEY = re.compile(rf"(?i)^{_NAME}{_NOT_POINTER}$")

#: Exact secret values known to this process (inventory/matrix credentials, BMC passwords).
_KNOWN: set[str] = set()
_MIN_KNOWN = 4  # shorter values would blank ordinary words


class RedactingFormatter(logging.Formatter):
    """A log formatter whose every line passes `redact` (terminal and run-record logs)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def add_known(values: Iterable[str]) -> None:
    """Register secret values to replace wherever they occur."""
    for v in values:
        if isinstance(v, str) and len(v) >= _MIN_KNOWN and v != MARK:
            _KNOWN.add(v)


def secret_key(name: object) -> bool:
    """True for a mapping key that names a secret (password, bmc_pass, api_token, …)."""
    return isinstance(name, str) and _secret_key_name(name)


@functools.lru_cache(maxsize=4096)
def _secret_key_name(name: str) -> bool:
    # a run record's objects repeat the same few dozen keys thousands of times (verify at 16
    # nodes: 11,700 keys per stage write), issue 18
    return bool(_SECRET_KEY.match(name))


def holds_secret(text: str) -> bool:
    """True when `text` holds something `redact` would remove (a file holding one must not be
    world-readable: gpuctl.operations.write_file)."""
    return redact(text) != text


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
    if not _TRIGGER_WORD.search(low):
        return text  # most short values: one scan for the trigger words instead of the patterns
    out, pos = [], 0
    for start, end in _regions(text, low):
        segment = _blocks(text[start:end])
        for pattern, repl in _PATTERNS:
            segment = pattern.sub(repl, segment)  # type: ignore[arg-type]
        out += [text[pos:start], segment]
        pos = end
    return "".join(out) + text[pos:] if out else text


def _triggers(text: str, low: str) -> Iterable[re.Match[str]]:
    """Every _TRIGGER match in `text`, in order. No match spans lines and each holds one of
    _TRIGGER_WORDS lower-cased, so on ASCII text (where `low` is `text` lower-cased char for
    char) only the lines holding such a word are searched: the case-insensitive pattern
    costs ~8 ms on a 90 kB commands.log, the word scan ~1.5 ms (issue 18)."""
    if not text.isascii():
        yield from _TRIGGER.finditer(text)
        return
    done = -1
    for w in _TRIGGER_WORD.finditer(low):
        if w.start() < done:
            continue
        start = low.rfind("\n", 0, w.start()) + 1
        done = low.find("\n", w.end())
        done = len(low) if done < 0 else done
        yield from _TRIGGER.finditer(text, start, done)


def _regions(text: str, low: str | None = None) -> list[tuple[int, int]]:
    """The stretches of `text` the patterns must see: from the start of each line holding a
    trigger to the end of the line after it (a value may follow its name after one line
    break) or, for a secret key opening a block, to the end of the block; overlapping
    stretches merged. Everything else cannot match any pattern."""
    spans: list[tuple[int, int]] = []
    for m in _triggers(text, text.lower() if low is None else low):
        start = text.rfind("\n", 0, m.start()) + 1
        eol = text.find("\n", m.end())
        eol = len(text) if eol < 0 else eol
        end = len(text) if eol == len(text) else text.find("\n", eol + 1)
        end = len(text) if end < 0 else end
        key = _BLOCK_KEY.fullmatch(text, start, eol)
        if key:  # a secret key whose value is the indented lines below it: all of them
            end = max(end, _block_end(text, eol, key))
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


def _holds_value(v: Any) -> bool:
    """A value under a secret key that could carry the secret: anything but None, a bool
    and an empty string, list or map."""
    return v is not None and not isinstance(v, bool) and not (isinstance(v, (str, list, tuple, dict)) and not v)


def redact_obj(obj: Any) -> Any:
    """`redact` over every string of a JSON-like object; the value of a secret-named key is
    replaced whole, whatever its type (string, number, list, nested map)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: (MARK if secret_key(k) and _holds_value(v) else redact_obj(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


def _url_secrets(text: str) -> list[str]:
    """The secret part of each URL userinfo in `text` (as `_userinfo` and _BARE_USERINFO
    redact it): the password, or a token standing alone before an http(s) host."""
    found: list[str] = []
    for m in _URL_USERINFO.finditer(text):
        scheme, info = m.group(1), m.group(2)
        if ":" in info:
            found.append(info.split(":", 1)[1])
        elif scheme.lower() in ("http://", "https://") and info:
            found.append(info)
    found += [m.group(0)[len(m.group(1)):-1] for m in _BARE_USERINFO.finditer(text)]
    return [f for f in found if f]


def known_in(obj: Any) -> set[str]:
    """Secret values found by structure in parsed YAML/JSON data: every value under a
    secret-named key (strings and numbers, in lists and nested maps too) and the secret part
    of URL userinfo."""
    found: set[str] = set()

    def walk(o: Any, secret: bool) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, secret or secret_key(k))
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, secret)
        elif isinstance(o, str):
            if secret:
                found.add(o)
            found.update(_url_secrets(o))
        elif secret and isinstance(o, (int, float)) and not isinstance(o, bool):
            found.add(str(o))

    walk(obj, False)
    return found


def known_from_files(paths: Iterable[str | Path | None]) -> None:
    """Register the secrets of the given YAML files (inventory, matrix); unreadable files
    are skipped (their loaders report them)."""

    for p in paths:
        if p is None:
            continue
        try:
            data, _ = load_yaml(p)
        except InputError:
            continue
        add_known(known_in(data))
