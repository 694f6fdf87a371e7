"""HTTPS: the client verifies the server's certificate against the URL's host."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
from http_helpers import Serve

from proctor._errors import HttpConnectError
from proctor._http import HttpClient, Request, Response

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402


@pytest.fixture
def contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting it) for a cert valid for 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "proctor-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "cert.pem").write_bytes(cert_pem)
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    client = ssl.create_default_context(cadata=cert_pem.decode())
    return server, client


async def hello(request: Request) -> Response:
    return Response.text(f"hello {request.path}")


async def test_https_round_trip(
    serve: Serve, contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    server = await serve(hello, ssl=contexts[0])
    assert server.url.startswith("https://")
    async with HttpClient(ssl_context=contexts[1]) as client:
        for _ in range(2):
            assert await (await client.request("GET", server.url + "/x")).read() == b"hello /x"
        assert len(client._open) == 1


async def test_untrusted_certificate_is_a_connect_error(
    serve: Serve, contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    server = await serve(hello, ssl=contexts[0])
    async with HttpClient() as client:
        with pytest.raises(HttpConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.request("GET", server.url)
