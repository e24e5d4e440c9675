"""``miqps dashboard``'s command line (the dashboard itself: tests/streams/ops/dashboard)."""

from __future__ import annotations

import pytest

from streams.cli.common import add_common_options, settings_from
from streams.cli.dashboard import dashboard_parser
from streams.ops.dashboard import DEFAULT_PORT


def test_the_dashboard_listens_on_loopback_by_default() -> None:
    options = dashboard_parser().parse_args([])
    assert (options.host, options.port, options.worker_metrics) == ("127.0.0.1", DEFAULT_PORT, None)
    options = dashboard_parser().parse_args(
        ["--host", "0.0.0.0", "--port", "0", "--worker-metrics", "http://w:9100/metrics"]
    )
    assert (options.host, options.port, options.worker_metrics) == (
        "0.0.0.0",
        0,
        "http://w:9100/metrics",
    )


@pytest.mark.parametrize(
    ("port", "message"),
    [("web", "not a port number: 'web'"), ("70000", "a port is 0 to 65535, not 70000")],
)
def test_a_bad_port_is_refused_with_a_message(
    port: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        dashboard_parser().parse_args(["--port", port])
    assert exited.value.code == 2
    assert f"argument --port: {message}" in capsys.readouterr().err


def test_the_broker_and_prefix_options_reach_the_settings() -> None:
    parser = dashboard_parser()
    add_common_options(parser)
    options = parser.parse_args(["--bootstrap-servers", "k:1", "--topic-prefix", "t."])
    settings = settings_from(options)
    assert (settings.bootstrap_servers, settings.topics.maps) == ("k:1", "t.miqps.maps")
