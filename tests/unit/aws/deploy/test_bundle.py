"""The bundle: a valid wheel of the running package (user-data templates included), a
reproducible archive, and how dependency wheels are fetched for the instances."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from elastic_cache import __version__
from elastic_cache.aws.deploy.bundle import (
    build_bundle,
    build_wheel,
    fetch_dependencies,
    requirements,
    wheel_name,
)


def test_the_wheel_installs_and_carries_the_user_data_templates(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    assert wheel.name == wheel_name() == f"elastic_cache-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record = zf.read(f"elastic_cache-{__version__}.dist-info/RECORD").decode()
        assert (
            "ecache = elastic_cache.cli:main"
            in zf.read(f"elastic_cache-{__version__}.dist-info/entry_points.txt").decode()
        )
    assert "elastic_cache/aws/userdata/node.sh" in names
    assert "elastic_cache/aws/userdata/coordinator.sh" in names
    assert not any("__pycache__" in n for n in names)
    assert all(n in record for n in names)
    target = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (target / "elastic_cache" / "aws" / "userdata" / "common.sh").is_file()
    assert (target / f"elastic_cache-{__version__}.dist-info").is_dir()


def test_the_bundle_is_reproducible(tmp_path: Path) -> None:
    house = tmp_path / "wheels"
    house.mkdir()
    (house / "dep-1.0-py3-none-any.whl").write_bytes(b"x")
    one, digest_one = build_bundle(house, work=tmp_path / "a")
    two, digest_two = build_bundle(house, work=tmp_path / "b")
    assert one == two and digest_one == digest_two and len(digest_one) == 12


def test_requirements_leave_out_extras() -> None:
    reqs = requirements()
    assert any(r.startswith("aiohttp") for r in reqs)
    assert not any(r.startswith(("moto", "pytest", "mypy")) for r in reqs)


def test_fetch_dependencies_keeps_pure_wheels_and_downloads_binary_ones(tmp_path: Path) -> None:
    commands: list[list[str]] = []

    def run(cmd: Sequence[str]) -> None:
        commands.append(list(cmd))
        if "wheel" in cmd:
            host = Path(cmd[cmd.index("--wheel-dir") + 1])
            (host / "pybloom_live-4.0.0-py3-none-any.whl").write_bytes(b"pure")
            (host / "numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"bin")

    dest = fetch_dependencies("arm64", tmp_path / "house", run=run)
    assert [p.name for p in dest.glob("*.whl")] == ["pybloom_live-4.0.0-py3-none-any.whl"]
    download = commands[1]
    assert download[3] == "download" and download[-1] == "numpy==2.4.6"
    assert "manylinux2014_aarch64" in download and "3.11" in download
    assert "--only-binary=:all:" in download
    # A filled wheelhouse is reused.
    assert fetch_dependencies("arm64", dest, run=run) == dest and len(commands) == 2
