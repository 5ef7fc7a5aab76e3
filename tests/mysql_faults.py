"""A MySQL-protocol proxy that loses the answer of chosen COMMITs.

``CommitAnswerDropper`` forwards 127.0.0.1:<port> to MariaDB and reads the
client's commands. Armed (``drop``), the next COMMIT of a transaction that ran a
statement containing a given text reaches the server and is carried out there,
but its answer never reaches the client: the proxy waits for the server's answer,
throws it away and cuts the connection. The client sees a lost connection
(MySQL error 2013) for a transaction that was committed — what a network fault,
a proxy or a server's crash right after the commit does, made deterministic.
"""
from __future__ import annotations

import socket
import struct
import threading

from tests import services

_COM_QUERY = 0x03


class _Link:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.touched = False            # the open transaction ran a matching statement
        self.drop_answer = threading.Event()

    def cut(self) -> None:
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class CommitAnswerDropper(services.TcpProxy):
    """``services.TcpProxy`` that can lose COMMIT answers (``drop``)."""

    def __init__(self, upstream: tuple[str, int] = ("127.0.0.1", 3306)) -> None:
        super().__init__(upstream)
        self._arm_lock = threading.Lock()
        self._armed = 0
        self._pattern = b""
        self.dropped = 0                # COMMIT answers lost so far
        self.commits_seen = 0

    def url(self, database_url: str) -> str:
        """``database_url`` (of the shared server) through this proxy."""
        return database_url.replace("127.0.0.1:3306", f"127.0.0.1:{self.port}")

    def drop(self, statement: str, times: int = 1) -> None:
        """Lose the answers of the next ``times`` COMMITs of transactions that
        ran a statement containing ``statement`` (case-insensitive)."""
        with self._arm_lock:
            self._pattern = statement.upper().encode()
            self._armed = times

    def disarm(self) -> int:
        """Stop losing answers; how many armed drops were left unused."""
        with self._arm_lock:
            left, self._armed = self._armed, 0
        return left

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open += [client, server]
            link = _Link(client, server)
            threading.Thread(target=self._from_client, args=(link,), daemon=True).start()
            threading.Thread(target=self._from_server, args=(link,), daemon=True).start()

    def _from_client(self, link: _Link) -> None:
        buf = b""
        try:
            while data := link.client.recv(65536):
                buf += data
                while len(buf) >= 4:
                    size = struct.unpack("<I", buf[:3] + b"\0")[0]
                    if len(buf) < 4 + size:
                        break
                    packet, buf = buf[:4 + size], buf[4 + size:]
                    self._look(link, packet)
                    link.server.sendall(packet)
        except OSError:
            pass
        finally:
            link.cut()

    def _look(self, link: _Link, packet: bytes) -> None:
        """Note what the client asks; arm the link when this is a COMMIT to lose."""
        payload = packet[4:]
        if packet[3] != 0 or not payload or payload[0] != _COM_QUERY:
            return
        sql = payload[1:].strip().upper()
        if sql in (b"COMMIT", b"ROLLBACK"):
            touched, link.touched = link.touched, False
            if sql == b"COMMIT":
                self.commits_seen += 1
                with self._arm_lock:
                    if touched and self._armed > 0:
                        self._armed -= 1
                        self.dropped += 1
                        link.drop_answer.set()
            return
        with self._arm_lock:
            if self._pattern and self._pattern in sql:
                link.touched = True

    def _from_server(self, link: _Link) -> None:
        try:
            while data := link.server.recv(65536):
                if link.drop_answer.is_set():
                    # the server answered the COMMIT: it is done; the client
                    # never hears it
                    break
                link.client.sendall(data)
        except OSError:
            pass
        finally:
            link.cut()
