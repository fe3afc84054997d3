"""The engines' logs (pyinfra, paramiko) go to the run record, never the terminal."""

from __future__ import annotations

import logging

import pytest

from gpuctl.runner.logroute import engine_logs_to


def _paramiko_handshake_failure() -> None:
    try:
        raise TimeoutError("Error reading SSH protocol banner")
    except TimeoutError:
        logging.getLogger("paramiko.transport").error("Exception (client): Error reading SSH protocol banner",
                                                      exc_info=True)


def test_paramiko_tracebacks_go_to_the_record_not_stderr(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    terminal = logging.StreamHandler()  # what `gpuctl -v` installs (logging.basicConfig)
    root.addHandler(terminal)
    try:
        log = tmp_path / "pyinfra.log"
        with engine_logs_to(log):
            _paramiko_handshake_failure()
            logging.getLogger("pyinfra").info("--> Starting operation: x password=hunter2")
        text = log.read_text()
        assert "Traceback" in text and "Error reading SSH protocol banner" in text
        assert "Starting operation" in text
        assert "Traceback" not in capsys.readouterr().err
        # restored afterwards: paramiko propagates to the terminal handler again
        assert logging.getLogger("paramiko").propagate is True
        assert not [h for h in logging.getLogger("paramiko").handlers if isinstance(h, logging.FileHandler)]
    finally:
        root.removeHandler(terminal)


def test_without_a_record_the_engine_logs_are_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    terminal = logging.StreamHandler()
    root.addHandler(terminal)
    try:
        with engine_logs_to(None):
            _paramiko_handshake_failure()
        assert "Traceback" not in capsys.readouterr().err
    finally:
        root.removeHandler(terminal)


def test_secrets_are_redacted_in_the_engine_log(tmp_path) -> None:
    secret_line = "BMC password=s3cr3t-value"
    log = tmp_path / "pyinfra.log"
    with engine_logs_to(log):
        logging.getLogger("pyinfra").warning(secret_line)
    assert "s3cr3t-value" not in log.read_text()
