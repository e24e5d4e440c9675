"""``miqps worker``'s command line: its options over the environment's settings."""

from __future__ import annotations

import argparse
import logging

import pytest

from streams.cli.common import settings_from
from streams.cli.worker import run, worker_parser


def test_worker_options_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIQPS_PARTITIONS", "3")
    monkeypatch.setenv("MIQPS_PROXY", "http://env.test:1")
    monkeypatch.setenv("MIQPS_AGENTS", "probe")
    args = worker_parser().parse_args(
        [
            "--partitions",
            "6",
            "--allow-private",
            "--topic-prefix",
            "t.",
            "--stop-timeout",
            "12",
            "--on-bug",
            "retry",
        ]
    )
    settings = settings_from(args)
    assert (settings.partitions, settings.proxy, settings.allow_private) == (
        6,
        "http://env.test:1",
        True,
    )
    assert (settings.agents, settings.stop_timeout, settings.on_bug) == (("probe",), 12.0, "retry")
    assert settings.topics.raw == "t.urls.raw"


def test_bad_settings_end_the_command_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MIQPS_PARTITIONS", "abc")
    with pytest.raises(SystemExit) as exited:
        settings_from(worker_parser().parse_args([]))
    assert exited.value.code == 2
    assert "MIQPS_PARTITIONS='abc': not an integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        worker_parser().parse_args(["--stop-timeout", "9999"])
    assert "--stop-timeout: '9999': must be at most 3600" in capsys.readouterr().err


def test_the_worker_logs_which_per_url_path_runs_and_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MIQPS_NATIVE", "0")
    monkeypatch.setenv("MIQPS_PARTITIONS", "abc")  # ends the command before any broker
    # The command sets up the process's logging; the tests after this one must not inherit
    # its rate limit (a second "waiting for Kafka" within 10 s would go unseen).
    monkeypatch.setattr("streams.cli.worker.rate_limit_handlers", lambda *args, **kwargs: None)
    monkeypatch.setattr(logging, "basicConfig", lambda *args, **kwargs: None)
    caplog.set_level(logging.INFO, logger="streams.cli")
    with pytest.raises(SystemExit):
        run(argparse.Namespace(args=[]))
    assert "canonicalizer path: python (MIQPS_NATIVE=0)" in caplog.messages
