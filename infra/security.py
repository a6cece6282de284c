"""The local stack's TLS material and credentials, made at its first start.

Everything lives under ``<home>/data/security`` (``runtime.kafka.security`` says where
clients find it); directories are 0700, keys and secrets 0600, and nothing here is
ever printed::

    tls/ca.pem              the local CA (clients trust it)
    tls/ca-key.pem          its key: kept to re-issue the certificates below
    tls/server.pem          the broker's key + certificate + CA (a PEM keystore);
                            CN=cronstream-broker, for 127.0.0.1-3, ::1 and localhost
                            (127.0.0.2 and .3: the 3-node stack's Cassandra nodes),
                            and the addresses of the hosts of o.NETNS
                            (infra.hosts: re-issued when one is missing)
    tls/server-key.pem      the same key and certificate apart (Cassandra, the registry)
    tls/server-cert.pem
    tls/admin.pem           key + certificate of CN=cronstream-admin: the super user the
                            bootstrap acts as, on the broker's mTLS admin listener
    credentials/<user>.secret   one random password per Kafka user

No keytool and no openssl: Kafka reads PEM key and trust stores directly.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cronstream.runtime.credentials import security_dir, stack_ca, tls_dir
from cronstream.runtime.kafka.security import (
    ADMIN_PRINCIPAL,
    BROKER_PRINCIPAL,
    admin_certificate,
    client_certificate,
    kafka_secret_path,
)
from cronstream.runtime.settings import (
    Settings,
    cassandra_node_host,
    kafka_node_host,
    registry_host,
)

RENEW_WITHIN = dt.timedelta(days=30)  # re-issue a leaf certificate this close to expiry


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by its owner only (created 0600, never wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def private_dir(path: Path) -> Path:
    """``path``, made if missing (its parents as usual), 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _pkcs8(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _new_ca(tls: Path) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    now = dt.datetime.now(dt.UTC)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = _name("cronstream local CA")
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    write_private(tls / "ca-key.pem", _pkcs8(key))
    (tls / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


# Every address a node of the local stack listens on, on the loopback (three nodes, ::1)
# and on the hosts of o.NETNS (each node's, and the machine's: the registry's).
_NODES = [
    node_host(n, netns)
    for node_host in (kafka_node_host, cassandra_node_host)
    for netns in (False, True)
    for n in (1, 2, 3)
]
_ADDRESSES = tuple(map(ipaddress.ip_address, dict.fromkeys([*_NODES, "::1", registry_host(True)])))


def _issue(
    ca: x509.Certificate, ca_key: rsa.RSAPrivateKey, common_name: str, *, server: bool
) -> tuple[bytes, bytes]:
    """(PKCS#8 key, certificate) PEMs of a leaf signed by the CA: a server certificate
    (also a client one: the broker connects to its own controller) or a client one."""
    now = dt.datetime.now(dt.UTC)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    uses = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=825))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if server:
        uses.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        sans: list[x509.GeneralName] = [x509.DNSName("localhost"), *map(x509.IPAddress, _ADDRESSES)]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.add_extension(x509.ExtendedKeyUsage(uses), critical=False).sign(
        ca_key, hashes.SHA256()
    )
    return _pkcs8(key), cert.public_bytes(serialization.Encoding.PEM)


def _fresh(path: Path, *, server: bool = False) -> bool:
    """Whether the certificate in ``path`` exists, is not close to expiry and (a
    ``server`` one) names every address a node of the stack may have."""
    if not path.exists():
        return False
    data = path.read_bytes()
    begin = data.find(b"-----BEGIN CERTIFICATE-----")
    if begin < 0:
        return False
    cert = x509.load_pem_x509_certificate(data[begin:])
    if server:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if not set(_ADDRESSES) <= set(sans.get_values_for_type(x509.IPAddress)):
            return False
    return cert.not_valid_after_utc - dt.datetime.now(dt.UTC) > RENEW_WITHIN


def _ca(tls: Path) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    """The local CA in ``tls``, made when missing."""
    if not ((tls / "ca.pem").exists() and (tls / "ca-key.pem").exists()):
        return _new_ca(tls)
    ca = x509.load_pem_x509_certificate((tls / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((tls / "ca-key.pem").read_bytes(), None)
    assert isinstance(key, rsa.RSAPrivateKey), "the local CA key is RSA"
    return ca, key


def ensure_tls(settings: Settings) -> Path:
    """The CA and the broker's and admin's certificates, made once (leaves re-issued
    within RENEW_WITHIN of expiry). Returns the directory."""
    private_dir(security_dir(settings))
    tls = private_dir(tls_dir(settings))
    ca, ca_key = _ca(tls)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    if not _fresh(tls / "server.pem", server=True):
        key, cert = _issue(ca, ca_key, BROKER_PRINCIPAL, server=True)
        write_private(tls / "server-key.pem", key)
        write_private(tls / "server-cert.pem", cert)
        write_private(tls / "server.pem", key + cert + ca_pem)
    admin = admin_certificate(settings)
    if not _fresh(admin):
        key, cert = _issue(ca, ca_key, ADMIN_PRINCIPAL, server=False)
        write_private(admin, key + cert)
    return tls


def ensure_client_certificate(settings: Settings, user: str) -> Path:
    """A client certificate of Kafka user ``user`` (CN=user: the broker's principal
    for it on the mTLS listener), made once; returns the PEM (key + certificate)."""
    path = client_certificate(settings, user)
    if not _fresh(path):
        key, cert = _issue(*_ca(ensure_tls(settings)), user, server=False)
        write_private(path, key + cert)
    return path


def ensure_secret_file(settings: Settings, path: Path) -> str:
    """The password in ``path`` (one of the stack's credentials files), made at first use."""
    private_dir(security_dir(settings))
    private_dir(path.parent)
    if not path.exists():
        write_private(path, secrets.token_urlsafe(32).encode())
    return path.read_text().strip()


def ensure_secret(settings: Settings, user: str) -> str:
    """The password of Kafka user ``user`` in the stack's credentials, made at first use."""
    return ensure_secret_file(settings, kafka_secret_path(settings, user))


def admin_java_properties(settings: Settings) -> str:
    """A Java client config for the super user on the mTLS listener (0600): Kafka's
    own tools (``infra.services.Kafka.admin_tool``)."""
    path = security_dir(settings) / "kafka-admin-java.properties"
    ca = settings.kafka_ca or stack_ca(settings)
    lines = [
        "security.protocol=SSL",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={admin_certificate(settings)}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={ca}",
    ]
    write_private(path, ("\n".join(lines) + "\n").encode())
    return str(path)
