// A real OAuth authorization server issuing JWT access tokens for one resource (an MCP
// endpoint of the gateway): the `oidc-provider` package on a free loopback port, with the
// `client_credentials` grant and resource indicators (RFC 8707, `accessTokenFormat: 'jwt'`);
// a token request for any other resource is refused (`invalid_target`).
// Each client is a user of the tests (ada[dev], bob[sre], carol[sre], mallory[]); its
// `client_id` is the token's `sub`, and `groups` is added to the token.
//
//   node oidc-token-provider.mjs <resource>
//
// Prints {"issuer": "http://127.0.0.1:<port>"} once listening, then serves, besides the
// provider itself, two test-only endpoints:
//   POST /test/rotate  a new signing key replaces the current one (new `kid`); the JWKS then
//                      publishes only the new key, as after a provider's key rotation.
//   POST /test/sign    {"claims": {...}, "key": "current"|"stranger", "alg": "ES256"|"none"|
//                      "HS256-public"} -> {"token": "..."}: a token signed with the provider's
//                      real current key (or a key it never published, or not at all, or HMAC
//                      keyed with its public key), for the forgeries the gateway must refuse.
// Test use only.
import crypto from "node:crypto";
import http from "node:http";
import Provider, { errors } from "oidc-provider";

const GROUPS = { ada: ["dev"], bob: ["sre"], carol: ["sre"], mallory: [] };
const resource = process.argv[2];
if (!resource) {
  console.error("usage: node oidc-token-provider.mjs <resource>");
  process.exit(2);
}

let generation = 0;
function newKey() {
  generation += 1;
  const { privateKey } = crypto.generateKeyPairSync("ec", { namedCurve: "P-256" });
  const jwk = privateKey.export({ format: "jwk" });
  return { ...jwk, kid: `key-${generation}`, alg: "ES256", use: "sig" };
}

const b64 = (data) => Buffer.from(data).toString("base64url");

function sign(claims, key, alg) {
  if (alg === "none") {
    return `${b64(JSON.stringify({ alg: "none", typ: "JWT" }))}.${b64(JSON.stringify(claims))}.`;
  }
  if (alg === "HS256-public") {
    // The classic confusion: the public key used as an HMAC secret.
    const publicPem = crypto
      .createPublicKey({ key: key, format: "jwk" })
      .export({ type: "spki", format: "pem" });
    const input = `${b64(JSON.stringify({ alg: "HS256", typ: "JWT", kid: key.kid }))}.${b64(JSON.stringify(claims))}`;
    const mac = crypto.createHmac("sha256", publicPem).update(input).digest();
    return `${input}.${b64(mac)}`;
  }
  const input = `${b64(JSON.stringify({ alg: "ES256", typ: "at+jwt", kid: key.kid }))}.${b64(JSON.stringify(claims))}`;
  const signature = crypto.sign("sha256", Buffer.from(input), {
    key: crypto.createPrivateKey({ key, format: "jwk" }),
    dsaEncoding: "ieee-p1363",
  });
  return `${input}.${b64(signature)}`;
}

const server = http.createServer();
server.listen(0, "127.0.0.1", () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  let current = newKey();
  const stranger = { ...newKey(), kid: "stranger" };
  generation = 1;

  function makeProvider() {
    const provider = new Provider(issuer, {
      clients: Object.keys(GROUPS).map((id) => ({
        client_id: id,
        client_secret: `${id}-secret`,
        grant_types: ["client_credentials"],
        response_types: [],
        redirect_uris: [],
        token_endpoint_auth_method: "client_secret_basic",
        id_token_signed_response_alg: "ES256",
      })),
      jwks: { keys: [current] },
      scopes: ["mcp"],
      features: {
        clientCredentials: { enabled: true },
        devInteractions: { enabled: false },
        resourceIndicators: {
          enabled: true,
          defaultResource: () => resource,
          useGrantedResource: () => true,
          // Tokens for the one resource only: a client that asks for any other (say, the URL of
          // the server behind a gateway) is refused, as a real deployment's provider would.
          getResourceServerInfo: (_ctx, indicator) => {
            if (indicator !== resource) throw new errors.InvalidTarget();
            return {
              scope: "mcp",
              audience: resource,
              accessTokenFormat: "jwt",
              jwt: { sign: { alg: "ES256" } },
            };
          },
        },
      },
      async extraTokenClaims(_ctx, token) {
        return { groups: GROUPS[token.clientId] ?? [] };
      },
      cookies: { keys: ["countersign-test-only-cookie-key"] },
    });
    return provider.callback();
  }

  let callback = makeProvider();
  server.on("request", (req, res) => {
    if (req.method === "POST" && req.url === "/test/rotate") {
      current = newKey();
      callback = makeProvider();
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ kid: current.kid }));
      return;
    }
    if (req.method === "POST" && req.url === "/test/sign") {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        const { claims, key, alg } = JSON.parse(body);
        const token = sign(claims, key === "stranger" ? stranger : current, alg ?? "ES256");
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ token }));
      });
      return;
    }
    callback(req, res);
  });
  console.log(JSON.stringify({ issuer }));
});
