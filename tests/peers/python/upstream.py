#!/usr/bin/env python3
"""A real MCP upstream for countersign's end-to-end tests: a small notes store.

Built on the Python SDK v2 (`mcp==2.3.0`, `MCPServer`) and served over
Streamable HTTP on http://127.0.0.1:PORT/mcp. The SDK is dual-era, so the same
process answers legacy sessions (`initialize`, `Mcp-Session-Id`, GET stream,
DELETE; 2025-03-26 .. 2025-11-25) and stateless 2026-07-28 requests
(`server/discover`, per-request `_meta`, `input_required` results).

The state is real and shared by every session of the process: tests judge a
gateway by what the upstream actually executed (`audit_log`), never by what
the gateway says it did.

Usage: upstream.py --port N [--json-response] [--transport streamable-http|sse]
                   [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]]
                   [--auth-issuer URL --auth-audience URL]
       upstream.py --stdio

With `--transport sse` it speaks only the legacy 2024-11-05 HTTP+SSE transport
instead: `GET /sse` opens the stream, whose `endpoint` event names
`/messages/?session_id=…`. Over HTTP it prints exactly one line `READY` on
stdout once the port accepts connections; everything else goes to stderr.
With --tls-cert and --tls-key it serves HTTPS instead of HTTP (uvicorn's TLS,
HTTP/1.1, no ALPN); --tls-client-ca also makes it require a client certificate
issued by that CA, refusing the handshake otherwise.
With --auth-issuer and --auth-audience it does its own OAuth (bearer_auth.py): every MCP
request needs a JWT of that issuer for that audience, and a 401 names its own
protected-resource metadata.
With `--stdio` it speaks MCP on stdin and stdout instead (one JSON-RPC message
per line, as a gateway's stdio upstream) and logs to stderr.
Exits non-zero with a message on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import ssl
import sys
import warnings
from typing import Annotated, Any

try:
    import uvicorn
    from mcp.server import MCPServer
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.server.mcpserver import Context, Elicit, ElicitationResult, Resolve
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.shared.exceptions import MCPDeprecationWarning
    from mcp.types import ToolAnnotations
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
    from pydantic import BaseModel, Field
except ImportError as exc:  # pragma: no cover - environment problem, say so plainly
    sys.stderr.write(
        f"upstream.py: cannot import the MCP Python SDK ({exc}); "
        "run scripts/install-test-tools.sh and use .tools/venv/bin/python\n"
    )
    sys.exit(2)

SERVER_NAME = "countersign-test-notes"

# Logging is deprecated in 2026-07-28 but still part of the legacy revisions this peer serves.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
ADDITIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False)


class Note(BaseModel):
    name: str
    text: str


class NoteList(BaseModel):
    names: list[str]


class AuditEntry(BaseModel):
    tool: str
    arguments: dict[str, Any]


class AuditLog(BaseModel):
    entries: list[AuditEntry]


class DeleteConfirmation(BaseModel):
    confirm: bool = Field(default=False, title="Delete this note?")


class NotesStore:
    """Process-wide state: the notes, and every state-changing call executed, in order."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {"readme": "This store belongs to countersign's end-to-end tests."}
        self.audit: list[AuditEntry] = []

    def record(self, tool: str, **arguments: Any) -> None:
        self.audit.append(AuditEntry(tool=tool, arguments=arguments))


store = NotesStore()
mcp = MCPServer(
    SERVER_NAME,
    version="1.0.0",
    instructions="A notes store. Tools change real state; audit_log lists every change made.",
    log_level="WARNING",
)


def _is_modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def _announce_resources_changed(ctx: Context) -> None:
    """Tell legacy sessions, on their standalone GET stream, that the note set changed.

    This notification is deliberately not tied to the request, so a gateway test can
    see traffic on the GET stream. A 2026-07-28 request has no GET stream; there the
    event goes to `subscriptions/listen` streams instead.
    """
    if _is_modern(ctx):
        await ctx.notify_resources_changed()
        return
    try:
        await ctx.session.send_resource_list_changed()
    except Exception as exc:  # noqa: BLE001 - a missing GET stream must not fail the tool
        logging.getLogger(SERVER_NAME).info("resources/list_changed not delivered: %s", exc)


@mcp.tool(annotations=READ_ONLY)
def list_notes() -> NoteList:
    """List the names of all notes, sorted."""
    return NoteList(names=sorted(store.notes))


@mcp.tool(annotations=READ_ONLY)
def get_note(name: str) -> Note:
    """Read one note."""
    if name not in store.notes:
        raise ToolError(f"no note named {name!r}")
    return Note(name=name, text=store.notes[name])


@mcp.tool(annotations=ADDITIVE)
async def add_note(name: str, text: str, ctx: Context) -> str:
    """Create a note, or replace the text of an existing one."""
    existed = name in store.notes
    store.notes[name] = text
    store.record("add_note", name=name, text=text)
    await _announce_resources_changed(ctx)
    return f"{'updated' if existed else 'created'} note {name!r}"


@mcp.tool(annotations=DESTRUCTIVE)
async def delete_note(name: str, ctx: Context) -> str:
    """Delete a note."""
    if name not in store.notes:
        raise ToolError(f"no note named {name!r}")
    del store.notes[name]
    store.record("delete_note", name=name)
    await _announce_resources_changed(ctx)
    return f"deleted note {name!r}"


@mcp.tool()
def touch(name: str) -> str:
    """Create an empty note if it does not exist (declares no annotations on purpose)."""
    created = name not in store.notes
    store.notes.setdefault(name, "")
    store.record("touch", name=name)
    return f"{'created' if created else 'kept'} note {name!r}"


@mcp.tool(annotations=READ_ONLY)
async def slow_count(n: int, ctx: Context) -> str:
    """Count to n, reporting progress after every step and logging when done."""
    if n < 0 or n > 100:
        raise ToolError("n must be between 0 and 100")
    for i in range(1, n + 1):
        await asyncio.sleep(0.02)
        await ctx.report_progress(i, n, f"step {i} of {n}")
    await ctx.info(f"slow_count counted to {n}")
    return f"counted to {n}"


async def _ask_delete(name: str) -> Elicit[DeleteConfirmation]:
    return Elicit(f"Delete the note {name!r}?", DeleteConfirmation)


@mcp.tool(annotations=DESTRUCTIVE)
async def confirm_delete(
    name: str,
    answer: Annotated[ElicitationResult[DeleteConfirmation], Resolve(_ask_delete)],
    ctx: Context,
) -> str:
    """Delete a note, but only after the user confirms it (form elicitation, one boolean)."""
    # Legacy sessions get an `elicitation/create` request on the call's SSE stream (the
    # SDK runs ctx.elicit for the resolver); 2026-07-28 requests get an `input_required`
    # result and the client retries with its answer.
    if answer.action != "accept" or not answer.data.confirm:
        return f"kept note {name!r}: the user did not confirm ({answer.action})"
    if name not in store.notes:
        raise ToolError(f"no note named {name!r}")
    del store.notes[name]
    store.record("confirm_delete", name=name)
    await _announce_resources_changed(ctx)
    return f"deleted note {name!r} after confirmation"


@mcp.tool(annotations=READ_ONLY)
def audit_log() -> AuditLog:
    """Every state-changing call executed so far, oldest first."""
    return AuditLog(entries=list(store.audit))


@mcp.resource("note://{name}", mime_type="text/plain")
def note_resource(name: str) -> str:
    """A note's text."""
    if name not in store.notes:
        raise ValueError(f"no note named {name!r}")
    return store.notes[name]


def _declare_resources_list_changed() -> None:
    """Advertise `resources.listChanged` to legacy sessions, since add/delete send it.

    MCPServer has no constructor option for the handshake-era `listChanged` flags; the
    low-level server takes them as `NotificationOptions` when it builds the
    `InitializeResult`.
    """
    lowlevel = mcp._lowlevel_server  # noqa: SLF001 - no public seam for NotificationOptions
    build = lowlevel.create_initialization_options

    def create_initialization_options(notification_options=None, *args, **kwargs):  # type: ignore[no-untyped-def]
        options = notification_options or NotificationOptions(resources_changed=True)
        return build(options, *args, **kwargs)

    lowlevel.create_initialization_options = create_initialization_options  # type: ignore[method-assign]


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"upstream.py: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _tls_options(args: argparse.Namespace) -> dict[str, Any]:
    """uvicorn's TLS settings for --tls-*, or none: plain HTTP stays exactly as it was."""
    if args.tls_cert is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": args.tls_cert, "ssl_keyfile": args.tls_key}
    if args.tls_client_ca is not None:
        options["ssl_ca_certs"] = args.tls_client_ca
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return options


async def serve(port: int, json_response: bool, transport: str, tls: dict[str, Any]) -> int:
    sock = _bind(port)
    if transport == "sse":
        app = mcp.sse_app(host="127.0.0.1")
    else:
        app = mcp.streamable_http_app(json_response=json_response, host="127.0.0.1")
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,  # uvicorn's access log writes to stdout, which carries only READY
        lifespan="on",
        timeout_graceful_shutdown=2,  # open SSE streams must not stall a SIGTERM
        **tls,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if not server.started:
        exc = None if task.cancelled() else task.exception()
        sys.stderr.write(f"upstream.py: server did not start on 127.0.0.1:{port}: {exc!r}\n")
        return 1
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    await task
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, help="TCP port on 127.0.0.1")
    parser.add_argument(
        "--stdio",
        action="store_true",
        help="speak MCP on stdin/stdout instead of HTTP (state is then per process, so per stdio instance)",
    )
    parser.add_argument(
        "--json-response",
        action="store_true",
        help="answer legacy POSTs with application/json instead of text/event-stream",
    )
    parser.add_argument(
        "--transport",
        choices=["streamable-http", "sse"],
        default="streamable-http",
        help="sse: serve only the legacy 2024-11-05 HTTP+SSE transport (GET /sse)",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate chain")
    parser.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    parser.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="require a client certificate issued by this CA (mTLS)",
    )
    parser.add_argument("--auth-issuer", metavar="URL", help="require bearer JWTs of this OAuth issuer")
    parser.add_argument("--auth-audience", metavar="URL", help="the audience those tokens must name")
    args = parser.parse_args()
    if (args.auth_issuer is None) != (args.auth_audience is None):
        parser.error("--auth-issuer and --auth-audience go together")
    if args.stdio and args.auth_issuer is not None:
        parser.error("--stdio takes no --auth-*")
    if args.stdio:
        if (
            args.port is not None
            or args.json_response
            or args.transport != "streamable-http"
            or args.tls_cert is not None
            or args.tls_client_ca is not None
        ):
            parser.error("--stdio takes neither --port, --json-response, --transport nor --tls-*")
    elif args.port is None:
        parser.error("give --port N (HTTP) or --stdio")
    elif not 0 < args.port < 65536:
        parser.error(f"--port {args.port} is not a TCP port")
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        parser.error("--tls-client-ca needs --tls-cert and --tls-key")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="upstream.py: %(name)s: %(message)s")
    _declare_resources_list_changed()
    if args.stdio:
        try:
            mcp.run("stdio")
        except KeyboardInterrupt:
            pass
        return 0
    if args.auth_issuer is not None:
        from bearer_auth import require_tokens

        scheme = "https" if args.tls_cert else "http"
        path = "/sse" if args.transport == "sse" else "/mcp"
        require_tokens(mcp, args.auth_issuer, args.auth_audience, f"{scheme}://127.0.0.1:{args.port}{path}")
    try:
        tls = _tls_options(args)
        if tls:
            # Load the files now, so a bad one is a clear start-up failure, not a dead port.
            try:
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                context.load_cert_chain(args.tls_cert, args.tls_key)
                if args.tls_client_ca is not None:
                    context.load_verify_locations(args.tls_client_ca)
            except (OSError, ssl.SSLError) as exc:
                sys.stderr.write(f"upstream.py: cannot use the TLS files: {exc}\n")
                return 1
        return asyncio.run(serve(args.port, args.json_response, args.transport, tls))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
