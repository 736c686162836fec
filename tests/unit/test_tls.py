"""`elastic_cache.tls` and the ``[coordinator] tls_*`` settings: what is refused, and
which client contexts pin."""

from __future__ import annotations

import hashlib
import ssl
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from elastic_cache.aws.deploy.certificate import Certificate, check_key_pair, self_signed
from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError
from elastic_cache.tls import client_context, fingerprint, server_context

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def write(tmp_path: Path, cert: Certificate, stem: str = "s") -> tuple[str, str]:
    c, k = tmp_path / f"{stem}.crt", tmp_path / f"{stem}.key"
    c.write_text(cert.cert_pem)
    k.write_text(cert.key_pem)
    return str(c), str(k)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"tls_cert": "/c.pem"}, r"tls_cert is set but tls_key is not"),
        ({"tls_key": "/k.pem"}, r"tls_key is set but tls_cert is not"),
        ({"tls_cert_parameter": "/e/c"}, r"tls_cert_parameter is set but tls_key_parameter"),
        ({"tls_cert": ""}, r"tls_cert must be a file path"),
        ({"tls_key_parameter": "no-slash", "tls_cert_parameter": "/e/c"}, "SSM parameter"),
        (
            {
                "tls_cert": "/c",
                "tls_key": "/k",
                "tls_cert_parameter": "/c",
                "tls_key_parameter": "/k",
            },
            "set one pair",
        ),
    ],
)
def test_tls_settings_come_in_pairs(given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSettings.from_mapping({"coordinator": given})


def test_without_tls_settings_the_port_stays_plain() -> None:
    coord = ClusterSettings.from_mapping({}).coordinator
    assert not coord.tls and coord.host == "127.0.0.1"
    both = ClusterSettings.from_mapping({"coordinator": {"tls_cert": "/c", "tls_key": "/k"}})
    assert both.coordinator.tls


def test_server_context_names_the_unreadable_file(tmp_path: Path) -> None:
    cert, key = write(tmp_path, self_signed("a", now=NOW))
    with pytest.raises(ConfigError, match=r"cannot read \[coordinator\] tls_cert /nope.pem"):
        server_context("/nope.pem", key)
    with pytest.raises(ConfigError, match=r"cannot read \[coordinator\] tls_key /nope.key"):
        server_context(cert, "/nope.key")


def test_server_context_refuses_a_key_of_another_certificate(tmp_path: Path) -> None:
    cert, _ = write(tmp_path, self_signed("a", now=NOW), "a")
    _, other_key = write(tmp_path, self_signed("b", now=NOW), "b")
    with pytest.raises(ConfigError, match="is not the private key of"):
        server_context(cert, other_key)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="expected a PEM certificate chain"):
        server_context(str(garbage), other_key)


def test_server_context_names_a_key_of_another_type_as_not_the_key(tmp_path: Path) -> None:
    """An RSA key given for an EC certificate: OpenSSL says NO_CERTIFICATE_ASSIGNED, not
    KEY_VALUES_MISMATCH; both files are PEM, so the error says the key is not its key
    (found in review: it said "expected a PEM certificate chain")."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    cert, _ = write(tmp_path, self_signed("a", now=NOW), "a")
    rsa_key = tmp_path / "rsa.key"
    rsa_key.write_bytes(
        rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ConfigError, match="is not the private key of"):
        server_context(cert, str(rsa_key))


def test_a_deployment_certificate_is_pinned_without_a_name_check(tmp_path: Path) -> None:
    made = self_signed("ecache-demo", addresses=["198.51.100.23"], now=NOW)
    cert, _ = write(tmp_path, made)
    context = client_context(cafile=cert)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert not context.check_hostname  # the pin is the check (docs/aws.md, "TLS")
    assert context.verify_flags & ssl.VERIFY_X509_PARTIAL_CHAIN
    parsed = x509.load_pem_x509_certificate(made.cert_pem.encode())
    assert not parsed.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["198.51.100.23"]
    assert names.get_values_for_type(x509.DNSName) == ["ecache-demo"]
    assert parsed.not_valid_before_utc < NOW < parsed.not_valid_after_utc


def test_a_ca_certificate_keeps_the_name_check(tmp_path: Path) -> None:
    """A CA's certificate vouches for others: trusting it without checking names would
    accept any certificate it issued, so it is no pin."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(NOW)
        .not_valid_after(datetime(2036, 1, 1, tzinfo=UTC))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "ca.pem"
    path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    assert client_context(cafile=str(path)).check_hostname


def test_client_context_refuses_what_holds_no_certificate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read TLS certificate file /nope"):
        client_context(cafile="/nope")
    empty = tmp_path / "empty.pem"
    empty.write_text("nothing here\n")
    with pytest.raises(ConfigError, match="no PEM certificate"):
        client_context(cafile=str(empty))
    with pytest.raises(ConfigError, match="no PEM certificate"):
        client_context(cadata="nothing")


def test_fingerprint_is_the_sha256_of_the_der_certificate() -> None:
    made = self_signed("a", now=NOW)
    parsed = x509.load_pem_x509_certificate(made.cert_pem.encode())
    expected = parsed.fingerprint(hashes.SHA256()).hex().upper()
    assert fingerprint(made.cert_pem).replace(":", "") == expected
    assert len(fingerprint(made.cert_pem).split(":")) == 32
    assert hashlib.sha256(ssl.PEM_cert_to_DER_cert(made.cert_pem)).hexdigest().upper() == expected


def test_check_key_pair_refuses_a_key_of_another_certificate() -> None:
    a, b = self_signed("a", now=NOW), self_signed("b", now=NOW)
    assert check_key_pair(a.cert_pem, a.key_pem).fingerprint == fingerprint(a.cert_pem)
    with pytest.raises(ConfigError, match="--tls-key is not the private key"):
        check_key_pair(a.cert_pem, b.key_pem)
    with pytest.raises(ConfigError, match="--tls-cert holds no PEM certificate"):
        check_key_pair("x", a.key_pem)
    with pytest.raises(ConfigError, match="--tls-key: not an unencrypted PEM private key"):
        check_key_pair(a.cert_pem, "x")
