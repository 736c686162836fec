"""The package bundle instances install from: this exact version of elastic-cache as a
wheel, plus a wheel of every dependency for the instances' platform, in one ``.tar.gz``.

The elastic-cache wheel is built from the code that runs ``ecache deploy`` (the package
directory and its installed metadata), so what boots on EC2 is what the user has, even
for a development checkout. Dependencies come from a wheelhouse directory: given with
``--wheelhouse``, or filled once per version and architecture by `fetch_dependencies`
(``pip`` on the deploying machine: the instances need no package index).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.metadata
import io
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from elastic_cache.errors import ConfigError
from elastic_cache.version import __version__

__all__ = [
    "DIST_NAME",
    "build_bundle",
    "build_wheel",
    "fetch_dependencies",
    "requirements",
    "wheel_name",
]

DIST_NAME = "elastic-cache"
_WHEEL_STEM = f"elastic_cache-{__version__}"

#: A fixed timestamp for every archive member, so a bundle's digest depends only on
#: its content (an unchanged package is not uploaded again).
_EPOCH = (1980, 1, 1, 0, 0, 0)

#: EC2 architecture names → the manylinux platform tags of wheels.
PLATFORMS = {
    "x86_64": ["manylinux2014_x86_64", "manylinux_2_28_x86_64"],
    "arm64": ["manylinux2014_aarch64", "manylinux_2_28_aarch64"],
}

#: The Python the user data installs on Amazon Linux 2023.
TARGET_PYTHON = "3.11"

Run = Callable[[Sequence[str]], None]


def wheel_name() -> str:
    """The file name of this version's wheel."""
    return f"{_WHEEL_STEM}-py3-none-any.whl"


def _distribution() -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution(DIST_NAME)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ConfigError(
            "elastic-cache is not installed (pip install -e . or make install), so its "
            "metadata cannot go into the wheel"
        ) from exc


def requirements() -> list[str]:
    """This package's runtime requirements (no extras), as pip takes them."""
    out = []
    for req in _distribution().requires or []:
        spec, _, marker = req.partition(";")
        if "extra" in marker:
            continue
        out.append(spec.strip())
    return out


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write(zf: zipfile.ZipFile, path: str, data: bytes) -> None:
    info = zipfile.ZipInfo(path, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def build_wheel(dest: Path) -> Path:
    """Write this version's pure-Python wheel into ``dest`` from the running package.

    Returns:
        The wheel's path.

    Raises:
        ConfigError: the package's metadata is not installed.
    """
    dist = _distribution()
    root = Path(__file__).parents[2]  # the elastic_cache package: aws/deploy/bundle.py
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )
    metadata = dist.read_text("METADATA") or (
        f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {__version__}\n"
    )
    entry_points = dist.read_text("entry_points.txt") or (
        "[console_scripts]\necache = elastic_cache.cli:main\n"
    )
    info = f"{_WHEEL_STEM}.dist-info"
    extra = {
        f"{info}/METADATA": metadata.encode(),
        f"{info}/entry_points.txt": entry_points.encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: elastic-cache deploy\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / wheel_name()
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for file in files:
            arc = f"elastic_cache/{file.relative_to(root).as_posix()}"
            data = file.read_bytes()
            _write(zf, arc, data)
            record.append(_record_line(arc, data))
        for arc, data in extra.items():
            _write(zf, arc, data)
            record.append(_record_line(arc, data))
        record.append(f"{info}/RECORD,,")
        _write(zf, f"{info}/RECORD", ("\n".join(record) + "\n").encode())
    return path


def _run(cmd: Sequence[str]) -> None:
    try:
        subprocess.run(list(cmd), check=True, stdout=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ConfigError(
            f"fetching dependency wheels failed ({' '.join(cmd[:4])} ...): {exc}; pass "
            "--wheelhouse DIR with the wheels for the instances' platform"
        ) from exc


def fetch_dependencies(arch: str, dest: Path, *, run: Run = _run) -> Path:
    """Fill ``dest`` with wheels of every dependency for Linux on ``arch``, CPython 3.11.

    ``pip wheel`` resolves the dependencies on this machine and builds wheels for those
    published only as source (pure Python); every wheel that is not pure is then
    downloaded again, at the same version, for the instances' platform.

    Args:
        arch: ``x86_64`` or ``arm64``.
        dest: the wheelhouse directory (kept as a cache: a filled one is reused).
        run: runs a command (tests pass a fake).

    Raises:
        ConfigError: pip failed (no network to the package index, for example).
    """
    if arch not in PLATFORMS:
        raise ConfigError(f"no wheels for architecture {arch!r}")
    done = dest / ".complete"
    if done.exists():
        return dest
    host = dest / "host"
    host.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", "--quiet", "--wheel-dir", str(host), *requirements()])
    pinned = []
    for wheel in sorted(host.glob("*.whl")):
        if wheel.name.endswith("-none-any.whl"):
            wheel.replace(dest / wheel.name)
        else:
            name, version = wheel.name.split("-")[:2]
            pinned.append(f"{name}=={version}")
            wheel.unlink()
    if pinned:
        platforms = [arg for p in PLATFORMS[arch] for arg in ("--platform", p)]
        run(
            [
                *pip,
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                *platforms,
                "--python-version",
                TARGET_PYTHON,
                "--implementation",
                "cp",
                "--dest",
                str(dest),
                *pinned,
            ]
        )
    host.rmdir()
    done.touch()
    return dest


def build_bundle(wheelhouse: Path, *, work: Path) -> tuple[bytes, str]:
    """The bundle: this version's wheel and every wheel in ``wheelhouse``, gzipped tar.

    Returns:
        ``(data, digest)``: the archive and the first 12 hex digits of its SHA-256.
    """
    wheel = build_wheel(work)
    members = [wheel, *sorted(p for p in wheelhouse.glob("*.whl") if p.name != wheel.name)]
    raw = io.BytesIO()
    # mtime=0 in the gzip header too, so equal content gives equal bytes.
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in members:
            info = tarfile.TarInfo(path.name)
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    return data, hashlib.sha256(data).hexdigest()[:12]
