"""The local stack's CA and certificates (infra.security): made once, private, and what
Kafka's PEM stores and the clients' hostname checks need."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from infra.security import ensure_secret, ensure_tls
from runtime.settings import Settings


def _certs(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def _cn(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def test_the_stack_gets_a_ca_a_broker_and_an_admin_certificate_once(tmp_path: Path) -> None:
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    tls = ensure_tls(settings)
    (ca,) = _certs(tls / "ca.pem")
    broker, chain_ca = _certs(tls / "server.pem")  # key, then leaf and CA: a PEM keystore
    assert (tls / "server.pem").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert chain_ca == ca
    (admin,) = _certs(tls / "admin.pem")
    assert (_cn(broker), _cn(admin)) == ("cronstream-broker", "cronstream-admin")
    for leaf in (broker, admin):
        leaf.verify_directly_issued_by(ca)
    sans = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    uses = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(uses) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    for private in ("ca-key.pem", "server.pem", "server-key.pem", "admin.pem"):
        assert (tls / private).stat().st_mode & 0o777 == 0o600, private
    assert tls.stat().st_mode & 0o777 == 0o700
    assert tls.parent.stat().st_mode & 0o777 == 0o700
    before = {p.name: p.read_bytes() for p in tls.iterdir()}
    ensure_tls(settings)
    assert {p.name: p.read_bytes() for p in tls.iterdir()} == before  # nothing re-issued


def test_a_users_secret_is_made_once_and_private(tmp_path: Path) -> None:
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    first = ensure_secret(settings, "cronstream-app")
    assert len(first) >= 40
    assert ensure_secret(settings, "cronstream-app") == first
    assert ensure_secret(settings, "someone-else") != first
    path = tmp_path / "data" / "security" / "credentials" / "cronstream-app.secret"
    assert path.stat().st_mode & 0o777 == 0o600
