#!/usr/bin/env node
// conformance-upstream.mjs — the MCP upstream that countersign's conformance runs sit in front of.
//
// The server scenarios of `@modelcontextprotocol/conformance@0.1.16` (`conformance server --url …`)
// expect the server under test to expose a fixed set of `test_*` tools, prompts and resources. No
// published server provides them, so this file implements them, written from the scenario
// descriptions and from the checks the suite performs (see tests/peers/README.md).
//
// Shape:
//   * TypeScript SDK v1 (`@modelcontextprotocol/sdk@1.32.2`): one `McpServer` +
//     `StreamableHTTPServerTransport` per session, served by node:http on 127.0.0.1:<--port>/mcp.
//   * Stateful sessions (`Mcp-Session-Id` = randomUUID). POST/GET/DELETE with an unknown or deleted
//     session id get 404; a request without a session id that is not `initialize` gets 400.
//   * Resumability: an in-memory event store per session, so POST SSE streams start with a priming
//     event (`id:` + `retry:` + empty data, for clients that negotiated >= 2025-11-25) and a client can
//     reconnect with `GET` + `Last-Event-ID`.
//   * NO DNS-rebinding protection (no Host/Origin validation) on purpose: countersign, in front of
//     it, is what must provide that. The `dns-rebinding-protection` scenario therefore fails its
//     "rejected" half when run directly against this server, and must pass through the gateway.
//
// Usage:  node conformance-upstream.mjs --port 3100 [--host 127.0.0.1] [--session-idle-seconds 600] [--verbose]
// Prints exactly one line, `READY`, on stdout once listening; everything else goes to stderr.
// Sessions with no request in flight (an open GET stream counts) for --session-idle-seconds are
// closed, after which their id gets 404 like a deleted one (0 disables; conformance clients never
// DELETE their sessions).
//
// Module resolution: the SDK is loaded from $COUNTERSIGN_NODE_MODULES when that is set (a
// node_modules directory), otherwise by normal resolution from this file's directory
// (tests/peers/node/node_modules). Only `@modelcontextprotocol/sdk/...` is resolved from there; zod is
// the SDK's own dependency and is resolved from the SDK's location so the two always match. The SDK
// is loaded through `require` (its CommonJS build) so that one code path honours the package's
// `exports` map for both cases; every SDK module comes from the same build.

import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import process from 'node:process';

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

function parseArgs(argv) {
  const opts = { port: undefined, host: '127.0.0.1', verbose: false, sessionIdleSeconds: 600 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = a.includes('=') ? a.slice(a.indexOf('=') + 1) : argv[++i];
      if (v === undefined) usage(`missing value for ${a}`);
      return v;
    };
    if (a === '--port' || a.startsWith('--port=')) opts.port = Number(value());
    else if (a === '--host' || a.startsWith('--host=')) opts.host = value();
    else if (a === '--session-idle-seconds' || a.startsWith('--session-idle-seconds=')) opts.sessionIdleSeconds = Number(value());
    else if (a === '--verbose' || a === '-v') opts.verbose = true;
    else if (a === '--help' || a === '-h') usage();
    else usage(`unknown argument ${a}`);
  }
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) usage('--port N is required');
  if (!(opts.sessionIdleSeconds >= 0)) usage('--session-idle-seconds must be a number >= 0');
  return opts;
}

function usage(problem) {
  if (problem) process.stderr.write(`conformance-upstream: ${problem}\n`);
  process.stderr.write(
    'usage: conformance-upstream.mjs --port N [--host 127.0.0.1] [--session-idle-seconds 600] [--verbose]\n',
  );
  process.exit(problem ? 2 : 0);
}

const opts = parseArgs(process.argv.slice(2));
const log = (...parts) => process.stderr.write(`[conformance-upstream] ${parts.join(' ')}\n`);
const debug = opts.verbose ? log : () => {};

// ---------------------------------------------------------------------------------------------
// Module loading
// ---------------------------------------------------------------------------------------------

const requireBase = process.env.COUNTERSIGN_NODE_MODULES
  ? path.join(path.resolve(process.env.COUNTERSIGN_NODE_MODULES), '__countersign_resolve_base__.cjs')
  : fileURLToPath(import.meta.url);
const requireFromBase = createRequire(requireBase);

function loadSdk(subpath) {
  try {
    return requireFromBase(`@modelcontextprotocol/sdk/${subpath}`);
  } catch (err) {
    log(`cannot load @modelcontextprotocol/sdk/${subpath} (COUNTERSIGN_NODE_MODULES=${process.env.COUNTERSIGN_NODE_MODULES ?? 'unset'}): ${err.message}`);
    process.exit(1);
  }
}

const { McpServer, ResourceTemplate } = loadSdk('server/mcp.js');
const { StreamableHTTPServerTransport } = loadSdk('server/streamableHttp.js');
const { completable } = loadSdk('server/completable.js');
const {
  CreateMessageResultSchema,
  ElicitResultSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  isInitializeRequest,
} = loadSdk('types.js');
// zod: whatever copy the SDK itself resolves (it is a dependency of the SDK, not of ours).
const { z } = createRequire(requireFromBase.resolve('@modelcontextprotocol/sdk/server/mcp.js'))('zod');

// ---------------------------------------------------------------------------------------------
// Fixture data
// ---------------------------------------------------------------------------------------------

// A valid 1x1 red pixel PNG (IHDR 1x1 RGB8, one IDAT row `00 ff 00 00`, IEND).
const RED_PIXEL_PNG_BASE64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC';

// A valid, tiny WAV: RIFF/WAVE, PCM mono 8 kHz 8-bit, 80 samples (10 ms) of silence (0x80).
function makeSilentWavBase64() {
  const samples = 80;
  const buf = Buffer.alloc(44 + samples, 0x80);
  buf.write('RIFF', 0, 'ascii');
  buf.writeUInt32LE(36 + samples, 4);
  buf.write('WAVE', 8, 'ascii');
  buf.write('fmt ', 12, 'ascii');
  buf.writeUInt32LE(16, 16); // fmt chunk size
  buf.writeUInt16LE(1, 20); // PCM
  buf.writeUInt16LE(1, 22); // mono
  buf.writeUInt32LE(8000, 24); // sample rate
  buf.writeUInt32LE(8000, 28); // byte rate
  buf.writeUInt16LE(1, 32); // block align
  buf.writeUInt16LE(8, 34); // bits per sample
  buf.write('data', 36, 'ascii');
  buf.writeUInt32LE(samples, 40);
  return buf.toString('base64');
}
const SILENT_WAV_BASE64 = makeSilentWavBase64();

const JSON_SCHEMA_2020_12_TOOL = 'json_schema_2020_12_tool';
// Hand-written input schema for the json-schema-2020-12 scenario (pending in 0.1.16): it checks that
// `$schema`, `$defs` and `additionalProperties` survive into `tools/list`. McpServer always renders
// zod as draft-07 without `$defs`, so this schema is substituted into the listing (see wrapSend).
const JSON_SCHEMA_2020_12_INPUT = Object.freeze({
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: {
    address: {
      type: 'object',
      properties: { street: { type: 'string' }, city: { type: 'string' } },
    },
  },
  properties: {
    name: { type: 'string' },
    address: { $ref: '#/$defs/address' },
  },
  additionalProperties: false,
});

const COMPLETION_CANDIDATES = ['paris', 'park', 'party', 'test', 'testing', 'test-value'];

// Logging levels in increasing severity (RFC 5424 order used by MCP).
const LOG_LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (t) => ({ type: 'text', text: t });

// ---------------------------------------------------------------------------------------------
// Event store (resumability). One per session; ids are `<streamId>:<seq>` so the stream of any event
// is recoverable, and replay sends every later event of that same stream.
// ---------------------------------------------------------------------------------------------

class MemoryEventStore {
  constructor() {
    this.seq = 0;
    this.events = new Map(); // eventId -> { streamId, seq, message }
  }

  async storeEvent(streamId, message) {
    const seq = ++this.seq;
    const eventId = `${streamId}:${seq}`;
    this.events.set(eventId, { streamId, seq, message });
    return eventId;
  }

  async getStreamIdForEventId(eventId) {
    return this.events.get(eventId)?.streamId;
  }

  async replayEventsAfter(lastEventId, { send }) {
    const last = this.events.get(lastEventId);
    if (!last) return '';
    for (const [eventId, ev] of this.events) {
      // Priming events are stored as `{}`: they carry no JSON-RPC message and are not replayed.
      if (ev.streamId !== last.streamId || ev.seq <= last.seq || !ev.message || !('jsonrpc' in ev.message)) continue;
      await send(eventId, ev.message);
    }
    return last.streamId;
  }
}

// ---------------------------------------------------------------------------------------------
// One MCP server per session
// ---------------------------------------------------------------------------------------------

function buildSession() {
  const state = {
    logLevel: undefined, // unset => everything is sent
    subscriptions: new Set(),
    watchedRevision: 1,
  };

  const eventStore = new MemoryEventStore();
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    eventStore,
    retryInterval: 1000,
    onsessioninitialized: (sid) => {
      sessions.set(sid, transport);
      debug(`session ${sid} initialized (${sessions.size} open)`);
    },
    onsessionclosed: (sid) => {
      sessions.delete(sid);
      debug(`session ${sid} deleted by client (${sessions.size} open)`);
    },
  });
  transport.onerror = (err) => debug(`transport error: ${err?.message ?? err}`);

  const mcp = new McpServer(
    { name: 'countersign-conformance-upstream', version: '1.0.0' },
    {
      capabilities: {
        logging: {},
        completions: {},
        resources: { subscribe: true, listChanged: true },
        tools: { listChanged: true },
        prompts: { listChanged: true },
      },
      instructions: 'Fixture server for the MCP conformance suite (countersign tests).',
    },
  );
  const clientCaps = () => mcp.server.getClientCapabilities() ?? {};

  // Log notifications travel on the originating request's stream (relatedRequestId via
  // extra.sendNotification) and honour the level set with logging/setLevel.
  const shouldLog = (level) =>
    state.logLevel === undefined || LOG_LEVELS.indexOf(level) >= LOG_LEVELS.indexOf(state.logLevel);
  const logTo = async (extra, level, data) => {
    if (!shouldLog(level)) return;
    await extra.sendNotification({
      method: 'notifications/message',
      params: { level, logger: 'conformance-upstream', data },
    });
  };

  // ---- tools --------------------------------------------------------------------------------
  // McpServer calls a tool handler as (args, extra) when the tool has an inputSchema and as
  // (extra) when it has none.

  mcp.registerTool(
    'test_simple_text',
    { description: 'Returns a single text content item.' },
    async () => ({ content: [text('This is a simple text response for testing.')] }),
  );

  mcp.registerTool(
    'test_image_content',
    { description: 'Returns a 1x1 red PNG as image content.' },
    async () => ({ content: [{ type: 'image', data: RED_PIXEL_PNG_BASE64, mimeType: 'image/png' }] }),
  );

  mcp.registerTool(
    'test_audio_content',
    { description: 'Returns a short silent WAV as audio content.' },
    async () => ({ content: [{ type: 'audio', data: SILENT_WAV_BASE64, mimeType: 'audio/wav' }] }),
  );

  mcp.registerTool(
    'test_embedded_resource',
    { description: 'Returns an embedded text resource.' },
    async () => ({
      content: [
        {
          type: 'resource',
          resource: {
            uri: 'test://embedded-resource',
            mimeType: 'text/plain',
            text: 'This is an embedded resource content.',
          },
        },
      ],
    }),
  );

  mcp.registerTool(
    'test_multiple_content_types',
    { description: 'Returns text, image and embedded resource content together.' },
    async () => ({
      content: [
        text('Multiple content types test:'),
        { type: 'image', data: RED_PIXEL_PNG_BASE64, mimeType: 'image/png' },
        {
          type: 'resource',
          resource: {
            uri: 'test://mixed-content-resource',
            mimeType: 'application/json',
            text: JSON.stringify({ test: 'data', value: 123 }),
          },
        },
      ],
    }),
  );

  mcp.registerTool(
    'test_tool_with_logging',
    { description: 'Sends three info-level log notifications, 50 ms apart, while running.' },
    async (extra) => {
      await logTo(extra, 'info', 'Tool execution started');
      await sleep(50);
      await logTo(extra, 'info', 'Tool processing data');
      await sleep(50);
      await logTo(extra, 'info', 'Tool execution completed');
      return { content: [text('Tool with logging executed successfully')] };
    },
  );

  mcp.registerTool(
    'test_tool_with_progress',
    { description: 'Reports progress 0/100, 50/100, 100/100 (50 ms apart) when given a progressToken.' },
    async (extra) => {
      const progressToken = extra._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (progressToken !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress, total: 100, message: `step ${progress}/100` },
          });
        }
        if (progress !== 100) await sleep(50);
      }
      return { content: [text('Tool with progress executed successfully')] };
    },
  );

  mcp.registerTool(
    'test_error_handling',
    { description: 'Always fails with a tool-level error (isError: true).' },
    async () => ({
      isError: true,
      content: [text('This tool intentionally returns an error for testing')],
    }),
  );

  mcp.registerTool(
    'test_sampling',
    {
      description: 'Asks the client to sample an LLM completion (sampling/createMessage) for the prompt.',
      inputSchema: { prompt: z.string().describe('The prompt to send to the LLM') },
    },
    async ({ prompt }, extra) => {
      if (!clientCaps().sampling) {
        return { isError: true, content: [text('Client does not support sampling (no sampling capability)')] };
      }
      const result = await extra.sendRequest(
        {
          method: 'sampling/createMessage',
          params: { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 },
        },
        CreateMessageResultSchema,
      );
      const reply = result.content?.type === 'text' ? result.content.text : JSON.stringify(result.content);
      return { content: [text(`LLM response: ${reply}`)] };
    },
  );

  const elicit = async (extra, params) => {
    return extra.sendRequest({ method: 'elicitation/create', params }, ElicitResultSchema);
  };
  const noElicitation = () => ({
    isError: true,
    content: [text('Client does not support elicitation (no elicitation capability)')],
  });

  mcp.registerTool(
    'test_elicitation',
    {
      description: 'Asks the user (elicitation/create, form mode) for a username and an email address.',
      inputSchema: { message: z.string().describe('The message to show the user') },
    },
    async ({ message }, extra) => {
      if (!clientCaps().elicitation) return noElicitation();
      const result = await elicit(extra, {
        message,
        requestedSchema: {
          type: 'object',
          properties: {
            username: { type: 'string', description: "User's response" },
            email: { type: 'string', description: "User's email address" },
          },
          required: ['username', 'email'],
        },
      });
      return {
        content: [text(`User response: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`)],
      };
    },
  );

  mcp.registerTool(
    'test_elicitation_sep1034_defaults',
    { description: 'Elicits a form whose primitive fields all carry default values (SEP-1034).' },
    async (extra) => {
      if (!clientCaps().elicitation) return noElicitation();
      const result = await elicit(extra, {
        message: 'Please review your profile (every field has a default).',
        requestedSchema: {
          type: 'object',
          properties: {
            name: { type: 'string', title: 'Name', default: 'John Doe' },
            age: { type: 'integer', title: 'Age', minimum: 0, default: 30 },
            score: { type: 'number', title: 'Score', minimum: 0, maximum: 100, default: 95.5 },
            status: { type: 'string', title: 'Status', enum: ['active', 'inactive', 'pending'], default: 'active' },
            verified: { type: 'boolean', title: 'Verified', default: true },
          },
        },
      });
      return {
        content: [
          text(`Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`),
        ],
      };
    },
  );

  mcp.registerTool(
    'test_elicitation_sep1330_enums',
    { description: 'Elicits a form using all five enum schema shapes (SEP-1330).' },
    async (extra) => {
      if (!clientCaps().elicitation) return noElicitation();
      const result = await elicit(extra, {
        message: 'Please pick some options.',
        requestedSchema: {
          type: 'object',
          properties: {
            untitledSingle: { type: 'string', title: 'Untitled single-select', enum: ['option1', 'option2', 'option3'] },
            titledSingle: {
              type: 'string',
              title: 'Titled single-select',
              oneOf: [
                { const: 'value1', title: 'First Option' },
                { const: 'value2', title: 'Second Option' },
                { const: 'value3', title: 'Third Option' },
              ],
            },
            legacyEnum: {
              type: 'string',
              title: 'Legacy titled enum',
              enum: ['opt1', 'opt2', 'opt3'],
              enumNames: ['Option One', 'Option Two', 'Option Three'],
            },
            untitledMulti: {
              type: 'array',
              title: 'Untitled multi-select',
              items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
            },
            titledMulti: {
              type: 'array',
              title: 'Titled multi-select',
              items: {
                anyOf: [
                  { const: 'value1', title: 'First Choice' },
                  { const: 'value2', title: 'Second Choice' },
                  { const: 'value3', title: 'Third Choice' },
                ],
              },
            },
          },
        },
      });
      return {
        content: [
          text(`Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`),
        ],
      };
    },
  );

  // server-sse-polling (pending in 0.1.16, SEP-1699): close the POST SSE stream before the result
  // exists, so the client has to resume with GET + Last-Event-ID. A log event is written first so
  // the stream has an event id to resume from even when no priming event was sent (the scenario's
  // raw POST declares MCP-Protocol-Version 2025-03-26, for which the SDK sends no priming event and
  // offers no extra.closeSSEStream; the transport's own closeSSEStream is used then).
  mcp.registerTool(
    'test_reconnection',
    { description: 'Closes its SSE stream mid-call; the result is delivered after the client resumes.' },
    async (extra) => {
      await extra.sendNotification({
        method: 'notifications/message',
        params: { level: 'info', logger: 'conformance-upstream', data: 'closing the stream; reconnect for the result' },
      });
      if (extra.closeSSEStream) extra.closeSSEStream();
      else transport.closeSSEStream(extra.requestId);
      await sleep(200);
      return { content: [text('Reconnection test completed: result delivered after the stream was closed')] };
    },
  );

  mcp.registerTool(
    JSON_SCHEMA_2020_12_TOOL,
    {
      description: 'Tool with JSON Schema 2020-12 features',
      inputSchema: z
        .object({
          name: z.string().optional(),
          address: z.object({ street: z.string().optional(), city: z.string().optional() }).optional(),
        })
        .strict(),
    },
    async (args) => ({ content: [text(`Received: ${JSON.stringify(args)}`)] }),
  );

  // listChanged: toggling test_dynamic_tool makes McpServer emit notifications/tools/list_changed,
  // which is not tied to a request and therefore travels on the standalone GET stream.
  const dynamicTool = mcp.registerTool(
    'test_dynamic_tool',
    { description: 'Only listed after test_toggle_dynamic_tool enabled it.' },
    async () => ({ content: [text('Dynamic tool called')] }),
  );
  dynamicTool.disable(); // not connected yet: no notification
  mcp.registerTool(
    'test_toggle_dynamic_tool',
    { description: 'Enables/disables test_dynamic_tool (emits notifications/tools/list_changed).' },
    async () => {
      if (dynamicTool.enabled) dynamicTool.disable();
      else dynamicTool.enable();
      return { content: [text(`test_dynamic_tool is now ${dynamicTool.enabled ? 'enabled' : 'disabled'}`)] };
    },
  );

  // Resource updates: bumps test://watched-resource and, if this session subscribed to it, sends
  // notifications/resources/updated (standalone GET stream).
  mcp.registerTool(
    'test_update_watched_resource',
    { description: 'Changes test://watched-resource and notifies subscribers (notifications/resources/updated).' },
    async () => {
      state.watchedRevision += 1;
      const subscribed = state.subscriptions.has('test://watched-resource');
      if (subscribed) await mcp.server.sendResourceUpdated({ uri: 'test://watched-resource' });
      return {
        content: [
          text(`test://watched-resource is now revision ${state.watchedRevision}; notification ${subscribed ? 'sent' : 'not sent (not subscribed)'}`),
        ],
      };
    },
  );

  // ---- resources ----------------------------------------------------------------------------

  mcp.registerResource(
    'static-text',
    'test://static-text',
    { title: 'Static text', description: 'A static text resource.', mimeType: 'text/plain' },
    async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
    }),
  );

  mcp.registerResource(
    'static-binary',
    'test://static-binary',
    { title: 'Static binary', description: 'A static binary resource (1x1 red PNG).', mimeType: 'image/png' },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'image/png', blob: RED_PIXEL_PNG_BASE64 }] }),
  );

  mcp.registerResource(
    'watched-resource',
    'test://watched-resource',
    { title: 'Watched resource', description: 'A resource clients can subscribe to.', mimeType: 'text/plain' },
    async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'text/plain', text: `Watched resource, revision ${state.watchedRevision}.` }],
    }),
  );

  mcp.registerResource(
    'template-data',
    new ResourceTemplate('test://template/{id}/data', {
      list: undefined,
      complete: { id: (value) => ['1', '123', '42'].filter((id) => id.startsWith(value ?? '')) },
    }),
    { title: 'Templated data', description: 'Data for the id in the URI.', mimeType: 'application/json' },
    async (uri, { id }) => ({
      contents: [
        {
          uri: uri.href,
          mimeType: 'application/json',
          text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
        },
      ],
    }),
  );

  mcp.server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    state.subscriptions.add(req.params.uri);
    return {};
  });
  mcp.server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    state.subscriptions.delete(req.params.uri);
    return {};
  });

  // ---- prompts ------------------------------------------------------------------------------

  mcp.registerPrompt(
    'test_simple_prompt',
    { description: 'A prompt without arguments.' },
    async () => ({ messages: [{ role: 'user', content: text('This is a simple prompt for testing.') }] }),
  );

  mcp.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two required arguments.',
      argsSchema: {
        arg1: completable(z.string().describe('First test argument'), (value) =>
          COMPLETION_CANDIDATES.filter((c) => c.startsWith(value ?? '')),
        ),
        arg2: z.string().describe('Second test argument'),
      },
    },
    async ({ arg1, arg2 }) => ({
      messages: [{ role: 'user', content: text(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`) }],
    }),
  );

  mcp.registerPrompt(
    'test_prompt_with_embedded_resource',
    {
      description: 'A prompt that embeds the resource named by resourceUri.',
      argsSchema: { resourceUri: z.string().describe('URI of the resource to embed') },
    },
    async ({ resourceUri }) => ({
      messages: [
        {
          role: 'user',
          content: {
            type: 'resource',
            resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
          },
        },
        { role: 'user', content: text('Please process the embedded resource above.') },
      ],
    }),
  );

  mcp.registerPrompt(
    'test_prompt_with_image',
    { description: 'A prompt containing an image.' },
    async () => ({
      messages: [
        { role: 'user', content: { type: 'image', data: RED_PIXEL_PNG_BASE64, mimeType: 'image/png' } },
        { role: 'user', content: text('Please analyze the image above.') },
      ],
    }),
  );

  // ---- logging ------------------------------------------------------------------------------

  // Replaces the SDK's own handler so the level is kept where the tools above can see it.
  mcp.server.setRequestHandler(SetLevelRequestSchema, async (req) => {
    state.logLevel = req.params.level;
    return {};
  });

  return { mcp, transport };
}

// Substitutes the hand-written 2020-12 schema into every tools/list result (see above).
function wrapSend(transport) {
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    const tools = message?.result?.tools;
    if (Array.isArray(tools) && tools.some((t) => t?.name === JSON_SCHEMA_2020_12_TOOL)) {
      message = {
        ...message,
        result: {
          ...message.result,
          tools: tools.map((t) =>
            t?.name === JSON_SCHEMA_2020_12_TOOL ? { ...t, inputSchema: structuredClone(JSON_SCHEMA_2020_12_INPUT) } : t,
          ),
        },
      };
    }
    return send(message, options);
  };
}

// ---------------------------------------------------------------------------------------------
// HTTP front: routing by Mcp-Session-Id
// ---------------------------------------------------------------------------------------------

/** @type {Map<string, StreamableHTTPServerTransport>} */
const sessions = new Map();
/** @type {WeakMap<StreamableHTTPServerTransport, {inFlight: number, lastSeen: number}>} */
const activity = new WeakMap();
const MAX_BODY = 4 * 1024 * 1024;

// Hands a request to a session's transport, tracking in-flight requests for the idle reaper.
function serve(transport, req, res, body) {
  let a = activity.get(transport);
  if (!a) activity.set(transport, (a = { inFlight: 0, lastSeen: Date.now() }));
  a.inFlight += 1;
  res.on('close', () => {
    a.inFlight -= 1;
    a.lastSeen = Date.now();
  });
  return transport.handleRequest(req, res, body);
}

if (opts.sessionIdleSeconds > 0) {
  const idleMs = opts.sessionIdleSeconds * 1000;
  setInterval(() => {
    const now = Date.now();
    for (const [sid, transport] of sessions) {
      const a = activity.get(transport);
      if (a && a.inFlight === 0 && now - a.lastSeen > idleMs) {
        debug(`session ${sid} idle for ${Math.round((now - a.lastSeen) / 1000)} s: closing`);
        sessions.delete(sid);
        transport.close().catch(() => {});
      }
    }
  }, Math.min(idleMs, 60_000)).unref();
}

function sendJsonRpcError(res, status, code, message, headers = {}) {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY) throw Object.assign(new Error('body too large'), { tooLarge: true });
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function containsInitialize(body) {
  return Array.isArray(body) ? body.some((m) => isInitializeRequest(m)) : isInitializeRequest(body);
}

async function handle(req, res) {
  const url = new URL(req.url ?? '/', 'http://upstream.invalid');
  if (url.pathname !== '/mcp') {
    res.writeHead(404, { 'Content-Type': 'text/plain' });
    return void res.end('not found\n');
  }
  const sid = req.headers['mcp-session-id'];
  const method = req.method ?? 'GET';

  if (method === 'POST') {
    let body;
    try {
      const raw = await readBody(req);
      body = JSON.parse(raw);
    } catch (err) {
      return err.tooLarge
        ? sendJsonRpcError(res, 413, -32000, 'Payload too large')
        : sendJsonRpcError(res, 400, -32700, 'Parse error: invalid JSON');
    }
    if (sid !== undefined) {
      const transport = sessions.get(sid);
      if (!transport) return sendJsonRpcError(res, 404, -32001, 'Session not found');
      return serve(transport, req, res, body);
    }
    if (!containsInitialize(body)) {
      return sendJsonRpcError(res, 400, -32000, 'Bad Request: Mcp-Session-Id header is required');
    }
    const { mcp, transport } = buildSession();
    wrapSend(transport);
    transport.onclose = () => {
      if (transport.sessionId !== undefined && sessions.get(transport.sessionId) === transport) {
        sessions.delete(transport.sessionId);
      }
    };
    await mcp.connect(transport);
    return serve(transport, req, res, body);
  }

  if (method === 'GET' || method === 'DELETE') {
    if (sid === undefined) return sendJsonRpcError(res, 400, -32000, 'Bad Request: Mcp-Session-Id header is required');
    const transport = sessions.get(sid);
    if (!transport) return sendJsonRpcError(res, 404, -32001, 'Session not found');
    return serve(transport, req, res);
  }

  return sendJsonRpcError(res, 405, -32000, 'Method not allowed', { Allow: 'GET, POST, DELETE' });
}

const server = createServer((req, res) => {
  const started = Date.now();
  res.on('close', () =>
    debug(`${req.method} ${req.url} sid=${req.headers['mcp-session-id'] ?? '-'} -> ${res.statusCode} (${Date.now() - started} ms)`),
  );
  handle(req, res).catch((err) => {
    log(`error handling ${req.method} ${req.url}: ${err?.stack ?? err}`);
    sendJsonRpcError(res, 500, -32603, 'Internal error');
  });
});

server.on('error', (err) => {
  log(`listen failed: ${err.message}`);
  process.exit(1);
});

server.listen(opts.port, opts.host, () => {
  const { port } = server.address();
  log(`listening on http://${opts.host}:${port}/mcp`);
  process.stdout.write('READY\n');
});

let shuttingDown = false;
async function shutdown(signal) {
  if (shuttingDown) return;
  shuttingDown = true;
  debug(`${signal}: closing ${sessions.size} session(s)`);
  await Promise.allSettled([...sessions.values()].map((t) => t.close()));
  server.close();
  server.closeAllConnections?.();
  process.exit(0);
}
process.on('SIGINT', () => shutdown('SIGINT'));
process.on('SIGTERM', () => shutdown('SIGTERM'));
