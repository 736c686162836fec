"""TLS on the coordinator's public port: the server's context, and the clients'.

The server side (`server_context`) loads a certificate chain and its private key from
PEM files (``[coordinator] tls_cert`` / ``tls_key``), checking each file and that they
match, so a mistake is a `ConfigError` naming the setting rather than an OpenSSL code.

The client side (`client_context`) trusts exactly the certificates in one PEM file or
text, never the system's store. One certificate that is not a CA's is a *pin*: it is the
only trust anchor (even when some CA issued it), and the host name is not checked,
since only the holder of that certificate's private key can complete the handshake
whatever address the server has (a self-signed deployment certificate stays valid when
the coordinator's address changes). Anything else is a CA bundle, checked as browsers
do, host name included. docs/aws.md, "TLS", says why.
"""

from __future__ import annotations

import hashlib
import re
import ssl

from elastic_cache.errors import ConfigError

__all__ = [
    "TLS_CA_ENV",
    "certificates_in",
    "client_context",
    "fingerprint",
    "is_pin",
    "server_context",
]

#: The environment variable naming the certificate file ``ecache`` commands trust
#: (as ``--tls-ca``; read only by `elastic_cache.cli`).
TLS_CA_ENV = "ECACHE_TLS_CA"

_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----\s+[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----")


def certificates_in(pem: str) -> list[str]:
    """The PEM certificate blocks of ``pem``, in order (other blocks are skipped)."""
    return _PEM_CERT.findall(pem)


def fingerprint(pem: str) -> str:
    """The SHA-256 fingerprint of the first certificate of ``pem``, as ``openssl x509
    -fingerprint -sha256`` prints it (upper-case hex pairs joined by colons).

    Raises:
        ConfigError: ``pem`` holds no certificate.
    """
    blocks = certificates_in(pem)
    if not blocks:
        raise ConfigError("no PEM certificate (-----BEGIN CERTIFICATE-----) found")
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(blocks[0])).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def _readable(setting: str, path: str) -> None:
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ConfigError(f"cannot read {setting} {path}: {exc.strerror or exc}") from exc


def server_context(
    cert: str,
    key: str,
    *,
    cert_setting: str = "[coordinator] tls_cert",
    key_setting: str = "[coordinator] tls_key",
) -> ssl.SSLContext:
    """A server context (TLS 1.2 or later) serving the chain in ``cert`` with ``key``.

    Args:
        cert: path of the PEM certificate chain, the server's own certificate first.
        key: path of its PEM private key (unencrypted).
        cert_setting, key_setting: how errors name the two.

    Raises:
        ConfigError: a file cannot be read, holds no certificate or key, or the key is
            not the certificate's.
    """
    _readable(cert_setting, cert)
    _readable(key_setting, key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # A password callback that fails, so an encrypted key is an error, not a prompt.
        context.load_cert_chain(cert, key, password=_no_password)
    except ssl.SSLError as exc:
        # A key of the certificate's type that is not its key: KEY_VALUES_MISMATCH; a
        # key of another type (an EC key for an RSA certificate): NO_CERTIFICATE_ASSIGNED
        # once the files parse (both are PEM, so the message names the mismatch).
        mismatch = "KEY_VALUES_MISMATCH" in str(exc) or (
            "NO_CERTIFICATE_ASSIGNED" in str(exc) and _parses(cert, key)
        )
        if mismatch:
            raise ConfigError(
                f"{key_setting} {key} is not the private key of {cert_setting} {cert}"
            ) from exc
        raise ConfigError(
            f"cannot load {cert_setting} {cert} with {key_setting} {key}: expected a PEM "
            f"certificate chain and its unencrypted PEM private key ({exc.reason or exc})"
        ) from exc
    except ValueError as exc:  # the password callback: an encrypted key
        raise ConfigError(f"{key_setting} {key} is encrypted; give it unencrypted") from exc
    return context


def _parses(cert: str, key: str) -> bool:
    """Whether ``cert`` holds a PEM certificate and ``key`` a PEM private key block."""
    try:
        with open(cert, encoding="latin-1") as c, open(key, encoding="latin-1") as k:
            return bool(certificates_in(c.read())) and "PRIVATE KEY-----" in k.read()
    except OSError:
        return False


def _no_password() -> str:
    raise ValueError("encrypted key")


def is_pin(context: ssl.SSLContext) -> bool:
    """Whether ``context`` trusts exactly one certificate, not a CA's (a pin)."""
    stats = context.cert_store_stats()
    return stats["x509"] == 1 and stats["x509_ca"] == 0


def client_context(*, cafile: str | None = None, cadata: str | None = None) -> ssl.SSLContext:
    """A client context that trusts only the certificates of ``cafile`` (a path) or
    ``cadata`` (PEM text); a pin (module docstring) skips the host-name check.

    Raises:
        ConfigError: the file cannot be read or holds no certificate.
    """
    if (cafile is None) == (cadata is None):
        raise ConfigError("give the trusted certificate as a file or as PEM text, not both")
    what = f"TLS certificate file {cafile}" if cafile is not None else "TLS certificate"
    if cadata is not None and not certificates_in(cadata):
        raise ConfigError(f"{what}: no PEM certificate found")
    try:
        context = ssl.create_default_context(cafile=cafile, cadata=cadata)
    except ssl.SSLError as exc:  # before OSError, its base class
        raise ConfigError(f"{what}: no PEM certificate found ({exc.reason or exc})") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}") from exc
    if context.cert_store_stats()["x509"] == 0:
        raise ConfigError(f"{what}: no PEM certificate found")
    if is_pin(context):
        context.check_hostname = False
        # The pinned certificate is the trust anchor even when a CA issued it.
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context
