"""`elastic_cache.cli.awsenv`: the region the AWS commands use."""

from __future__ import annotations

import pytest

from elastic_cache import cli


@pytest.mark.parametrize(
    "command",
    [
        ["destroy", "--name", "c1", "--yes"],
        ["token", "--name", "c1"],
        ["cert", "--name", "c1"],
        ["status", "--name", "c1"],
    ],
)
def test_a_region_that_is_no_region_is_a_clear_error(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before any AWS call (it was botocore's InvalidRegionError traceback, exit 1)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert cli.main([*command, "--region", "bad_region"]) == 2
    assert "--region must be an AWS region such as us-east-1, got 'bad_region'" in (
        capsys.readouterr().err
    )
