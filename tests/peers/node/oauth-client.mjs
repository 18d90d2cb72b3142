#!/usr/bin/env node
// A real MCP client that authorizes itself the way the MCP authorization spec describes: the
// TypeScript SDK v1's StreamableHTTPClientTransport with its OAuth support
// (ClientCredentialsProvider: the client_credentials grant, for a machine client with no
// browser). Nothing is configured but the server URL, the client's credentials, the scope it
// wants and the issuer it expects: the SDK finds everything else itself — the 401's `resource_metadata`, the
// protected-resource metadata, the authorization server's metadata, the resource to ask a
// token for (RFC 8707).
//
// Usage:
//   node oauth-client.mjs --url URL --client-id ID --client-secret SECRET --issuer URL
//                         [--scope SCOPE] [--read TOOL] [--write TOOL --write-args JSON]
//
// Connects, lists the tools, calls --read (arguments {}) and --write (held by a gateway: the
// call is sent again with the confirmation token the gateway returned), and prints one JSON
// document on stdout:
//   {"http": [{"method", "url", "status"}...],  every HTTP exchange the SDK made, in order
//    "tools": [names], "read": result, "held": result, "confirmed": result}
// Exit status: 0 when the script ran to the end, 1 when it could not connect or authorize,
// 2 on bad usage. Diagnostics go to stderr.

import { parseArgs } from "node:util";

const CONFIRMATION_META = "countersign/confirmation";
const TOKEN_ARGUMENT = "confirmationToken";

let options;
try {
  ({ values: options } = parseArgs({
    options: {
      url: { type: "string" },
      "client-id": { type: "string" },
      "client-secret": { type: "string" },
      issuer: { type: "string" },
      scope: { type: "string" },
      read: { type: "string" },
      write: { type: "string" },
      "write-args": { type: "string", default: "{}" },
    },
  }));
} catch (error) {
  process.stderr.write(`oauth-client.mjs: ${error.message}\n`);
  process.exit(2);
}
for (const required of ["url", "client-id", "client-secret", "issuer"]) {
  if (!options[required]) {
    process.stderr.write(`oauth-client.mjs: --${required} is required\n`);
    process.exit(2);
  }
}

const sdk = {
  ...(await import("@modelcontextprotocol/sdk/client/index.js")),
  ...(await import("@modelcontextprotocol/sdk/client/streamableHttp.js")),
  ...(await import("@modelcontextprotocol/sdk/client/auth-extensions.js")),
};

// Every exchange, as the SDK made it (the transport and its OAuth discovery share fetchFn).
const http = [];
async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const url = typeof input === "string" ? input : input.url ?? String(input);
  http.push({ method: init?.method ?? "GET", url, status: response.status });
  return response;
}

const provider = new sdk.ClientCredentialsProvider({
  clientId: options["client-id"],
  clientSecret: options["client-secret"],
  expectedIssuer: options.issuer,
  // The SDK asks for exactly this scope in the client_credentials grant.
  scope: options.scope,
});
const transport = new sdk.StreamableHTTPClientTransport(new URL(options.url), {
  authProvider: provider,
  fetch: recordingFetch,
});
const client = new sdk.Client({ name: "countersign-oauth-client", version: "0.0.0" });

const transcript = { http };
try {
  await client.connect(transport);
  transcript.tools = (await client.listTools()).tools.map((tool) => tool.name).sort();
  if (options.read) {
    transcript.read = await client.callTool({ name: options.read, arguments: {} });
  }
  if (options.write) {
    const args = JSON.parse(options["write-args"]);
    const held = await client.callTool({ name: options.write, arguments: args });
    transcript.held = held;
    const token = held?._meta?.[CONFIRMATION_META]?.confirmationToken;
    if (typeof token === "string") {
      transcript.confirmed = await client.callTool({
        name: options.write,
        arguments: { ...args, [TOKEN_ARGUMENT]: token },
      });
    }
  }
  await transport.terminateSession().catch(() => {});
  await client.close();
} catch (error) {
  process.stderr.write(`oauth-client.mjs: ${error?.stack ?? error}\n`);
  transcript.error = `${error?.name ?? "Error"}: ${error?.message ?? error}`;
  process.stdout.write(`${JSON.stringify(transcript)}\n`);
  process.exit(1);
}
process.stdout.write(`${JSON.stringify(transcript)}\n`);
