"""``replica serve --ssl-*``: HTTPS needs a certificate and its key (served: tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicas import cli


@pytest.mark.parametrize(
    "tls",
    [["--ssl-certfile", "c.pem"], ["--ssl-keyfile", "k.pem"], ["--ssl-ca-certs", "ca.pem"]],
)
def test_https_needs_a_certificate_and_its_key(
    model_path: Path, tls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--model", str(model_path), "--name", "m", "--port", "0", *tls]
    assert cli.main(argv) == 2
    assert "--ssl-certfile and --ssl-keyfile together" in capsys.readouterr().err
