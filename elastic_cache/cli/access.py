"""How a command reaches a cluster: its token and the certificate it trusts.

``ecache deploy`` records a deployed cluster's certificate under the user's configuration
directory (`certificate_record`), where ``ecache status --name`` finds it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_cache.auth import TOKEN_ENV, check_token
from elastic_cache.errors import ConfigError

if TYPE_CHECKING:
    import ssl

__all__ = [
    "add_client_token",
    "certificate_record",
    "client_tls",
    "client_token",
    "config_dir",
    "coordinator_url",
    "record_certificate",
    "recorded_certificate",
    "tls_ca",
]


def client_token(args: argparse.Namespace) -> str | None:
    """The token a command sends to a cluster: ``--token``, else ``$ECACHE_TOKEN``,
    without the blanks and line end around it (``$(cat token-file)`` of a file with a
    CRLF), as ``--token-file`` is read.

    Raises:
        ConfigError: it cannot be a cluster token (`check_token`).
    """
    token = getattr(args, "token", None) or os.environ.get(TOKEN_ENV) or None
    if token is None or not token.strip():
        return None
    try:
        return check_token(token.strip())
    except ConfigError as exc:
        source = "--token" if getattr(args, "token", None) else f"${TOKEN_ENV}"
        raise ConfigError(f"{source}: {exc}") from exc


def coordinator_url(args: argparse.Namespace) -> str:
    """``--url``, checked as `elastic_cache.client.AsyncClient` checks its URL, without a
    trailing slash: ``?x=1`` gave a confusing JSON error and a port of 99999 "connection
    refused" (review).

    Raises:
        ConfigError: it is not ``http(s)://host[:port][/path]`` without a query.
    """
    from elastic_cache.client.asyncclient import URL_FORM, checked_url
    from elastic_cache.errors import InvalidRequest

    try:
        return checked_url(args.url)
    except InvalidRequest as exc:
        raise ConfigError(
            f"--url {args.url!r} is not a coordinator's URL: expected {URL_FORM}"
        ) from exc


def tls_ca(args: argparse.Namespace) -> str | None:
    """The certificate file a command trusts: ``--tls-ca``, else ``$ECACHE_TLS_CA``."""
    from elastic_cache.tls import TLS_CA_ENV

    return getattr(args, "tls_ca", None) or os.environ.get(TLS_CA_ENV) or None


def client_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """Whom an ``https://`` cluster is trusted by (`tls_ca`; None: the system's CAs).

    Raises:
        ConfigError: the file cannot be read or holds no certificate.
    """
    from elastic_cache.tls import client_context

    path = tls_ca(args)
    return None if path is None else client_context(cafile=path)


def add_client_token(parser: argparse.ArgumentParser) -> None:
    """``--token`` and ``--tls-ca``, of the commands that talk to a running cluster."""
    parser.add_argument(
        "--token",
        help="the cluster token, if the cluster has one (default: $ECACHE_TOKEN; "
        "ecache token --name NAME prints a deployed cluster's)",
    )
    parser.add_argument(
        "--tls-ca",
        metavar="PATH",
        help="PEM certificate an https:// cluster is trusted by: a deployed cluster's "
        "(ecache deploy records it; ecache cert --name NAME prints it) is pinned, "
        "whatever the address (default: $ECACHE_TLS_CA, else the system's CAs)",
    )


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/ecache`` (default ``~/.config/ecache``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ecache"


def certificate_record(name: str, region: str) -> Path:
    """Where ``ecache deploy`` records the certificate of cluster ``name`` in
    ``region``, for the commands that talk to it (and for ``--tls-ca``)."""
    return config_dir() / "clusters" / region / f"{name}.pem"


def record_certificate(name: str, region: str, pem: str) -> Path:
    """Write ``pem`` where `certificate_record` says; returns the path."""
    path = certificate_record(name, region)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(pem, encoding="ascii")
    return path


def recorded_certificate(name: str, session: Any, region: str | None) -> str | None:
    """The certificate ``ecache deploy`` recorded for cluster ``name`` here, if any."""
    where = region or session.region_name
    if not where:
        return None
    path = certificate_record(name, str(where))
    return str(path) if path.is_file() else None
