"""The redactor finds its triggers line by line on ASCII text (issue 18: ~8 ms → ~2 ms on a
90 kB commands.log); the matches must be exactly those of the whole-text search."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl import redact as rd

FIXTURES = sorted(p for p in (Path(__file__).resolve().parents[1] / "data" / "fixtures").rglob("*") if p.is_file())

PIECES = ["pass", "PASSWORD", "passw", "-pass", "_pwd", "sshpass", "Secret", "token", "credential", "api key",
          "access_key", "private-key", "auth", "user:pw@host", ":x@", "-p", " -u ", "--user", "--proxy-user",
          "mysql", "mariadb", "redis-cli", "key", "\n", " ", "a", "-", "_", ":", "@", "'", '"', "=", "x9",
          "p-u", "\t", "K", "\u212a", "\u017f", "é"]


def _spans(matches) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    return [(m.start(), m.end()) for m in matches]


def _same(text: str) -> None:
    assert _spans(rd._triggers(text, text.lower())) == _spans(rd._TRIGGER.finditer(text)), text


def test_every_fixture_output() -> None:
    assert len(FIXTURES) > 50
    for path in FIXTURES:
        _same(path.read_text(errors="replace"))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40))
def test_any_mix_of_trigger_fragments(parts: list[str]) -> None:
    _same("".join(parts))


def test_redact_result_unchanged_on_fixtures(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fast = [rd.redact(p.read_text(errors="replace")) for p in FIXTURES]
    monkeypatch.setattr(rd, "_triggers", lambda text, low: rd._TRIGGER.finditer(text))
    slow = [rd.redact(p.read_text(errors="replace")) for p in FIXTURES]
    assert fast == slow


def test_trigger_words_cover_the_pattern() -> None:
    assert isinstance(rd._TRIGGER_WORD, re.Pattern)
    for text in ["passw", "x-pass", "pass:", "_pwd", "Secret", "TOKEN", "credential", "api_key", "AUTH",
                 "u:p@h", " -p", "--user", "mysql", "mariadb", "redis-cli"]:
        assert rd._TRIGGER.search(text) and rd._TRIGGER_WORD.search(text.lower()), text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("pastwordkeyPASSWORDTOKEN_-.:0x é\u212a")), max_size=24))
def test_secret_key_memo_agrees_with_the_pattern(name: str) -> None:
    assert rd.secret_key(name) is bool(rd._SECRET_KEY.match(name))
    assert rd.secret_key(name) is rd.secret_key(name)


def test_secret_key_is_memoized() -> None:
    rd.secret_key("status")
    before = rd._secret_key_name.cache_info().hits
    for _ in range(10):
        assert rd.secret_key("status") is False and rd.secret_key("bmc_password") is True
    assert rd._secret_key_name.cache_info().hits >= before + 19
    assert rd.secret_key(3) is False
