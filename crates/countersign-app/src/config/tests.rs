use super::*;
use countersign_proxy::config::{ProcessSharing, Transport};

fn validate(yaml: &str) -> anyhow::Result<Config> {
    RawConfig::from_yaml(yaml)?.validate()
}

#[test]
fn minimal_config_gets_documented_defaults() {
    let config = validate("upstreams:\n  - url: http://127.0.0.1:3001/mcp\n").expect("valid");
    assert_eq!(config.listen, "127.0.0.1:8080".parse().expect("addr"));
    assert_eq!(config.admin, Some("127.0.0.1:9090".parse().expect("addr")));
    let route = &config.proxy.routes[0];
    assert_eq!(route.path, "/mcp");
    assert_eq!(route.upstream.name, "default");
    assert_eq!(route.upstream.response_timeout, Duration::from_secs(60));
    assert_eq!(config.proxy.limits.max_body_bytes.get(), 4 << 20);
    assert_eq!(config.proxy.limits.max_json_depth.get(), 64);
    // Loopback listener: loopback hosts only.
    assert!(config.proxy.hosts.allowed.is_some());
}

#[test]
fn unknown_keys_are_errors() {
    let error =
        validate("upstreams:\n  - url: http://127.0.0.1:3001/mcp\nlisten_addr: 0.0.0.0:1\n")
            .expect_err("unknown key");
    assert!(format!("{error:#}").contains("listen_addr"), "{error:#}");
    assert!(validate("upstreams:\n  - url: http://127.0.0.1:3001/mcp\n    timeout: 1s\n").is_err());
    assert!(validate("upstreams:\n  - url: http://a/mcp\nlimits:\n  max_bodybytes: 1\n").is_err());
}

#[test]
fn several_upstreams_need_distinct_paths_and_names() {
    let ok = validate(
        "upstreams:\n  - name: a\n    path: /a/mcp\n    url: http://127.0.0.1:1/mcp\n  - name: b\n    path: /b/mcp\n    url: http://127.0.0.1:2/mcp\n",
    )
    .expect("valid");
    assert_eq!(ok.proxy.routes.len(), 2);
    let same_path = validate(
        "upstreams:\n  - name: a\n    url: http://127.0.0.1:1/mcp\n  - name: b\n    url: http://127.0.0.1:2/mcp\n",
    );
    assert!(format!("{:#}", same_path.expect_err("dup path")).contains("already used"));
}

#[test]
fn invalid_values_are_explained() {
    for (yaml, needle) in [
        ("upstreams: []\n", "no upstream"),
        ("upstreams:\n  - url: ftp://x/mcp\n", "http:// or https://"),
        ("upstreams:\n  - name: a\n", "give `url`"),
        (
            "upstreams:\n  - url: http://x/mcp\n    command: npx\n",
            "not both",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\n    transport: websocket\n",
            "`streamable-http` or `sse`",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\n    args: [a]\n",
            "belong to stdio upstreams",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\n    tls: { ca_file: /ca.pem }\n",
            "https:// upstreams only",
        ),
        (
            "upstreams:\n  - url: https://x/mcp\n    tls: { client_cert: /c.pem }\n",
            "go together",
        ),
        (
            "upstreams:\n  - command: npx\n    processes: { sharing: pooled }\n",
            "`per-session` or `shared`",
        ),
        ("upstreams:\n  - url: /relative\n", "absolute"),
        (
            "upstreams:\n  - url: http://x/mcp\n    path: /a/../mcp\n",
            "plain absolute path",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\nlimits:\n  body_timeout: soon\n",
            "duration",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\nlimits:\n  max_body_bytes: 4 parsecs\n",
            "size",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\nlimits:\n  max_header_bytes: 1KiB\n",
            "at least 8KiB",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\nlimits:\n  max_json_depth: 0\n",
            "greater than zero",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\nlisten: nowhere\n",
            "listen",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\nlog_format: xml\n",
            "log_format",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\nallowed_origins: ['http://a/b']\n",
            "allowed_origins",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\n    auth: { replace: {} }\n",
            "exactly one",
        ),
        (
            "upstreams:\n  - url: http://x/mcp\n    auth: { replace: { env: COUNTERSIGN_SURELY_UNSET_VARIABLE } }\n",
            "not set",
        ),
    ] {
        let error = validate(yaml).expect_err(yaml);
        assert!(format!("{error:#}").contains(needle), "{yaml}: {error:#}");
    }
}

#[test]
fn every_kind_of_upstream_is_configured() {
    let config = validate(
        "upstreams:\n  - name: hosted\n    url: https://mcp.example.com/mcp\n    path: /hosted\n\
         \x20 - name: old\n    url: http://127.0.0.1:3002/sse\n    transport: sse\n\
         \x20 - name: memory\n    command: npx\n    args: [-y, '@modelcontextprotocol/server-memory']\n\
         \x20   env: { MEMORY_FILE_PATH: /tmp/m.json }\n    path: /memory\n\
         \x20   processes: { sharing: shared, max: 3, idle_timeout: 1m }\n",
    )
    .expect("valid");
    let [hosted, old, memory] = &config.proxy.routes[..] else {
        panic!("three routes");
    };
    assert!(matches!(
        hosted.upstream.transport,
        Transport::StreamableHttp
    ));
    assert_eq!(hosted.upstream.scheme, http::uri::Scheme::HTTPS);
    assert!(matches!(old.upstream.transport, Transport::LegacySse));
    assert_eq!(old.path, "/sse");
    let Transport::Stdio(command) = &memory.upstream.transport else {
        panic!("stdio: {:?}", memory.upstream.transport);
    };
    assert_eq!(command.program, "npx");
    assert_eq!(command.args, ["-y", "@modelcontextprotocol/server-memory"]);
    assert_eq!(
        command.env,
        [("MEMORY_FILE_PATH".to_owned(), "/tmp/m.json".to_owned())]
    );
    assert_eq!(command.sharing, ProcessSharing::Shared);
    assert_eq!(command.max_processes.get(), 3);
    assert_eq!(command.idle_timeout, std::time::Duration::from_secs(60));
}

#[test]
fn a_stdio_program_is_not_given_the_gateways_upstream_credentials() {
    // PATH stands in for a credential variable: it is set wherever the tests run.
    let config = validate(
        "upstreams:\n  - name: hosted\n    url: https://mcp.example.com/mcp\n    path: /hosted\n\
         \x20   auth: { replace: { env: PATH } }\n\
         \x20 - name: memory\n    command: npx\n",
    )
    .expect("valid");
    let Transport::Stdio(command) = &config.proxy.routes[1].upstream.transport else {
        panic!("stdio");
    };
    assert_eq!(command.withheld_env, ["PATH"]);
}

#[test]
fn the_upstream_flag_takes_every_kind() {
    let flag = |value: &str| {
        let mut raw = RawConfig::default();
        raw.apply(Overrides {
            upstream: Some(value.into()),
            ..Overrides::default()
        });
        raw.validate().expect(value).proxy.routes.remove(0)
    };
    let stdio = flag("stdio:npx -y @modelcontextprotocol/server-memory");
    assert!(matches!(stdio.upstream.transport, Transport::Stdio(_)));
    assert_eq!(
        stdio.path, "/mcp",
        "a stdio upstream is served on /mcp by default"
    );
    let sse = flag("sse+http://127.0.0.1:3002/sse");
    assert!(matches!(sse.upstream.transport, Transport::LegacySse));
    assert_eq!(sse.upstream.url, "http://127.0.0.1:3002/sse");
    let https = flag("https://mcp.example.com/v1/mcp");
    assert_eq!(https.upstream.scheme, http::uri::Scheme::HTTPS);
    assert_eq!(https.path, "/v1/mcp");
}

#[test]
fn flags_override_the_file() {
    let mut raw =
        RawConfig::from_yaml("listen: 0.0.0.0:1\nupstreams:\n  - url: http://127.0.0.1:1/mcp\n")
            .expect("yaml");
    raw.apply(Overrides {
        upstream: Some("http://127.0.0.1:2/v1/mcp".into()),
        listen: Some("127.0.0.1:7".into()),
        admin: Some("off".into()),
        ..Overrides::default()
    });
    let config = raw.validate().expect("valid");
    assert_eq!(config.listen.port(), 7);
    assert_eq!(config.admin, None);
    assert_eq!(config.proxy.routes[0].path, "/v1/mcp");
    assert_eq!(config.proxy.routes[0].upstream.url.port_u16(), Some(2));
}

#[test]
fn redis_url_may_come_from_the_flag_while_the_file_sets_the_rest() {
    let yaml = "upstreams:\n  - url: http://127.0.0.1:1/mcp\nredis:\n  namespace: team-a\n";
    let refused = validate(yaml).expect_err("no url anywhere");
    assert!(
        format!("{refused:#}").contains("redis.url is not set"),
        "{refused:#}"
    );

    let mut raw = RawConfig::from_yaml(yaml).expect("yaml");
    // What COUNTERSIGN_REDIS_URL (a Kubernetes Secret) arrives as: the --redis flag.
    raw.apply(Overrides {
        redis: Some("redis://:secret@redis:6379".into()),
        ..Overrides::default()
    });
    let redis = raw
        .validate()
        .expect("valid")
        .approval
        .redis
        .expect("redis");
    assert_eq!(redis.url, "redis://:secret@redis:6379");
    assert_eq!(redis.namespace, "team-a");
}

#[test]
fn wildcard_hosts_allow_any_host_and_public_listeners_default_to_any() {
    let config =
        validate("listen: 0.0.0.0:8080\nupstreams:\n  - url: http://x/mcp\n").expect("valid");
    assert!(config.proxy.hosts.allowed.is_none());
    let config =
        validate("allowed_hosts: ['*']\nupstreams:\n  - url: http://x/mcp\n").expect("valid");
    assert!(config.proxy.hosts.allowed.is_none());
}

#[test]
fn sizes_accept_units() {
    assert_eq!(parse_size("64KiB").expect("size"), 65536);
    assert_eq!(parse_size("4MiB").expect("size"), 4 << 20);
    assert_eq!(parse_size("500KB").expect("size"), 500_000);
    assert_eq!(parse_size("123").expect("size"), 123);
    assert!(parse_size("1TiB").is_err());
}

#[test]
fn legacy_clients_get_sse_beside_the_upstream_flag_with_no_extra_flag() {
    let legacy = |value: &str| {
        let mut raw = RawConfig::default();
        raw.apply(Overrides {
            upstream: Some(value.into()),
            ..Overrides::default()
        });
        let route = raw.validate().expect(value).proxy.routes.remove(0);
        let legacy = route.legacy.expect("legacy clients are served by default");
        (route.path, legacy.sse, legacy.messages)
    };
    assert_eq!(
        legacy("http://127.0.0.1:3001/mcp"),
        ("/mcp".into(), "/sse".into(), "/sse/messages".into())
    );
    // In front of a legacy server, its own URL swapped for the gateway's serves both kinds of
    // client.
    assert_eq!(
        legacy("sse+http://127.0.0.1:3002/sse"),
        ("/sse".into(), "/sse".into(), "/sse/messages".into())
    );
}

#[test]
fn legacy_sse_path_can_be_moved_or_turned_off() {
    let config = validate(
        "upstreams:\n  - url: http://x/mcp\n    legacy_sse_path: /legacy/events\n  - name: b\n    url: http://y/b/mcp\n    legacy_sse_path: 'off'\n",
    )
    .expect("valid");
    let legacy = config.proxy.routes[0].legacy.as_ref().expect("moved");
    assert_eq!(
        (legacy.sse.as_str(), legacy.messages.as_str()),
        ("/legacy/events", "/legacy/events/messages")
    );
    assert!(config.proxy.routes[1].legacy.is_none());
    let error = validate(
        "upstreams:\n  - url: http://x/mcp\n    legacy_sse_path: /b/mcp\n  - name: b\n    url: http://y/b/mcp\n",
    )
    .expect_err("another route's path");
    assert!(format!("{error:#}").contains("already used"), "{error:#}");
    let error = validate("upstreams:\n  - url: http://x/mcp\n    legacy_sse_path: sse\n")
        .expect_err("not a path");
    assert!(
        format!("{error:#}").contains("legacy_sse_path"),
        "{error:#}"
    );
}

#[test]
fn connection_workers_are_configurable_and_never_zero() {
    let config =
        validate("upstreams:\n  - url: http://127.0.0.1:3001/mcp\nconnections:\n  workers: 3\n")
            .expect("valid");
    assert_eq!(config.proxy.connections.workers.get(), 3);
    let error =
        validate("upstreams:\n  - url: http://127.0.0.1:3001/mcp\nconnections:\n  workers: 0\n")
            .expect_err("zero workers");
    assert!(
        format!("{error:#}").contains("connections.workers"),
        "{error:#}"
    );
}
