"""A TLS proxy in front of the test API server that can wedge watches: what a dead load balancer or a half-open TCP
session does to a client. Requests pass through unchanged (the proxy presents the API server's own serving
certificate and dials the API server as the admin), until `wedge()`: from then on, watch requests whose path starts
with a given prefix are accepted and never answered, and the open ones go silent. `hold_everything()` makes the whole
API server look unreachable the same way. Loopback only.

Every request gets its own connection (the proxy adds `Connection: close`), so each one is seen and judged here.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dflash_testkit.controlplane import ControlPlane


class WedgingProxy:
    def __init__(self, plane: ControlPlane) -> None:
        assert plane.pki
        self.plane = plane
        self._server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_tls.load_cert_chain(str(plane.pki.serving_cert), str(plane.pki.serving_key))
        self._client_tls = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
        self._client_tls.load_cert_chain(str(plane.pki.admin_cert), str(plane.pki.admin_key))
        self._loop = asyncio.new_event_loop()
        self._wedged_prefix: str | None = None
        self._hold_all = False
        self._silenced: set[asyncio.StreamWriter] = set()   # clients of held requests
        self._passing: dict[asyncio.StreamWriter, str] = {}  # clients of passed-through watches -> path
        self.held: list[str] = []  # request targets held so far
        self.port = 0

    # --- control, from the test's thread -------------------------------------------------------------------------
    def wedge(self, path_prefix: str) -> None:
        """Watches under `path_prefix` go silent: open ones stop forwarding, new ones are never answered."""
        self._call(self._set_wedge, path_prefix)

    def hold_everything(self) -> None:
        """Every request, open or new, is held unanswered: the API server looks unreachable."""
        self._call(self._set_hold_all)

    def heal(self) -> None:
        """Requests pass again; held connections are reset, as a recovered network would."""
        self._call(self._heal)

    def kubeconfig(self, path: Path) -> Path:
        """A copy of the plane's kubeconfig that reaches the API server through this proxy."""
        text = self.plane.kubeconfig.read_text().replace(self.plane.server, f"https://127.0.0.1:{self.port}")
        path.write_text(text)
        path.chmod(0o600)
        return path

    # --- the event loop ------------------------------------------------------------------------------------------
    def start(self) -> None:
        ready = threading.Event()

        async def serve() -> None:
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self._server_tls)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            async with server:
                with contextlib.suppress(asyncio.CancelledError):  # stop() cancels it
                    await server.serve_forever()

        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(serve(),), daemon=True,
                                        name="wedging-proxy")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the wedging proxy did not start")

    def stop(self) -> None:
        def shutdown() -> None:
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
        self._loop.call_soon_threadsafe(shutdown)
        self._thread.join(10)

    def _call(self, fn, *args) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn(*args)
            finally:
                done.set()
        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    def _set_wedge(self, prefix: str) -> None:
        self._wedged_prefix = prefix
        for writer, path in list(self._passing.items()):
            if path.startswith(prefix):
                self._silence(writer)

    def _set_hold_all(self) -> None:
        self._hold_all = True
        for writer in list(self._passing):
            self._silence(writer)

    def _heal(self) -> None:
        self._wedged_prefix, self._hold_all = None, False
        for writer in list(self._silenced):
            writer.transport.abort()
        self._silenced.clear()

    def _silence(self, writer: asyncio.StreamWriter) -> None:
        self._passing.pop(writer, None)
        self._silenced.add(writer)

    def _holds(self, target: str) -> bool:
        path, _, query = target.partition("?")
        is_watch = any(part in ("watch=true", "watch=1") for part in query.split("&"))
        return self._hold_all or (self._wedged_prefix is not None and is_watch
                                  and path.startswith(self._wedged_prefix))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        target = head.split(b" ", 2)[1].decode("latin-1")
        if self._holds(target):
            self.held.append(target)
            self._silenced.add(writer)
            await _drain_until_closed(reader)
            self._silenced.discard(writer)
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                "127.0.0.1", self.plane.api_port, ssl=self._client_tls, server_hostname="127.0.0.1")
        except OSError:
            writer.close()
            return
        path = target.partition("?")[0]
        if "watch=" in target:
            self._passing[writer] = path
        up_writer.write(_with_connection_close(head))
        await asyncio.gather(self._pipe(reader, up_writer, writer), self._pipe(up_reader, writer, writer))
        self._passing.pop(writer, None)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                    client: asyncio.StreamWriter) -> None:
        try:
            while chunk := await source.read(65536):
                if client in self._silenced:
                    continue  # the wire went dead: nothing more reaches the client or the server
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, asyncio.CancelledError, ssl.SSLError):
            pass
        finally:
            if client not in self._silenced:
                sink.close()


async def _drain_until_closed(reader: asyncio.StreamReader) -> None:
    try:
        while await reader.read(65536):
            pass
    except (ConnectionError, ssl.SSLError):
        pass


def _with_connection_close(head: bytes) -> bytes:
    lines = [line for line in head.split(b"\r\n") if line and not line.lower().startswith(b"connection:")]
    return b"\r\n".join(lines[:1] + [b"Connection: close"] + lines[1:]) + b"\r\n\r\n"


@contextmanager
def wedging_proxy(plane: ControlPlane) -> Iterator[WedgingProxy]:
    proxy = WedgingProxy(plane)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.heal()
        proxy.stop()
