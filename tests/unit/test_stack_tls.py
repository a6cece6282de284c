"""The local stack's CA and certificates (infra.security): made once, private, and what
Kafka's PEM stores and the clients' hostname checks need."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cronstream.infra import security
from cronstream.infra.security import ensure_secret, ensure_tls
from cronstream.runtime.settings import Settings


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


def test_a_broker_certificate_without_the_hosts_addresses_is_issued_again(tmp_path: Path) -> None:
    """The nodes on hosts of their own (CRONSTREAM_NETNS) listen on 10.89.0.x: a stack
    whose certificate was made before names only the loopback, and the clients' hostname
    check would refuse every node; the next start issues it again, with them."""
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    tls = ensure_tls(settings)
    ca, ca_key = security._ca(tls)
    old = x509.load_pem_x509_certificates((tls / "server-cert.pem").read_bytes())[0]
    loopback_only = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(ca.subject)
        .public_key(old.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(old.not_valid_before_utc)
        .not_valid_after(old.not_valid_after_utc)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = (tls / "server-key.pem").read_bytes()
    pem = loopback_only.public_bytes(serialization.Encoding.PEM)
    (tls / "server.pem").write_bytes(key + pem + (tls / "ca.pem").read_bytes())
    ensure_tls(settings)
    broker = _certs(tls / "server.pem")[0]
    sans = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    named = {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    netns = Settings.from_env({"CRONSTREAM_NODES": "3", "CRONSTREAM_NETNS": "1"})
    brokers = {server.split(":")[0] for server in netns.bootstrap_servers.split(",")}
    assert brokers == {"10.89.0.11", "10.89.0.12", "10.89.0.13"}
    assert set(netns.cassandra_hosts) == {"10.89.0.21", "10.89.0.22", "10.89.0.23"}
    assert {"127.0.0.1", "10.89.0.1"} | brokers | set(netns.cassandra_hosts) <= named
