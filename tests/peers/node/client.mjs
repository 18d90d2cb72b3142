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
//
// The SDK speaks only the handshake revisions (it negotiates 2025-11-25): initialize,
// Mcp-Session-Id, a GET stream opened right after `initialized`, and the session is
// ended with DELETE (transport.terminateSession()) before client.close().
//
// Exit status: 0 when the script ran to the end (tool errors and JSON-RPC errors of
// single calls are part of the transcript), 1 when it could not talk to the server,
// 2 on bad usage. Diagnostics go to stderr.

import { parseArgs } from "node:util";

const PEER = "typescript-sdk";
// Unsolicited notifications (GET stream) are awaited this long after a call that should cause one.
const NOTIFICATION_WAIT_MS = 5000;
const CALL_TIMEOUT_MS = 120000;

function fail(message, status = 1) {
  process.stderr.write(`client.mjs: ${message}\n`);
  process.exit(status);
}

let sdk;
try {
  const [clientMod, transportMod, typesMod] = await Promise.all([
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/client/streamableHttp.js"),
    import("@modelcontextprotocol/sdk/types.js"),
  ]);
  sdk = { ...clientMod, ...transportMod, ...typesMod };
} catch (error) {
  fail(
    `cannot load @modelcontextprotocol/sdk (${error.message}); run scripts/install-test-tools.sh`,
    2,
  );
}

function usage(message) {
  fail(
    `${message}\nusage: node client.mjs --url URL --script session|call [--tool NAME] [--args JSON] ` +
      "[--elicit accept|decline|cancel]",
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
    },
    strict: true,
  }));
} catch (error) {
  usage(error.message);
}
if (!options.url) usage("--url is required");
if (!["session", "call"].includes(options.script)) usage("--script must be session or call");
if (!["accept", "decline", "cancel"].includes(options.elicit)) usage("--elicit must be accept, decline or cancel");
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

const client = new sdk.Client(
  { name: "countersign-e2e-typescript", version: "1.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);

client.setRequestHandler(sdk.ElicitRequestSchema, async (request) => {
  const params = request.params;
  const mode = params.mode ?? "form";
  const seen = { mode, message: params.message, action: options.elicit };
  const properties = params.requestedSchema?.properties;
  let content;
  if (properties) {
    seen.fields = Object.keys(properties).sort();
    content = Object.fromEntries(Object.entries(properties).map(([k, p]) => [k, affirmativeValue(p)]));
  }
  recorder.elicitations.push(seen);
  if (options.elicit !== "accept") return { action: options.elicit };
  return mode === "form" ? { action: "accept", content: content ?? {} } : { action: "accept" };
});

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

const transport = new sdk.StreamableHTTPClientTransport(url, { fetch: recordingFetch });
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
};

const transcript = { peer: PEER, mode: "legacy", script: options.script };
try {
  await client.connect(transport);
  transcript.protocolVersion = transport.protocolVersion ?? null;
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
  await scripts[options.script]();
  transcript.steps = steps;
  if (options.script === "session") {
    // Only the session script waits for them, so only there is the list deterministic.
    transcript.unsolicitedNotifications = [...recorder.unsolicited].sort();
  }
  closing = true;
  await transport.terminateSession();
  await client.close();
} catch (error) {
  fail(`session against ${options.url} failed: ${error?.stack ?? error}`);
}
transcript.getStream = recorder.getStream;
transcript.sessionDelete = recorder.sessionDelete;
process.stdout.write(`${JSON.stringify(canonical(transcript), null, 2)}\n`, () => process.exit(0));
