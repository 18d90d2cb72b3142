#!/usr/bin/env node
// A real MCP client for countersign's end-to-end tests: the TypeScript SDK v1
// (@modelcontextprotocol/sdk, pinned in package.json) over Streamable HTTP.
//
// Runs a scripted conversation and prints one JSON document on stdout: a normalized
// transcript in the same format as ../python/client.py, with every volatile value
// (session ids, request ids, timings) left out, so a run straight against the
// upstream and a run through a gateway can be compared byte for byte.
//
// Usage:
//   node client.mjs --url URL --script session [--elicit accept|decline|cancel]
//   node client.mjs --url URL --script call --tool NAME [--args JSON] [--elicit ...]
//   node client.mjs --url URL --script confirm|confirm-cross-session
//   node client.mjs --url URL --script elicit [--gateway-answer A] [--upstream-answer A]
//   options: --elicit accept|decline|cancel (default accept): how every question is answered
//            --gateway-answer accept|decline|cancel|untick|throw: overrides it for the gateway's
//              own approval question (untick: accept with the box unticked; throw: the handler
//              throws, so the SDK answers with a JSON-RPC error)
//            --upstream-answer accept|decline|cancel: overrides it for any other question
//            --no-elicitation: declare no elicitation capability at all
//            --transport streamable-http|sse (default streamable-http): `sse` speaks the
//              2024-11-05 HTTP+SSE transport (SSEClientTransport): URL is the SSE endpoint
//              (say http://127.0.0.1:8080/sse); there is no DELETE, so sessionDelete is null
//
// The elicit script drives a gateway's elicitation channel (elicitation/create on the held
// call's stream): it tells the gateway's question apart from the upstream's own and records
// both, labelled, in the transcript.
//
// The confirm scripts drive a gateway's confirmation-token channel (run them through the
// gateway); they declare no elicitation capability, so the token in the tool result is the
// channel every gateway must offer. confirm-cross-session opens a second session.
//
// The SDK speaks only the handshake revisions (it negotiates 2025-11-25): initialize,
// Mcp-Session-Id, a GET stream opened right after `initialized`, and the session is
// ended with DELETE (transport.terminateSession()) before client.close().
//
// Exit status: 0 when the script ran to the end (tool errors and JSON-RPC errors of
// single calls are part of the transcript), 1 when it could not talk to the server,
// 2 on bad usage. Diagnostics go to stderr.

import { isDeepStrictEqual, parseArgs } from "node:util";

const PEER = "typescript-sdk";
// Unsolicited notifications (GET stream) are awaited this long after a call that should cause one.
const NOTIFICATION_WAIT_MS = 5000;
const CALL_TIMEOUT_MS = 120000;
// The gateway's confirmation flow (docs/wire-formats.md).
const CONFIRMATION_META = "countersign/confirmation";
const TOKEN_META = "countersign/confirmationToken";
const TOKEN_ARGUMENT = "confirmationToken";
const SCRIPTS = ["session", "call", "confirm", "confirm-cross-session", "elicit"];
// The gateway's own approval question (docs/wire-formats.md): recognised by its one
// boolean field, or by how its message starts.
const GATEWAY_FIELD = "approve";
const GATEWAY_MESSAGE_PREFIX = "An assistant wants to run a tool that needs your approval";
const ELICIT_ANSWERS = ["accept", "decline", "cancel"];
const GATEWAY_ANSWERS = ["accept", "decline", "cancel", "untick", "throw"];
const UPSTREAM_ANSWERS = ["accept", "decline", "cancel"];
const UUID_PATTERN = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;

function fail(message, status = 1) {
  process.stderr.write(`client.mjs: ${message}\n`);
  process.exit(status);
}

let sdk;
try {
  const [clientMod, transportMod, sseMod, typesMod] = await Promise.all([
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/client/streamableHttp.js"),
    import("@modelcontextprotocol/sdk/client/sse.js"),
    import("@modelcontextprotocol/sdk/types.js"),
  ]);
  sdk = { ...clientMod, ...transportMod, ...sseMod, ...typesMod };
} catch (error) {
  fail(
    `cannot load @modelcontextprotocol/sdk (${error.message}); run scripts/install-test-tools.sh`,
    2,
  );
}

function usage(message) {
  fail(
    `${message}\nusage: node client.mjs --url URL --script ${SCRIPTS.join("|")} [--tool NAME] [--args JSON] ` +
      "[--elicit accept|decline|cancel] [--gateway-answer accept|decline|cancel|untick|throw] " +
      "[--upstream-answer accept|decline|cancel] [--no-elicitation] [--transport streamable-http|sse]",
    2,
  );
}

let options;
try {
  ({ values: options } = parseArgs({
    options: {
      url: { type: "string" },
      script: { type: "string" },
      tool: { type: "string" },
      args: { type: "string", default: "{}" },
      elicit: { type: "string", default: "accept" },
      "gateway-answer": { type: "string" },
      "upstream-answer": { type: "string" },
      "no-elicitation": { type: "boolean", default: false },
      transport: { type: "string", default: "streamable-http" },
    },
    strict: true,
  }));
} catch (error) {
  usage(error.message);
}
if (!options.url) usage("--url is required");
if (!SCRIPTS.includes(options.script)) usage(`--script must be one of ${SCRIPTS.join(", ")}`);
if (!["streamable-http", "sse"].includes(options.transport)) {
  usage("--transport must be streamable-http or sse");
}
if (!ELICIT_ANSWERS.includes(options.elicit)) usage(`--elicit must be one of ${ELICIT_ANSWERS.join(", ")}`);
if (options["gateway-answer"] !== undefined && !GATEWAY_ANSWERS.includes(options["gateway-answer"])) {
  usage(`--gateway-answer must be one of ${GATEWAY_ANSWERS.join(", ")}`);
}
if (options["upstream-answer"] !== undefined && !UPSTREAM_ANSWERS.includes(options["upstream-answer"])) {
  usage(`--upstream-answer must be one of ${UPSTREAM_ANSWERS.join(", ")}`);
}
// How the person answers: the gateway's approval question and every other question apart.
// `labelled` (the elicit script, or either precise option given) records each question with who
// asked it; otherwise the record keeps the original {mode, message, fields, action}.
const answers = {
  gateway: options["gateway-answer"] ?? options.elicit,
  upstream: options["upstream-answer"] ?? options.elicit,
  labelled:
    options.script === "elicit" ||
    options["gateway-answer"] !== undefined ||
    options["upstream-answer"] !== undefined,
};
if (options.script === "call" && !options.tool) usage("--script call needs --tool NAME");
let callArguments;
try {
  callArguments = JSON.parse(options.args);
} catch (error) {
  usage(`--args is not JSON: ${error.message}`);
}
if (callArguments === null || typeof callArguments !== "object" || Array.isArray(callArguments)) {
  usage("--args must be a JSON object");
}
let url;
try {
  url = new URL(options.url);
} catch (error) {
  usage(`--url is not a URL: ${error.message}`);
}

// Key order is made canonical so the output compares byte for byte with client.py's.
function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(
      Object.keys(value)
        .filter((key) => value[key] !== undefined)
        .sort()
        .map((key) => [key, canonical(value[key])]),
    );
  }
  return value;
}

// The answer a consenting user gives to one form field: tick booleans, take defaults.
function affirmativeValue(prop) {
  if (prop.type === "boolean") return true;
  if ("default" in prop) return prop.default;
  if (prop.type === "string") {
    if (Array.isArray(prop.enum) && prop.enum.length) return prop.enum[0];
    if (Array.isArray(prop.oneOf) && prop.oneOf.length) return prop.oneOf[0].const;
    return "yes";
  }
  if (prop.type === "number" || prop.type === "integer") return prop.minimum ?? 1;
  if (prop.type === "array") return [];
  return null;
}

function isGatewayQuestion(message, properties) {
  return Object.hasOwn(properties ?? {}, GATEWAY_FIELD) || String(message).startsWith(GATEWAY_MESSAGE_PREFIX);
}

// The tool, server, risk and argument lines of the gateway's question, as the person read them.
function questionLines(message) {
  const found = {};
  const lines = String(message).split("\n");
  lines.forEach((line, index) => {
    for (const [label, key] of [
      ["Tool: ", "tool"],
      ["Server: ", "server"],
      ["Risk: ", "risk"],
    ]) {
      if (line.startsWith(label) && !(key in found)) found[key] = line.slice(label.length);
    }
    if (line === "Arguments:" && !("argumentLines" in found)) {
      const shown = [];
      for (const following of lines.slice(index + 1)) {
        if (following === "") break;
        shown.push(following);
      }
      found.argumentLines = shown;
      try {
        found.argumentsShown = JSON.parse(shown.join("\n"));
      } catch {
        found.argumentsShown = null;
      }
    }
  });
  return found;
}

// A question's JSON-RPC id, without volatile parts.
function requestIdShape(id) {
  if (typeof id === "number") return "<integer>";
  if (typeof id === "string") return id.replace(UUID_PATTERN, "<uuid>");
  return id ?? null;
}

const recorder = {
  progress: [],
  logs: [],
  elicitations: [],
  unsolicited: [],
  unsolicitedWaiters: [],
  getStream: null,
  getStreamWaiters: [],
  sessionDelete: null,
  takeStepEvents() {
    const events = {};
    if (this.progress.length) events.progress = this.progress;
    if (this.logs.length) events.logs = this.logs;
    if (this.elicitations.length) events.elicitations = this.elicitations;
    this.progress = [];
    this.logs = [];
    this.elicitations = [];
    return events;
  },
};

function waitFor(predicate, waiters, timeoutMs) {
  if (predicate()) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    waiters.push(() => {
      if (predicate()) {
        clearTimeout(timer);
        resolve(true);
        return true;
      }
      return false;
    });
  });
}

function wake(waiters) {
  for (let i = waiters.length - 1; i >= 0; i--) {
    if (waiters[i]()) waiters.splice(i, 1);
  }
}

// Watch the transport's HTTP exchanges: whether the GET stream opened, what DELETE got.
async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const method = (init?.method ?? "GET").toUpperCase();
  if (method === "GET") {
    recorder.getStream = response.status;
    wake(recorder.getStreamWaiters);
  } else if (method === "DELETE") {
    recorder.sessionDelete = response.status;
  }
  return response;
}

const CLIENT_INFO = { name: "countersign-e2e-typescript", version: "1.0.0" };
const confirming = options.script.startsWith("confirm");
// The confirm scripts test the token channel: without the capability no gateway may answer
// a held call with elicitation/create instead.
const elicits = !confirming && !options["no-elicitation"];
const client = new sdk.Client(CLIENT_INFO, {
  capabilities: elicits ? { elicitation: { form: {} } } : {},
});

const handleElicitation = async (request, extra) => {
  const params = request.params;
  const mode = params.mode ?? "form";
  const properties = params.requestedSchema?.properties;
  const gateway = isGatewayQuestion(params.message, properties);
  const answer = gateway ? answers.gateway : answers.upstream;
  let seen;
  if (answers.labelled) {
    seen = {
      asker: gateway ? "gateway" : "upstream",
      answer,
      id: requestIdShape(extra?.requestId),
      mode,
      message: params.message,
      ...(gateway ? questionLines(params.message) : {}),
    };
  } else {
    seen = { mode, message: params.message, action: answer };
  }
  if (properties) seen.fields = Object.keys(properties).sort();
  recorder.elicitations.push(seen);
  if (answer === "throw") throw new Error("the person's client failed while showing the question");
  if (answer === "decline" || answer === "cancel") return { action: answer };
  if (mode !== "form") return { action: "accept" };
  // untick: the person accepts the form but leaves every box unticked.
  const content = Object.fromEntries(
    Object.entries(properties ?? {}).map(([k, p]) => [
      k,
      answer === "untick" && p.type === "boolean" ? false : affirmativeValue(p),
    ]),
  );
  return { action: "accept", content };
};
if (elicits) client.setRequestHandler(sdk.ElicitRequestSchema, handleElicitation);

client.setNotificationHandler(sdk.LoggingMessageNotificationSchema, async (notification) => {
  const { level, data, logger } = notification.params;
  const entry = { level, data };
  if (logger !== undefined) entry.logger = logger;
  recorder.logs.push(entry);
});

client.fallbackNotificationHandler = async (notification) => {
  recorder.unsolicited.push(notification.method);
  wake(recorder.unsolicitedWaiters);
};

let closing = false;
client.onerror = (error) => {
  // The SDK reports GET-stream reconnect attempts here after the session is deleted.
  if (!closing) process.stderr.write(`client.mjs: transport reported: ${error?.message ?? error}\n`);
};

// The transport `--transport` names, its HTTP exchanges seen by `fetchFn`. The SSE transport
// keeps the negotiated version to itself; `negotiated` records it.
function makeTransport(fetchFn) {
  if (options.transport === "sse") {
    const sse = new sdk.SSEClientTransport(url, { fetch: fetchFn });
    const setProtocolVersion = sse.setProtocolVersion.bind(sse);
    sse.setProtocolVersion = (version) => {
      sse.negotiated = version;
      setProtocolVersion(version);
    };
    return sse;
  }
  return new sdk.StreamableHTTPClientTransport(url, { fetch: fetchFn });
}

const transport = makeTransport(recordingFetch);
const steps = [];
let expectedUnsolicited = 0;

function announcesChanges() {
  return recorder.getStream === 200 && client.getServerCapabilities()?.resources?.listChanged === true;
}

function resultSummary(result) {
  const summary = { content: result.content ?? [], isError: result.isError === true };
  if (result.structuredContent !== undefined) summary.structuredContent = result.structuredContent;
  if (result._meta !== undefined && Object.keys(result._meta).length) summary._meta = result._meta;
  return summary;
}

async function call(name, args, { announces = false, progress = false } = {}) {
  const step = { call: name, arguments: args };
  const requestOptions = { timeout: CALL_TIMEOUT_MS };
  if (progress) {
    requestOptions.onprogress = ({ progress: value, total, message }) => {
      const entry = { progress: value };
      if (total !== undefined) entry.total = total;
      if (message !== undefined) entry.message = message;
      recorder.progress.push(entry);
    };
  }
  let result = null;
  try {
    result = await client.callTool({ name, arguments: args }, undefined, requestOptions);
    step.result = resultSummary(result);
  } catch (error) {
    if (typeof error?.code !== "number") throw error;
    // McpError prefixes the JSON-RPC message with "MCP error <code>: "; keep the server's words.
    step.error = { code: error.code, message: error.message.replace(/^MCP error -?\d+: /, "") };
  }
  Object.assign(step, recorder.takeStepEvents());
  steps.push(step);
  if (announces && result && !result.isError && announcesChanges()) {
    expectedUnsolicited += 1;
    const arrived = await waitFor(
      () => recorder.unsolicited.length >= expectedUnsolicited,
      recorder.unsolicitedWaiters,
      NOTIFICATION_WAIT_MS,
    );
    if (!arrived) process.stderr.write("client.mjs: an expected notification did not arrive on the GET stream\n");
  }
}

// The gateway's machine-readable confirmation object of a result, if it has one.
function confirmationOf(result) {
  const found = result?._meta?.[CONFIRMATION_META];
  if (found !== null && typeof found === "object") return found;
  const structured = result?.structuredContent;
  if (
    structured !== null &&
    typeof structured === "object" &&
    ["requires_confirmation", "rejected", "denied"].includes(structured.status)
  ) {
    return structured;
  }
  return null;
}

// What a held or refused call said, without the token itself (tokens differ run to run).
function confirmationSummary(name, args, result, found) {
  const token = found.confirmationToken;
  const summary = {
    isError: result.isError === true,
    status: found.status,
    structuredContent: result.structuredContent !== undefined,
    textBlocks: (result.content ?? []).filter((block) => block.type === "text").length,
    tokenReturned: typeof token === "string" && token.startsWith("mcp_cf_"),
  };
  if ("code" in found) summary.code = found.code;
  if (found.status === "requires_confirmation") {
    // The guidance must name this very call, with the token added to its arguments.
    const next = found.guidance?.next_action ?? {};
    summary.nextActionMatches =
      next.tool === name && isDeepStrictEqual(next.arguments, { ...args, [TOKEN_ARGUMENT]: token });
  }
  return summary;
}

// The token with one character in the middle of its signature part flipped.
function forge(token) {
  const dot = token.lastIndexOf(".");
  const head = token.slice(0, dot);
  const signature = token.slice(dot + 1);
  const middle = Math.floor(signature.length / 2);
  const flipped = signature[middle] === "A" ? "B" : "A";
  return `${head}.${signature.slice(0, middle)}${flipped}${signature.slice(middle + 1)}`;
}

// One call of a confirm script on `onClient`; `tokenIn` is "argument", "meta" or
// "forged-argument" when `token` is sent (skipped when there is none). Records status/code/result, never a token;
// returns the token the result carries, if any.
async function confirmCall(onClient, stepName, name, args, { token = null, tokenIn = "none" } = {}) {
  const step = { step: stepName, call: name, arguments: args, token: tokenIn };
  if (tokenIn !== "none" && token === null) {
    // An earlier step returned no token: sending the call without one would test nothing.
    step.skipped = "no token to send";
    steps.push(step);
    return null;
  }
  const params = { name, arguments: { ...args } };
  if (token !== null && tokenIn === "meta") params._meta = { [TOKEN_META]: token };
  else if (token !== null) params.arguments[TOKEN_ARGUMENT] = token;
  let newToken = null;
  try {
    const result = await onClient.callTool(params, undefined, { timeout: CALL_TIMEOUT_MS });
    const found = confirmationOf(result);
    if (found === null) {
      step.result = resultSummary(result);
    } else {
      step.confirmation = confirmationSummary(name, args, result, found);
      if (typeof found.confirmationToken === "string") newToken = found.confirmationToken;
    }
  } catch (error) {
    // An SDK that refuses a step (say, a result it cannot validate) is part of the transcript.
    if (typeof error?.code === "number") {
      step.error = { code: error.code, message: error.message.replace(/^MCP error -?\d+: /, "") };
    } else {
      step.exception = `${error?.name ?? "Error"}: ${error?.message ?? error}`;
    }
  }
  steps.push(step);
  return newToken;
}

// A second session to the same URL, for confirm-cross-session: its own client and transport.
async function openAnotherSession() {
  const http = { getStream: null, sessionDelete: null };
  const other = new sdk.Client(CLIENT_INFO, { capabilities: {} });
  let otherClosing = false;
  other.onerror = (error) => {
    if (!otherClosing) process.stderr.write(`client.mjs: second session: ${error?.message ?? error}\n`);
  };
  const otherTransport = makeTransport(async (input, init) => {
    const response = await fetch(input, init);
    const method = (init?.method ?? "GET").toUpperCase();
    if (method === "GET") http.getStream = response.status;
    else if (method === "DELETE") http.sessionDelete = response.status;
    return response;
  });
  await other.connect(otherTransport);
  const deadline = Date.now() + NOTIFICATION_WAIT_MS;
  while (http.getStream === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  await other.listTools();
  return {
    client: other,
    http,
    async close() {
      otherClosing = true;
      await otherTransport.terminateSession?.();
      await other.close();
    },
  };
}

const scripts = {
  async session() {
    await call("list_notes", {});
    await call("add_note", { name: "groceries", text: "milk, eggs" }, { announces: true });
    await call("get_note", { name: "groceries" });
    await call("get_note", { name: "missing" });
    await call("slow_count", { n: 5 }, { progress: true });
    await call("confirm_delete", { name: "groceries" }, { announces: true });
    await call("list_notes", {});
    await call("audit_log", {});
  },
  async call() {
    await call(options.tool, callArguments, { progress: true });
  },
  // A gateway's elicitation channel in one session: a held write, a held destructive call whose
  // upstream then asks its own question, and what the upstream really executed.
  async elicit() {
    await call("add_note", { name: "e", text: "1" });
    await call("confirm_delete", { name: "readme" });
    await call("audit_log", {});
  },
  // The token channel end to end in one session; the upstream's audit_log judges what ran.
  async confirm() {
    // (a) held, (b) redeemed once, (c) replayed.
    const held = { name: "held", text: "t" };
    const token = await confirmCall(client, "held", "add_note", held);
    await confirmCall(client, "confirmed", "add_note", held, { token, tokenIn: "argument" });
    await confirmCall(client, "replayed", "add_note", held, { token, tokenIn: "argument" });
    // (d) changed arguments, (e) another tool, (f) forged signature: all with one unredeemed token.
    const tokenA = await confirmCall(client, "held-a", "add_note", { name: "a", text: "1" });
    const withA = { token: tokenA, tokenIn: "argument" };
    await confirmCall(client, "changed-arguments", "add_note", { name: "a", text: "2" }, withA);
    await confirmCall(client, "other-tool", "delete_note", { name: "a" }, withA);
    const forged = { token: tokenA === null ? null : forge(tokenA), tokenIn: "forged-argument" };
    await confirmCall(client, "forged", "add_note", { name: "a", text: "1" }, forged);
    // (g) a flag the model wrote is not a confirmation.
    await confirmCall(client, "model-flag", "add_note", { name: "b", text: "x", confirm: true });
    // (h) the token in the request's _meta instead of the arguments.
    const readme = { name: "readme" };
    const tokenReadme = await confirmCall(client, "held-delete", "delete_note", readme);
    await confirmCall(client, "confirmed-meta", "delete_note", readme, { token: tokenReadme, tokenIn: "meta" });
    // (i) what the upstream really executed.
    await confirmCall(client, "audit", "audit_log", {});
  },
  // A token held in one session, redeemed in another (the first still open).
  async "confirm-cross-session"() {
    const args = { name: "x", text: "y" };
    const token = await confirmCall(client, "held", "add_note", args);
    const other = await openAnotherSession();
    await confirmCall(other.client, "other-session", "add_note", args, { token, tokenIn: "argument" });
    await confirmCall(other.client, "audit", "audit_log", {});
    await other.close();
    transcript.secondSession = { getStream: other.http.getStream, sessionDelete: other.http.sessionDelete };
  },
};

const transcript = { peer: PEER, mode: "legacy", script: options.script };
if (options.transport !== "streamable-http") transcript.transport = options.transport;
try {
  await client.connect(transport);
  transcript.protocolVersion = transport.protocolVersion ?? transport.negotiated ?? null;
  transcript.serverName = client.getServerVersion()?.name ?? null;
  // The SDK opens the GET stream right after `initialized` without waiting for it; wait
  // for its answer so notifications sent from then on are not dropped for lack of a stream.
  if (!(await waitFor(() => recorder.getStream !== null, recorder.getStreamWaiters, NOTIFICATION_WAIT_MS))) {
    process.stderr.write("client.mjs: the GET stream was not answered\n");
  }
  const { tools } = await client.listTools();
  transcript.tools = tools
    .map((tool) => ({
      name: tool.name,
      annotations: tool.annotations ?? null,
      outputSchema: tool.outputSchema !== undefined,
    }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  if (confirming) {
    // The gateway offers the token as an optional argument of every tool it holds.
    transcript.confirmationTokenArgument = tools
      .filter((tool) => tool.inputSchema?.properties?.[TOKEN_ARGUMENT] !== undefined)
      .map((tool) => tool.name)
      .sort();
  }
  await scripts[options.script]();
  transcript.steps = steps;
  if (options.script === "session") {
    // Only the session script waits for them, so only there is the list deterministic.
    transcript.unsolicitedNotifications = [...recorder.unsolicited].sort();
  }
  closing = true;
  // The SSE transport has no DELETE: closing its stream ends the session.
  await transport.terminateSession?.();
  await client.close();
} catch (error) {
  fail(`session against ${options.url} failed: ${error?.stack ?? error}`);
}
transcript.getStream = recorder.getStream;
transcript.sessionDelete = recorder.sessionDelete;
process.stdout.write(`${JSON.stringify(canonical(transcript), null, 2)}\n`, () => process.exit(0));
