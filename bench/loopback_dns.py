"""A small authoritative DNS server on loopback (dnslib), standing in for a headless Service.

``LoopbackDns(zone="ibex.test.")`` answers A queries for names in ``zone`` with the addresses set
by ``set_addresses(name, [...])`` (what the cluster DNS does for a headless Service: one A record
per Ready pod), with a 1 s TTL; any other type in the zone gets an empty answer (NOERROR), names
outside it NXDOMAIN. It serves UDP and TCP on the same port, in daemon threads, until ``stop()``.
A gRPC client reaches it as the authority of its target: ``dns://127.0.0.1:PORT/ibex.test:9092``.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable

from dnslib import QTYPE, RCODE, RR, A, DNSLabel, DNSRecord
from dnslib.server import BaseResolver, DNSLogger, DNSServer

TTL_S = 1


class _ZoneResolver(BaseResolver):
    def __init__(self, zone: str) -> None:
        self.zone = DNSLabel(zone)
        self.records: dict[DNSLabel, tuple[str, ...]] = {}
        self.queries = 0
        self.lock = threading.Lock()

    def resolve(self, request: DNSRecord, handler: object) -> DNSRecord:
        reply = request.reply()
        question = request.q
        with self.lock:
            self.queries += 1
            addresses = self.records.get(question.qname)
        if not question.qname.matchSuffix(self.zone):
            reply.header.rcode = RCODE.NXDOMAIN
        elif question.qtype in (QTYPE.A, QTYPE.ANY) and addresses:
            for address in addresses:
                reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(address), ttl=TTL_S))
        return reply


class _QuietLogger(DNSLogger):
    def __init__(self) -> None:
        super().__init__(log="-request,-reply,-truncated,-error,-recv,-send,-data", prefix=False)


class LoopbackDns:
    """Authoritative for one zone on 127.0.0.1 (UDP + TCP, one port)."""

    def __init__(self, zone: str = "ibex.test.", host: str = "127.0.0.1", port: int = 0) -> None:
        self._resolver = _ZoneResolver(zone)
        self.host = host
        self.port = port or _free_udp_and_tcp_port(host)
        logger = _QuietLogger()
        self._servers = [DNSServer(self._resolver, address=host, port=self.port, tcp=tcp, logger=logger)
                         for tcp in (False, True)]
        for server in self._servers:
            server.start_thread()

    def set_addresses(self, name: str, addresses: Iterable[str]) -> None:
        with self._resolver.lock:
            self._resolver.records[DNSLabel(name)] = tuple(addresses)

    def addresses(self, name: str) -> tuple[str, ...]:
        with self._resolver.lock:
            return self._resolver.records.get(DNSLabel(name), ())

    @property
    def queries(self) -> int:
        with self._resolver.lock:
            return self._resolver.queries

    def target(self, name: str, port: int) -> str:
        """The gRPC target that asks this server: ``dns://HOST:PORT/NAME:PORT``."""
        return f"dns://{self.host}:{self.port}/{name.rstrip('.')}:{port}"

    def stop(self) -> None:
        for server in self._servers:
            server.stop()
            server.server.server_close()


def _free_udp_and_tcp_port(host: str) -> int:
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind((host, 0))
            port = tcp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind((host, port))
                except OSError:
                    continue
            return port
    raise RuntimeError("no port free for both UDP and TCP on loopback")
