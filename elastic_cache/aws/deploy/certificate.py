"""The coordinator's TLS certificate: made by deploy (self-signed) or given by the user,
kept in SSM Parameter Store next to the token, pinned by the clients.

The private key is a SecureString parameter (``/ecache/NAME/tls-key``), the certificate
a plain String (``/ecache/NAME/tls-cert``: it is public); the coordinator reads both at
start with its role, as it reads the token, so neither is in user data nor in S3, and a
replacement coordinator serves the same certificate. Python's ``ssl`` module cannot
make a certificate, so this module uses ``cryptography``. Why a self-signed certificate
pinned by the clients rather than a CA's: docs/aws.md, "TLS".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from elastic_cache.aws.deploy.created import uninterrupted
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.ec2 import CLUSTER_TAG
from elastic_cache.aws.errors import AwsError, aws_call
from elastic_cache.errors import ConfigError
from elastic_cache.tls import certificates_in, fingerprint

if TYPE_CHECKING:
    from elastic_cache.aws.deploy.created import Created

__all__ = [
    "VALIDITY_DAYS",
    "Certificate",
    "check_key_pair",
    "ensure_certificate",
    "read_certificate",
    "self_signed",
]

#: How long a certificate deploy makes is valid. A pinned certificate still expires
#: (the clients check its dates), so this is long; to replace it, see docs/aws.md.
VALIDITY_DAYS = 3650


@dataclass(frozen=True, slots=True, kw_only=True)
class Certificate:
    """A certificate chain and its private key, PEM text each.

    Attributes:
        cert_pem: the chain, the server's certificate first.
        key_pem: its unencrypted private key.
    """

    cert_pem: str
    key_pem: str = field(repr=False)

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the server's certificate (`elastic_cache.tls.fingerprint`)."""
        return fingerprint(self.cert_pem)


def self_signed(common_name: str, *, addresses: Sequence[str] = (), now: datetime) -> Certificate:
    """A new self-signed certificate for a deployment: an ECDSA P-256 key, the subject
    ``common_name`` (also its one DNS name), and ``addresses`` as IP names, so that a
    client that checks names (curl) accepts it at those addresses. Not a CA
    certificate: it can sign nothing, and `elastic_cache.tls` treats it as a pin.

    Args:
        common_name: the certificate's name (``ecache-NAME``).
        addresses: IP addresses the server is reached at, if known.
        now: the start of its validity (UTC; passed in, as time always is).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    alt: list[x509.GeneralName] = [x509.DNSName(common_name)]
    alt += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # An hour back: a client whose clock is a little behind still accepts it.
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Certificate(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode("ascii"),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode("ascii"),
    )


def check_key_pair(cert_pem: str, key_pem: str) -> Certificate:
    """The user's ``--tls-cert`` and ``--tls-key``, checked: a PEM chain, an unencrypted
    PEM key, and the key is the first certificate's.

    Raises:
        ConfigError: any of these is not so (the message names the flag).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    blocks = certificates_in(cert_pem)
    if not blocks:
        raise ConfigError("--tls-cert holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        cert = x509.load_pem_x509_certificate(blocks[0].encode("ascii"))
    except ValueError as exc:
        raise ConfigError(f"--tls-cert: not a valid certificate: {exc}") from exc
    try:
        key = serialization.load_pem_private_key(key_pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise ConfigError(
            f"--tls-key: not an unencrypted PEM private key ({exc}); decrypt it first"
        ) from exc
    fmt = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    if key.public_key().public_bytes(enc, fmt) != cert.public_key().public_bytes(enc, fmt):
        raise ConfigError("--tls-key is not the private key of the first certificate of --tls-cert")
    return Certificate(cert_pem=cert_pem, key_pem=key_pem)


def read_certificate(ssm: Any, names: ClusterNames) -> str | None:
    """The cluster's certificate (PEM) from SSM, or None when it has none."""
    try:
        reply = aws_call(
            ssm, "GetParameter", doing="reading the TLS certificate", Name=names.tls_cert_parameter
        )
    except AwsError as exc:
        if exc.aws_code == "ParameterNotFound":
            return None
        raise
    return str(reply["Parameter"]["Value"])


def _put(
    ssm: Any,
    name: str,
    value: str,
    *,
    secure: bool,
    description: str | None = None,
    tags: list[dict[str, str]] | None = None,
) -> None:
    """PutParameter: a new parameter with its description and tags, or (without them)
    a replacement of an existing one (SSM takes no tags with ``Overwrite``)."""
    extra: dict[str, Any] = (
        {"Overwrite": True} if tags is None else {"Description": description, "Tags": tags}
    )
    aws_call(
        ssm,
        "PutParameter",
        doing=f"storing {name}",
        Name=name,
        Value=value,
        Type="SecureString" if secure else "String",
        # A chain or an RSA key may pass the standard tier's 4 KB; the advanced tier
        # is used (and billed, $0.05 a month) only then.
        Tier="Intelligent-Tiering",
        **extra,
    )


def ensure_certificate(
    ssm: Any,
    names: ClusterNames,
    *,
    given: Certificate | None,
    addresses: Sequence[str],
    now: Callable[[], datetime],
    tags: Sequence[dict[str, str]] = (),
    created: Created | None = None,
) -> tuple[str, str]:
    """The cluster's certificate, kept in SSM: found, or stored (``given``, else a new
    `self_signed` one naming ``addresses``). What this call stores is added to
    ``created``.

    Returns:
        The certificate (PEM) and what happened: ``"kept"``, ``"given"`` or ``"new"``.

    Raises:
        ConfigError: ``given`` differs from the certificate the cluster has (a running
            coordinator would keep serving the old one; destroy and deploy again).
        AwsError: SSM refused a call.
    """
    found = read_certificate(ssm, names)
    if found is not None:
        if given is not None and fingerprint(given.cert_pem) != fingerprint(found):
            raise ConfigError(
                f"cluster {names.cluster} has another TLS certificate ({names.tls_cert_parameter}, "
                f"SHA-256 {fingerprint(found)}) than --tls-cert ({given.fingerprint}); the "
                "coordinator reads it only at start. Destroy and deploy again to change it"
            )
        return found, "kept"
    cert = given or self_signed(f"ecache-{names.cluster}", addresses=addresses, now=now())
    all_tags = [{"Key": CLUSTER_TAG, "Value": names.cluster}, *tags]
    # The key first: a certificate without its key would read as "kept" next time.
    for name, value, secure, what in (
        (names.tls_key_parameter, cert.key_pem, True, "TLS private key"),
        (names.tls_cert_parameter, cert.cert_pem, False, "TLS certificate"),
    ):
        with uninterrupted():
            try:
                _put(
                    ssm,
                    name,
                    value,
                    secure=secure,
                    description=f"elastic-cache {names.cluster}: {what}",
                    tags=all_tags,
                )
            except AwsError as exc:
                if exc.aws_code != "ParameterAlreadyExists":
                    raise
                left = True
            else:
                left = False
                if created is not None:
                    created.parameters.append(name)
        if left:
            # A key left by a run that stopped before the certificate: replace it.
            _put(ssm, name, value, secure=secure)
    return cert.cert_pem, "given" if given is not None else "new"
