#!/usr/bin/env python3
"""A real MCP client for countersign's end-to-end tests (Python SDK v2, `mcp==2.3.0`).

Runs a scripted conversation against an MCP server (the notes upstream in
upstream.py, directly or through the gateway) and prints one JSON document on
stdout: a normalized transcript with every volatile value (session ids, request
ids, request state, timings) left out, so that running it directly against the
upstream and through a gateway can be compared byte for byte.

Usage:
  client.py --url URL --mode legacy|2026-07-28|auto --script session
  client.py --url URL --mode MODE --script call --tool NAME [--args JSON]
  client.py --url URL --mode MODE --script confirm
  client.py --url URL --mode legacy --script confirm-cross-session
  client.py --url URL --mode MODE --script elicit [--gateway-answer A] [--upstream-answer A]
  options: --transport streamable-http|sse (default streamable-http): `sse` speaks the
             2024-11-05 HTTP+SSE transport (`mcp.client.sse.sse_client`): URL is the SSE
             endpoint (say http://127.0.0.1:8080/sse), needs --mode legacy
           --elicit accept|decline|cancel (default accept): how every question is answered
           --gateway-answer accept|decline|cancel|untick|throw: overrides it for the gateway's
             own approval question (untick: accept with the box unticked; throw: the handler
             fails, so the SDK answers with a JSON-RPC error)
           --upstream-answer accept|decline|cancel: overrides it for any other question
           --no-elicitation: declare no elicitation capability at all

The elicit script drives a gateway's elicitation channels (elicitation/create on the
held call's stream, or input_required on 2026-07-28): it tells the gateway's question
apart from the upstream's own and records both, labelled, in the transcript.

The confirm scripts drive a gateway's confirmation-token channel (they need the
gateway in front of the notes upstream); they declare no elicitation capability,
so the token in the tool result is the channel every gateway must offer. The
approve-on-page script is such a host under a rule that needs a person: the
call is approved on the gateway's approval page (by the test), never by it.

Modes: `legacy` runs the initialize handshake (over Streamable HTTP a 2025-11-25
session with Mcp-Session-Id, GET stream and a DELETE at the end; over the SSE
transport one long GET whose `endpoint` event names where every message is POSTed); `2026-07-28` adopts the
stateless revision directly, without a probe; `auto` probes `server/discover`
and falls back to initialize, and the transcript records which era won.

Exit status: 0 when the script ran to the end (tool errors and JSON-RPC errors
of single calls are part of the transcript), 1 when the client could not talk
to the server at all, 2 on bad usage. Diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

try:
    import httpx2
    import mcp_types as types
    from mcp.client import Client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as exc:  # pragma: no cover - environment problem, say so plainly
    sys.stderr.write(
        f"client.py: cannot import the MCP Python SDK ({exc}); "
        "run scripts/install-test-tools.sh and use .tools/venv/bin/python\n"
    )
    sys.exit(2)

PEER = "python-mcp"
CLIENT_INFO = types.Implementation(name="countersign-e2e-python", version="1.0.0")
# Unsolicited notifications (GET stream) are awaited this long after a call that should cause one.
NOTIFICATION_WAIT_SECONDS = 5.0
CALL_TIMEOUT_SECONDS = 120.0
# The gateway's confirmation flow (docs/wire-formats.md).
CONFIRMATION_META = "countersign/confirmation"
TOKEN_META = "countersign/confirmationToken"
TOKEN_ARGUMENT = "confirmationToken"
CONFIRM_SCRIPTS = ("confirm", "confirm-cross-session", "approve-on-page")
# How long approve-on-page waits for the page's decision, and how often it retries meanwhile.
APPROVAL_WAIT_SECONDS = 60.0
APPROVAL_POLL_SECONDS = 0.2
# The gateway's own approval question (docs/wire-formats.md): recognised by its one
# boolean field, or by how its message starts.
GATEWAY_FIELD = "approve"
GATEWAY_MESSAGE_PREFIX = "An assistant wants to run a tool that needs your approval"
GATEWAY_ANSWERS = ("accept", "decline", "cancel", "untick", "throw")
UPSTREAM_ANSWERS = ("accept", "decline", "cancel")
UUID_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def normalize(value: Any) -> Any:
    """JSON-ready value with integral floats written as integers (1.0 -> 1), as JavaScript does."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    return value


def dump(model: Any) -> Any:
    return normalize(model.model_dump(mode="json", by_alias=True, exclude_none=True))


class ElicitAnswers:
    """How the person answers: the gateway's approval question and every other question apart.

    `labelled` (the elicit script, or either precise option given) records each question with
    who asked it; otherwise the record keeps the original `{mode, message, fields, action}`."""

    def __init__(self, gateway: str, upstream: str, labelled: bool) -> None:
        self.gateway = gateway
        self.upstream = upstream
        self.labelled = labelled

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ElicitAnswers:
        labelled = args.script == "elicit" or args.gateway_answer is not None or args.upstream_answer is not None
        return cls(args.gateway_answer or args.elicit, args.upstream_answer or args.elicit, labelled)


class HandlerFailure(RuntimeError):
    """Raised by the elicitation handler for `--gateway-answer throw`."""


def is_gateway_question(message: str, properties: dict[str, Any]) -> bool:
    return GATEWAY_FIELD in properties or message.startswith(GATEWAY_MESSAGE_PREFIX)


def question_lines(message: str) -> dict[str, Any]:
    """The tool, server, risk and argument lines of the gateway's question, as the person read them."""
    found: dict[str, Any] = {}
    lines = message.split("\n")
    for index, line in enumerate(lines):
        for label, key in (("Tool: ", "tool"), ("Server: ", "server"), ("Risk: ", "risk")):
            if line.startswith(label) and key not in found:
                found[key] = line[len(label) :]
        if line == "Arguments:" and "argumentLines" not in found:
            shown: list[str] = []
            for following in lines[index + 1 :]:
                if following == "":
                    break
                shown.append(following)
            found["argumentLines"] = shown
            try:
                found["argumentsShown"] = normalize(json.loads("\n".join(shown)))
            except json.JSONDecodeError:
                found["argumentsShown"] = None
    return found


def request_id_shape(request_id: Any) -> Any:
    """A question's JSON-RPC id (legacy) or inputRequests key (2026-07-28), without volatile parts."""
    if isinstance(request_id, int) and not isinstance(request_id, bool):
        return "<integer>"
    if isinstance(request_id, str):
        return UUID_PATTERN.sub("<uuid>", request_id)
    return request_id


class Recorder:
    """Collects what the server sent besides responses: progress, logs, elicitations, notifications."""

    def __init__(self, answers: ElicitAnswers) -> None:
        self.answers = answers
        self.progress: list[dict[str, Any]] = []
        self.logs: list[dict[str, Any]] = []
        self.elicitations: list[dict[str, Any]] = []
        self.unsolicited: list[str] = []
        self.unsolicited_changed = asyncio.Event()
        self.get_stream_status: int | None = None
        self.get_stream_seen = asyncio.Event()
        self.delete_status: int | None = None

    def take_step_events(self) -> dict[str, Any]:
        events: dict[str, Any] = {}
        if self.progress:
            events["progress"] = self.progress
        if self.logs:
            events["logs"] = self.logs
        if self.elicitations:
            events["elicitations"] = self.elicitations
        self.progress, self.logs, self.elicitations = [], [], []
        return events

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        entry: dict[str, Any] = {"progress": progress}
        if total is not None:
            entry["total"] = total
        if message is not None:
            entry["message"] = message
        self.progress.append(normalize(entry))

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        entry: dict[str, Any] = {"level": params.level, "data": normalize(params.data)}
        if params.logger is not None:
            entry["logger"] = params.logger
        self.logs.append(entry)

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            sys.stderr.write(f"client.py: transport reported: {message!r}\n")
            return
        method = getattr(message, "method", None)
        if method in (None, "notifications/progress", "notifications/message"):
            return
        self.unsolicited.append(method)
        self.unsolicited_changed.set()

    async def on_elicit(self, context: Any, params: Any) -> types.ElicitResult:
        mode = getattr(params, "mode", "form") or "form"
        schema = getattr(params, "requested_schema", None)
        properties: dict[str, Any] = {}
        if schema is not None:
            schema_dict = schema if isinstance(schema, dict) else dump(schema)
            properties = schema_dict.get("properties", {})
        gateway = is_gateway_question(params.message, properties)
        answer = self.answers.gateway if gateway else self.answers.upstream
        if self.answers.labelled:
            seen: dict[str, Any] = {
                "asker": "gateway" if gateway else "upstream",
                "answer": answer,
                "id": request_id_shape(getattr(context, "request_id", None)),
                "mode": mode,
                "message": params.message,
            }
            if gateway:
                seen.update(question_lines(params.message))
        else:
            seen = {"mode": mode, "message": params.message, "action": answer}
        if schema is not None:
            seen["fields"] = sorted(properties)
        self.elicitations.append(seen)
        if answer == "throw":
            raise HandlerFailure("the person's client failed while showing the question")
        if answer in ("decline", "cancel"):
            return types.ElicitResult(action=answer)
        # untick: the person accepts the form but leaves every box unticked.
        content = {
            name: False if answer == "untick" and prop.get("type") == "boolean" else affirmative_value(prop)
            for name, prop in properties.items()
        }
        return types.ElicitResult(action="accept", content=content if mode == "form" else None)

    async def on_http_response(self, response: httpx2.Response) -> None:
        method = response.request.method
        if method == "GET":
            self.get_stream_status = response.status_code
            self.get_stream_seen.set()
        elif method == "DELETE":
            self.delete_status = response.status_code


def affirmative_value(prop: dict[str, Any]) -> Any:
    """The answer a consenting user gives to one form field: tick booleans, take defaults."""
    kind = prop.get("type")
    if kind == "boolean":
        return True
    if "default" in prop:
        return prop["default"]
    if kind == "string":
        if prop.get("enum"):
            return prop["enum"][0]
        if prop.get("oneOf"):
            return prop["oneOf"][0].get("const")
        return "yes"
    if kind in ("number", "integer"):
        return prop.get("minimum", 1)
    if kind == "array":
        return []
    return None


def tool_summary(tool: types.Tool) -> dict[str, Any]:
    return {
        "name": tool.name,
        "annotations": dump(tool.annotations) if tool.annotations is not None else None,
        "outputSchema": tool.output_schema is not None,
    }


def result_summary(result: types.CallToolResult) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "content": [dump(block) for block in result.content],
        "isError": bool(result.is_error),
    }
    if result.structured_content is not None:
        summary["structuredContent"] = normalize(result.structured_content)
    if result.meta:
        summary["_meta"] = normalize(result.meta)
    return summary


class Session:
    def __init__(self, client: Client, recorder: Recorder, modern: bool) -> None:
        self.client = client
        self.recorder = recorder
        self.modern = modern
        self.steps: list[dict[str, Any]] = []
        self.expected_unsolicited = 0
        # Set by run(): opens one more session to the same server, with the same options.
        self.open_another: Callable[[], Any] | None = None
        # Merged into the transcript by run().
        self.transcript_extra: dict[str, Any] = {}
        self.listed_tools: list[types.Tool] = []

    def announces_changes(self) -> bool:
        """Whether a successful write should produce a resources/list_changed on the GET stream."""
        if self.modern or self.recorder.get_stream_status != 200:
            return False
        resources = self.client.server_capabilities.resources
        return bool(resources and resources.list_changed)

    async def list_tools(self) -> list[dict[str, Any]]:
        tools = (await self.client.list_tools()).tools
        self.listed_tools = tools
        return sorted((tool_summary(t) for t in tools), key=lambda t: t["name"])

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        announces: bool = False,
        progress: bool = False,
        record_exceptions: bool = False,
    ) -> dict[str, Any] | None:
        step: dict[str, Any] = {"call": name, "arguments": arguments}
        callback = self.recorder.on_progress if progress else None
        try:
            result = await self.client.call_tool(
                name, arguments, read_timeout_seconds=CALL_TIMEOUT_SECONDS, progress_callback=callback
            )
        except MCPError as exc:
            step["error"] = {"code": exc.error.code, "message": exc.error.message}
            result = None
        except Exception as exc:  # noqa: BLE001 - e.g. a throwing handler inside the SDK's input_required loop
            if not record_exceptions:
                raise
            step["exception"] = describe(exc)
            result = None
        else:
            step["result"] = result_summary(result)
        step.update(self.recorder.take_step_events())
        self.steps.append(step)
        if announces and result is not None and not result.is_error and self.announces_changes():
            self.expected_unsolicited += 1
            await self.await_unsolicited()
        return step.get("result")

    async def await_unsolicited(self) -> None:
        deadline = time.monotonic() + NOTIFICATION_WAIT_SECONDS
        while len(self.recorder.unsolicited) < self.expected_unsolicited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                sys.stderr.write("client.py: an expected notification did not arrive on the GET stream\n")
                return
            self.recorder.unsolicited_changed.clear()
            try:
                await asyncio.wait_for(self.recorder.unsolicited_changed.wait(), remaining)
            except TimeoutError:
                pass


async def script_session(session: Session, _args: argparse.Namespace) -> None:
    await session.call("list_notes", {})
    await session.call("add_note", {"name": "groceries", "text": "milk, eggs"}, announces=True)
    await session.call("get_note", {"name": "groceries"})
    await session.call("get_note", {"name": "missing"})
    await session.call("slow_count", {"n": 5}, progress=True)
    await session.call("confirm_delete", {"name": "groceries"}, announces=True)
    await session.call("list_notes", {})
    await session.call("audit_log", {})


async def script_call(session: Session, args: argparse.Namespace) -> None:
    await session.call(args.tool, args.call_arguments, progress=True)


async def script_elicit(session: Session, _args: argparse.Namespace) -> None:
    """A gateway's elicitation channel in one session: a held write, a held destructive call
    whose upstream then asks its own question, and what the upstream really executed."""
    await session.call("add_note", {"name": "e", "text": "1"}, record_exceptions=True)
    await session.call("confirm_delete", {"name": "readme"}, record_exceptions=True)
    await session.call("audit_log", {}, record_exceptions=True)


def confirmation_of(result: types.CallToolResult) -> dict[str, Any] | None:
    """The gateway's machine-readable confirmation object of a result, if it has one."""
    found = (result.meta or {}).get(CONFIRMATION_META)
    if isinstance(found, dict):
        return found
    structured = result.structured_content
    if isinstance(structured, dict) and structured.get("status") in ("requires_confirmation", "rejected", "denied"):
        return structured
    return None


def confirmation_summary(
    name: str, arguments: dict[str, Any], result: types.CallToolResult, found: dict[str, Any]
) -> dict[str, Any]:
    """What a held or refused call said, without the token itself (tokens differ run to run)."""
    summary: dict[str, Any] = {
        "isError": bool(result.is_error),
        "status": found.get("status"),
        "structuredContent": result.structured_content is not None,
        "textBlocks": sum(1 for block in result.content if block.type == "text"),
    }
    if "code" in found:
        summary["code"] = found["code"]
    if "channel" in found:
        summary["channel"] = found["channel"]
    if "approvalUrl" in found:
        summary["approvalUrlReturned"] = isinstance(found["approvalUrl"], str)
    token = found.get("confirmationToken")
    summary["tokenReturned"] = isinstance(token, str) and token.startswith("mcp_cf_")
    if found.get("status") == "requires_confirmation":
        # The guidance must name this very call, with the token added to its arguments.
        next_action = (found.get("guidance") or {}).get("next_action") or {}
        summary["nextActionMatches"] = next_action.get("tool") == name and next_action.get("arguments") == {
            **arguments,
            TOKEN_ARGUMENT: token,
        }
    return summary


def forge(token: str) -> str:
    """The token with one character in the middle of its signature part flipped."""
    head, _, signature = token.rpartition(".")
    middle = len(signature) // 2
    flipped = "B" if signature[middle] == "A" else "A"
    return f"{head}.{signature[:middle]}{flipped}{signature[middle + 1:]}"


class ConfirmFlow:
    """Steps of a confirm script: each call records status/code/result, never a token."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        # The last confirmation object seen, whole (the transcript keeps only its summary).
        self.last_confirmation: dict[str, Any] | None = None

    async def call(
        self,
        session: Session,
        step_name: str,
        name: str,
        arguments: dict[str, Any],
        *,
        token: str | None = None,
        token_in: str = "none",
    ) -> str | None:
        """Calls `name`, with `token` in the arguments or in `_meta` as `token_in` says (skipped
        when there is no token to send). Returns the token the result carries, if any."""
        step: dict[str, Any] = {"step": step_name, "call": name, "arguments": arguments, "token": token_in}
        if token_in != "none" and token is None:
            # An earlier step returned no token: sending the call without one would test nothing.
            step["skipped"] = "no token to send"
            self.steps.append(step)
            return None
        sent = dict(arguments)
        meta: dict[str, Any] | None = None
        if token is not None and token_in == "meta":
            meta = {TOKEN_META: token}
        elif token is not None:
            sent[TOKEN_ARGUMENT] = token
        new_token = None
        try:
            result = await session.client.call_tool(name, sent, read_timeout_seconds=CALL_TIMEOUT_SECONDS, meta=meta)
        except MCPError as exc:
            step["error"] = {"code": exc.error.code, "message": exc.error.message}
        except Exception as exc:  # noqa: BLE001 - an SDK that refuses a step is part of the transcript
            step["exception"] = describe(exc)
        else:
            found = confirmation_of(result)
            if found is None:
                step["result"] = result_summary(result)
            else:
                step["confirmation"] = confirmation_summary(name, arguments, result, found)
                self.last_confirmation = found
                candidate = found.get("confirmationToken")
                new_token = candidate if isinstance(candidate, str) else None
        self.steps.append(step)
        return new_token


async def script_confirm(session: Session, _args: argparse.Namespace) -> None:
    """The token channel end to end in one session; the upstream's audit_log judges what ran."""
    flow = ConfirmFlow()
    # (a) held, (b) redeemed once, (c) replayed.
    held = {"name": "held", "text": "t"}
    token = await flow.call(session, "held", "add_note", held)
    await flow.call(session, "confirmed", "add_note", held, token=token, token_in="argument")
    await flow.call(session, "replayed", "add_note", held, token=token, token_in="argument")
    # (d) changed arguments, (e) another tool, (f) forged signature: all with one unredeemed token.
    token_a = await flow.call(session, "held-a", "add_note", {"name": "a", "text": "1"})
    await flow.call(
        session, "changed-arguments", "add_note", {"name": "a", "text": "2"}, token=token_a, token_in="argument"
    )
    await flow.call(session, "other-tool", "delete_note", {"name": "a"}, token=token_a, token_in="argument")
    forged = forge(token_a) if token_a else None
    await flow.call(
        session, "forged", "add_note", {"name": "a", "text": "1"}, token=forged, token_in="forged-argument"
    )
    # (g) a flag the model wrote is not a confirmation.
    await flow.call(session, "model-flag", "add_note", {"name": "b", "text": "x", "confirm": True})
    # (h) the token in the request's _meta instead of the arguments.
    readme = {"name": "readme"}
    token_readme = await flow.call(session, "held-delete", "delete_note", readme)
    await flow.call(session, "confirmed-meta", "delete_note", readme, token=token_readme, token_in="meta")
    # (i) what the upstream really executed.
    await flow.call(session, "audit", "audit_log", {})
    session.steps = flow.steps


async def script_confirm_cross_session(session: Session, _args: argparse.Namespace) -> None:
    """A token held in one legacy session, redeemed in another (the first still open)."""
    if session.modern or session.open_another is None:
        raise RuntimeError("--script confirm-cross-session needs a legacy session")
    flow = ConfirmFlow()
    arguments = {"name": "x", "text": "y"}
    token = await flow.call(session, "held", "add_note", arguments)
    async with session.open_another() as other:
        if other.modern:
            raise RuntimeError("the second connection is not a legacy session")
        await flow.call(other, "other-session", "add_note", arguments, token=token, token_in="argument")
        await flow.call(other, "audit", "audit_log", {})
    session.transcript_extra["secondSession"] = {
        "getStream": other.recorder.get_stream_status,
        "sessionDelete": other.recorder.delete_status,
    }
    session.steps = flow.steps


async def script_approve_on_page(session: Session, args: argparse.Namespace) -> None:
    """A host that cannot elicit, under a rule that needs a person: the call is held with a link
    to the gateway's approval page, the token is refused as pending until someone approves there
    (the test, as a person would), then runs once. The client never approves anything itself.

    Writes {"approvalUrl": …} to --signal-file after the first pending retry, so the test
    approves only once the pending refusal has been seen; then retries until the page decided."""
    if not args.signal_file:
        raise RuntimeError("--script approve-on-page needs --signal-file PATH")
    flow = ConfirmFlow()
    readme = {"name": "readme"}
    token = await flow.call(session, "held", "delete_note", readme)
    url = (flow.last_confirmation or {}).get("approvalUrl")
    await flow.call(session, "pending", "delete_note", readme, token=token, token_in="argument")
    with open(args.signal_file + ".tmp", "w", encoding="utf-8") as signal:
        json.dump({"approvalUrl": url}, signal)
    os.replace(args.signal_file + ".tmp", args.signal_file)
    for _ in range(int(APPROVAL_WAIT_SECONDS / APPROVAL_POLL_SECONDS)):
        await flow.call(session, "approved", "delete_note", readme, token=token, token_in="argument")
        if flow.steps[-1].get("confirmation", {}).get("code") != "pending_approval":
            break
        # Still undecided: not a step of the transcript (how many there are depends on timing).
        flow.steps.pop()
        await asyncio.sleep(APPROVAL_POLL_SECONDS)
    await flow.call(session, "replayed", "delete_note", readme, token=token, token_in="argument")
    await flow.call(session, "audit", "audit_log", {})
    session.steps = flow.steps


SCRIPTS: dict[str, Callable[[Session, argparse.Namespace], Awaitable[None]]] = {
    "session": script_session,
    "call": script_call,
    "confirm": script_confirm,
    "confirm-cross-session": script_confirm_cross_session,
    "approve-on-page": script_approve_on_page,
    "elicit": script_elicit,
}


@asynccontextmanager
async def open_session(args: argparse.Namespace, recorder: Recorder) -> AsyncIterator[Session]:
    """One connection to the server; a legacy session is DELETEd when the context ends."""
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    http_client = httpx2.AsyncClient(timeout=timeout, event_hooks={"response": [recorder.on_http_response]})
    if args.transport == "sse":

        def recording_client(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            # The SDK builds its own client for the SSE transport; record its GET like ours.
            return httpx2.AsyncClient(
                headers=headers, timeout=timeout, auth=auth, event_hooks={"response": [recorder.on_http_response]}
            )

        transport = sse_client(
            args.url,
            timeout=MCP_DEFAULT_TIMEOUT,
            sse_read_timeout=MCP_DEFAULT_SSE_READ_TIMEOUT,
            httpx_client_factory=recording_client,
        )
    else:
        transport = streamable_http_client(args.url, http_client=http_client, terminate_on_close=True)
    client = Client(
        transport,
        mode=args.mode,
        client_info=CLIENT_INFO,
        # The confirm scripts test the token channel: without the capability no gateway may
        # answer a held call with elicitation/create or input_required instead.
        elicitation_callback=None if args.script in CONFIRM_SCRIPTS or args.no_elicitation else recorder.on_elicit,
        logging_callback=recorder.on_log,
        log_level="info",  # 2026-07-28 servers only send log messages to requests that opt in
        message_handler=recorder.on_message,
        read_timeout_seconds=CALL_TIMEOUT_SECONDS,
        cache=None,  # every list must reach the server, never a client-side cache
    )
    async with http_client:
        async with client:
            modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
            if not modern:
                # The SDK opens the GET stream right after `initialized`; wait for its answer so
                # notifications sent from then on are not dropped for lack of a stream.
                try:
                    await asyncio.wait_for(recorder.get_stream_seen.wait(), NOTIFICATION_WAIT_SECONDS)
                except TimeoutError:
                    sys.stderr.write("client.py: the GET stream was not answered\n")
            session = Session(client, recorder, modern)
            session.open_another = lambda: open_session(args, Recorder(ElicitAnswers.from_args(args)))
            yield session
        # Leaving the client context sends DELETE for a legacy session (terminate_on_close).


async def run(args: argparse.Namespace) -> dict[str, Any]:
    recorder = Recorder(ElicitAnswers.from_args(args))
    transcript: dict[str, Any] = {"peer": PEER, "mode": args.mode, "script": args.script}
    if args.transport != "streamable-http":
        transcript["transport"] = args.transport
    async with open_session(args, recorder) as session:
        client = session.client
        transcript["protocolVersion"] = client.protocol_version
        transcript["tools"] = await session.list_tools()
        if args.script in CONFIRM_SCRIPTS:
            # The gateway offers the token as an optional argument of every tool it holds.
            transcript["confirmationTokenArgument"] = sorted(
                tool.name
                for tool in session.listed_tools
                if TOKEN_ARGUMENT in (tool.input_schema.get("properties") or {})
            )
        await SCRIPTS[args.script](session, args)
        transcript["steps"] = session.steps
        transcript.update(session.transcript_extra)
        # Read last: a 2026-07-28 connection learns serverInfo from the results' `_meta`.
        transcript["serverName"] = client.server_info.name if client.server_info else None
        if args.script == "session":
            # Only the session script waits for them, so only there is the list deterministic.
            transcript["unsolicitedNotifications"] = sorted(recorder.unsolicited)
    transcript["getStream"] = recorder.get_stream_status
    transcript["sessionDelete"] = recorder.delete_status
    return transcript


def main() -> int:
    parser = argparse.ArgumentParser(description="Scripted MCP client (Python SDK v2) printing a JSON transcript.")
    parser.add_argument("--url", required=True, help="MCP endpoint, e.g. http://127.0.0.1:8080/mcp")
    parser.add_argument("--mode", required=True, choices=["legacy", *MODERN_PROTOCOL_VERSIONS, "auto"])
    parser.add_argument("--script", required=True, choices=sorted(SCRIPTS))
    parser.add_argument(
        "--transport",
        default="streamable-http",
        choices=["streamable-http", "sse"],
        help="sse: the 2024-11-05 HTTP+SSE transport, --url being its SSE endpoint",
    )
    parser.add_argument("--tool", help="tool name for --script call")
    parser.add_argument("--args", default="{}", help="JSON object of arguments for --script call")
    parser.add_argument("--elicit", default="accept", choices=["accept", "decline", "cancel"])
    parser.add_argument(
        "--gateway-answer", choices=GATEWAY_ANSWERS, help="answer to the gateway's approval question (default: --elicit)"
    )
    parser.add_argument(
        "--upstream-answer", choices=UPSTREAM_ANSWERS, help="answer to every other question (default: --elicit)"
    )
    parser.add_argument("--no-elicitation", action="store_true", help="declare no elicitation capability")
    parser.add_argument("--signal-file", help="approve-on-page: where to write the approval link once pending")
    args = parser.parse_args()
    if args.script == "call" and not args.tool:
        parser.error("--script call needs --tool NAME")
    try:
        args.call_arguments = json.loads(args.args)
    except json.JSONDecodeError as exc:
        parser.error(f"--args is not JSON: {exc}")
    if not isinstance(args.call_arguments, dict):
        parser.error("--args must be a JSON object")
    if args.transport == "sse" and args.mode != "legacy":
        parser.error("--transport sse speaks only the initialize handshake: use --mode legacy")
    if args.script == "confirm-cross-session" and args.mode != "legacy":
        parser.error("--script confirm-cross-session needs sessions: use --mode legacy")
    try:
        transcript = asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # noqa: BLE001 - report any failure to talk to the server
        sys.stderr.write(f"client.py: session against {args.url} failed: {describe(exc)}\n")
        return 1
    sys.stdout.write(json.dumps(transcript, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return 0


def describe(exc: BaseException) -> str:
    """Flatten exception groups (anyio task groups) into one readable line."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    if isinstance(exc, MCPError):
        return f"JSON-RPC error {exc.error.code}: {exc.error.message}"
    return f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    sys.exit(main())
