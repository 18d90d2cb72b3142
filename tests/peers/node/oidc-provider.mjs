// A real OpenID Connect provider for the approval page's browser tests: the `oidc-provider`
// package on a free loopback port, with one confidential client (`countersign`) and four users
// in two groups. Its development login screen accepts any password; the login names the user.
//
//   node oidc-provider.mjs <redirect_uri>...
//
// Prints one JSON line, {"issuer": "http://127.0.0.1:<port>"}, once it is listening, and runs
// until killed. Test use only: its signing and cookie keys are the package's development ones.
import http from "node:http";
import Provider from "oidc-provider";

const GROUPS = { ada: ["dev"], bob: ["sre"], carol: ["sre"], mallory: [] };

const redirectUris = process.argv.slice(2);
if (redirectUris.length === 0) {
  console.error("usage: node oidc-provider.mjs <redirect_uri>...");
  process.exit(2);
}

const server = http.createServer();
server.listen(0, "127.0.0.1", () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: "countersign",
        client_secret: "countersign-test-secret",
        redirect_uris: redirectUris,
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
      },
    ],
    claims: { openid: ["sub"], profile: ["preferred_username"], groups: ["groups"] },
    scopes: ["openid", "profile", "groups"],
    // The page reads who logged in from the ID token, not from userinfo.
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    cookies: { keys: ["countersign-test-only-cookie-key"] },
    features: { devInteractions: { enabled: true } },
    async findAccount(_ctx, id) {
      return {
        accountId: id,
        async claims() {
          return { sub: id, preferred_username: id, groups: GROUPS[id] ?? [] };
        },
      };
    },
  });
  server.on("request", provider.callback());
  console.log(JSON.stringify({ issuer }));
});
