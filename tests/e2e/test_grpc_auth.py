"""Caller authentication over real grpc.aio on 127.0.0.1: real TLS, real certificates, real signatures.

The servicer is a minimal ContextAssemblyServiceServicer that authenticates and authorizes each call
as the production servicer does (a refusal sets the call's status, never aborting) and records
whether its "use case" was reached.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from contracts.ibex.auth.v1 import principal_context_pb2 as auth_pb
from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.auth.bind_guard import InsecureBindError, bind_guard
from tests.support.failure_tally import FailureTally
from entrypoints.auth.binding import Tenant
from entrypoints.auth.errors import AuthError
from entrypoints.auth.grpc_auth import GrpcAuthenticator, server_credentials, set_auth_status
from entrypoints.auth.keys import KeyRing
from entrypoints.auth.proof import PROOF_METADATA_KEY, sign_proof
from entrypoints.settings import Settings
from tests.support.principal_proofs import (
    AGENT,
    ED_SEED,
    ORG,
    OTHER_AGENT,
    OTHER_ED_SEED,
    OTHER_ORG,
    context,
    ed_entry,
    ed_proof,
    hmac_entry,
    hmac_proof,
    reproof,
    write_key_file,
)
from tests.support.tls_certs import Issued, Pki, make_pki

pytestmark = pytest.mark.e2e
Metadata = tuple[tuple[str, bytes], ...]


async def admit(authenticator: GrpcAuthenticator, context: grpc.aio.ServicerContext, *, org_id: str,
                agent_id: str | None = None) -> Tenant | None:
    """Authenticate and authorize; on AuthError set the call's status (``set_auth_status``) and return None."""
    try:
        principal = authenticator.authenticate(context.invocation_metadata())
        return authenticator.authorize(principal, org_id=org_id, agent_id=agent_id)
    except AuthError as exc:
        set_auth_status(context, exc)
        return None


class RecordingServicer(pb_grpc.ContextAssemblyServiceServicer):
    """Authenticates and binds every call, then records the ids its use case would have seen."""

    def __init__(self, authenticator: GrpcAuthenticator) -> None:
        self.authenticator = authenticator
        self.reached: list[tuple[str, str, str]] = []

    async def AssembleContext(self, request, context):
        tenant = await admit(self.authenticator, context, org_id=request.org_id, agent_id=request.agent_id)
        if tenant is None:
            return pb.AssembleContextResponse()
        self.reached.append(("AssembleContext", tenant.org_id, tenant.agent_id))
        return pb.AssembleContextResponse(request_id=request.request_id)

    async def SearchMemories(self, request, context):
        tenant = await admit(self.authenticator, context, org_id=request.org_id, agent_id=request.agent_id)
        if tenant is None:
            return pb.SearchMemoriesResponse()
        self.reached.append(("SearchMemories", tenant.org_id, tenant.agent_id))
        return pb.SearchMemoriesResponse()

    async def RecordMemoryFeedback(self, request, context):
        tenant = await admit(self.authenticator, context, org_id=request.org_id)
        if tenant is None:
            return pb.RecordMemoryFeedbackResponse()
        self.reached.append(("RecordMemoryFeedback", tenant.org_id, tenant.agent_id))
        return pb.RecordMemoryFeedbackResponse(success=True)


@asynccontextmanager
async def serving(servicer: RecordingServicer, credentials: grpc.ServerCredentials | None,
                  addr: str = "127.0.0.1:0") -> AsyncIterator[int]:
    server = grpc.aio.server()
    pb_grpc.add_ContextAssemblyServiceServicer_to_server(servicer, server)
    port = server.add_secure_port(addr, credentials) if credentials else server.add_insecure_port(addr)
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


def secure_channel(port: int, pki: Pki, client: Issued | None) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.cert_pem,
        private_key=client.key_pem if client else None,
        certificate_chain=client.cert_pem if client else None,
    )
    return grpc.aio.secure_channel(f"localhost:{port}", credentials)


def now() -> datetime:
    return datetime.now(UTC)


def assemble_request(org_id: str = ORG, agent_id: str = AGENT) -> pb.AssembleContextRequest:
    return pb.AssembleContextRequest(org_id=org_id, agent_id=agent_id, model="gpt-4o", request_id="r-1")


async def assemble(channel: grpc.aio.Channel, metadata: Metadata = (), **ids: str) -> pb.AssembleContextResponse:
    stub = pb_grpc.ContextAssemblyServiceStub(channel)
    return await stub.AssembleContext(assemble_request(**ids), metadata=metadata, timeout=10)


def proof_metadata(raw: bytes) -> Metadata:
    return ((PROOF_METADATA_KEY, raw),)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def key_path(tmp_path: Path) -> Path:
    return write_key_file(tmp_path / "principal-keys.json", ed_entry("ed-1"), hmac_entry("hmac-1"))


@pytest.fixture
def tally() -> FailureTally:
    return FailureTally()


@pytest.fixture
def servicer(key_path: Path, tally: FailureTally) -> RecordingServicer:
    return RecordingServicer(GrpcAuthenticator(KeyRing.from_path(key_path), on_failure=tally))


@pytest.fixture
async def mtls_channel(pki: Pki, servicer: RecordingServicer) -> AsyncIterator[grpc.aio.Channel]:
    """Both modes on: mTLS (client CA) and signed principals; the client presents a good certificate."""
    credentials = server_credentials(str(pki.server.cert_path), str(pki.server.key_path), str(pki.ca.cert_path))
    async with serving(servicer, credentials) as port, secure_channel(port, pki, pki.client) as channel:
        yield channel


def _tampered() -> bytes:
    proof = auth_pb.PrincipalContextProof.FromString(ed_proof(context(issued_at=now())))
    proof.context.agent_id = OTHER_AGENT
    return proof.SerializeToString()


REJECTIONS: dict[str, tuple[Callable[[], Metadata], grpc.StatusCode, str]] = {
    "missing-metadata": (lambda: (), grpc.StatusCode.UNAUTHENTICATED, "missing_proof"),
    "duplicate-metadata": (lambda: proof_metadata(ed_proof(context(issued_at=now()))) * 2,
                           grpc.StatusCode.UNAUTHENTICATED, "duplicate_proof"),
    "malformed": (lambda: proof_metadata(b"\xff\x00garbage"), grpc.StatusCode.UNAUTHENTICATED, "malformed_proof"),
    "unsigned": (lambda: proof_metadata(reproof(ed_proof(context(issued_at=now())), signature=b"")),
                 grpc.StatusCode.UNAUTHENTICATED, "unsigned"),
    "expired": (lambda: proof_metadata(ed_proof(context(issued_at=now() - timedelta(minutes=10)))),
                grpc.StatusCode.UNAUTHENTICATED, "expired"),
    "not-yet-valid": (lambda: proof_metadata(hmac_proof(context(issued_at=now() + timedelta(minutes=2)))),
                      grpc.StatusCode.UNAUTHENTICATED, "not_yet_valid"),
    "unknown-key-id": (lambda: proof_metadata(ed_proof(context(issued_at=now()), key_id="ed-9")),
                       grpc.StatusCode.UNAUTHENTICATED, "unknown_key"),
    "bad-signature": (lambda: proof_metadata(ed_proof(context(issued_at=now()), seed=OTHER_ED_SEED)),
                      grpc.StatusCode.UNAUTHENTICATED, "bad_signature"),
    "tampered-context": (lambda: proof_metadata(_tampered()), grpc.StatusCode.UNAUTHENTICATED, "bad_signature"),
    "wrong-algorithm": (lambda: proof_metadata(sign_proof(context(issued_at=now()), "ed-1", "hmac-sha256", ED_SEED)),
                        grpc.StatusCode.UNAUTHENTICATED, "algorithm_mismatch"),
    "org-mismatch": (lambda: proof_metadata(ed_proof(context(org_id=OTHER_ORG, issued_at=now()))),
                     grpc.StatusCode.PERMISSION_DENIED, "org_mismatch"),
    "agent-mismatch": (lambda: proof_metadata(hmac_proof(context(agent_id=OTHER_AGENT, issued_at=now()))),
                       grpc.StatusCode.PERMISSION_DENIED, "agent_mismatch"),
}


@pytest.mark.parametrize("case", list(REJECTIONS))
async def test_rejected_proofs_get_the_exact_status_and_never_reach_the_use_case(
        case: str, mtls_channel: grpc.aio.Channel, servicer: RecordingServicer, tally: FailureTally) -> None:
    metadata, code, reason = REJECTIONS[case]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await assemble(mtls_channel, metadata())
    assert caught.value.code() == code
    assert caught.value.details().startswith(f"{reason}: ")
    assert servicer.reached == []
    assert tally.counts() == {reason: 1}


@pytest.mark.parametrize("mint", [ed_proof, hmac_proof], ids=["ed25519", "hmac"])
async def test_valid_proof_reaches_the_use_case_with_the_principals_ids(
        mint, mtls_channel: grpc.aio.Channel, servicer: RecordingServicer, tally: FailureTally) -> None:
    response = await assemble(mtls_channel, proof_metadata(mint(context(issued_at=now()))),
                              org_id=ORG.upper(), agent_id=AGENT.upper())
    assert response.request_id == "r-1"
    assert servicer.reached == [("AssembleContext", ORG, AGENT)]
    assert tally.counts() == {}


async def test_every_rpc_is_authenticated(mtls_channel: grpc.aio.Channel, servicer: RecordingServicer) -> None:
    stub = pb_grpc.ContextAssemblyServiceStub(mtls_channel)
    metadata = proof_metadata(ed_proof(context(issued_at=now())))
    await stub.SearchMemories(pb.SearchMemoriesRequest(org_id=ORG, agent_id=AGENT), metadata=metadata, timeout=10)
    await stub.RecordMemoryFeedback(pb.RecordMemoryFeedbackRequest(org_id=ORG), metadata=metadata, timeout=10)
    for call in (stub.SearchMemories(pb.SearchMemoriesRequest(org_id=ORG, agent_id=AGENT), timeout=10),
                 stub.RecordMemoryFeedback(pb.RecordMemoryFeedbackRequest(org_id=ORG), timeout=10)):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert servicer.reached == [("SearchMemories", ORG, AGENT), ("RecordMemoryFeedback", ORG, AGENT)]


async def test_feedback_for_another_org_is_permission_denied(mtls_channel: grpc.aio.Channel,
                                                             servicer: RecordingServicer) -> None:
    stub = pb_grpc.ContextAssemblyServiceStub(mtls_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.RecordMemoryFeedback(pb.RecordMemoryFeedbackRequest(org_id=OTHER_ORG),
                                        metadata=proof_metadata(ed_proof(context(issued_at=now()))), timeout=10)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert servicer.reached == []


async def test_org_scoped_principal_may_give_feedback_but_not_assemble(mtls_channel: grpc.aio.Channel,
                                                                       servicer: RecordingServicer) -> None:
    metadata = proof_metadata(ed_proof(context(agent_id="", issued_at=now())))
    stub = pb_grpc.ContextAssemblyServiceStub(mtls_channel)
    await stub.RecordMemoryFeedback(pb.RecordMemoryFeedbackRequest(org_id=ORG), metadata=metadata, timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await assemble(mtls_channel, metadata)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert caught.value.details().startswith("agent_mismatch: ")
    assert servicer.reached == [("RecordMemoryFeedback", ORG, "")]


@pytest.fixture
async def mtls_only_port(pki: Pki) -> AsyncIterator[tuple[int, RecordingServicer]]:
    """mTLS without signed principals."""
    servicer = RecordingServicer(GrpcAuthenticator(None))
    credentials = server_credentials(str(pki.server.cert_path), str(pki.server.key_path), str(pki.ca.cert_path))
    async with serving(servicer, credentials) as port:
        yield port, servicer


async def test_mtls_accepts_a_client_certificate_from_the_ca(pki: Pki, mtls_only_port) -> None:
    port, servicer = mtls_only_port
    async with secure_channel(port, pki, pki.client) as channel:
        await assemble(channel)
    assert servicer.reached == [("AssembleContext", ORG, AGENT)]


@pytest.mark.parametrize("client", ["foreign-ca", "no-certificate"])
async def test_mtls_rejects_other_clients_before_any_handler(pki: Pki, mtls_only_port, client: str) -> None:
    port, servicer = mtls_only_port
    async with secure_channel(port, pki, pki.foreign_client if client == "foreign-ca" else None) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await assemble(channel)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert servicer.reached == []


async def test_server_tls_without_client_ca_needs_no_client_certificate(pki: Pki) -> None:
    servicer = RecordingServicer(GrpcAuthenticator(None))
    credentials = server_credentials(str(pki.server.cert_path), str(pki.server.key_path))
    async with serving(servicer, credentials) as port, secure_channel(port, pki, None) as channel:
        await assemble(channel)
    assert servicer.reached == [("AssembleContext", ORG, AGENT)]


async def test_keys_reload_under_load_without_failing_a_call(pki: Pki, tmp_path: Path) -> None:
    path = write_key_file(tmp_path / "keys.json", hmac_entry("stable"), ed_entry("old"))
    ring, tally = KeyRing.from_path(path), FailureTally()
    servicer = RecordingServicer(GrpcAuthenticator(ring, on_failure=tally))
    stop, outcomes = threading.Event(), []

    def rotate() -> None:
        while not stop.is_set():
            newest = ed_entry("new") if len(outcomes) % 2 else ed_entry("old")
            write_key_file(path, hmac_entry("stable"), newest)
            outcomes.append(ring.reload().loaded)

    stable = proof_metadata(hmac_proof(context(issued_at=now()), key_id="stable"))
    async with serving(servicer, None) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        worker = threading.Thread(target=rotate)
        worker.start()
        try:
            for _ in range(8):
                await asyncio.gather(*(assemble(channel, stable) for _ in range(50)))
        finally:
            stop.set()
            worker.join()
        assert len(servicer.reached) == 400 and tally.counts() == {}
        assert len(outcomes) >= 2 and all(outcomes)
        await _assert_rotation_to_new_key(channel, path, ring)


async def _assert_rotation_to_new_key(channel: grpc.aio.Channel, path: Path, ring: KeyRing) -> None:
    write_key_file(path, hmac_entry("stable"), ed_entry("new"))
    assert ring.reload().loaded
    await assemble(channel, proof_metadata(ed_proof(context(issued_at=now()), key_id="new")))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await assemble(channel, proof_metadata(ed_proof(context(issued_at=now()), key_id="old")))
    assert caught.value.details().startswith("unknown_key: ")
    path.write_text("{not json", encoding="utf-8")
    outcome = ring.reload()
    assert not outcome.loaded and "not valid JSON" in outcome.error
    await assemble(channel, proof_metadata(ed_proof(context(issued_at=now()), key_id="new")))


def _start_guarded(addr: str, settings: Settings, servicer: RecordingServicer):
    """What the server's start-up must do: the guard first, then bind."""
    warning = bind_guard(addr, settings.has_auth, settings.allow_insecure_bind)
    return warning, serving(servicer, None, addr)


async def test_non_loopback_bind_without_auth_refuses_to_start() -> None:
    with pytest.raises(InsecureBindError, match="refusing to bind 0.0.0.0:0"):
        _start_guarded("0.0.0.0:0", Settings.from_env({}), RecordingServicer(GrpcAuthenticator(None)))


async def test_insecure_override_starts_with_a_warning() -> None:
    servicer = RecordingServicer(GrpcAuthenticator(None))
    settings = Settings.from_env({"IBEX_CONTEXT_ALLOW_INSECURE_BIND": "true"})
    warning, server = _start_guarded("0.0.0.0:0", settings, servicer)
    assert warning and warning.startswith("insecure bind: 0.0.0.0:0")
    async with server as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await assemble(channel)
    assert servicer.reached == [("AssembleContext", ORG, AGENT)]
