use super::*;

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
        ("upstreams:\n  - url: ftp://x/mcp\n", "only http://"),
        ("upstreams:\n  - url: https://x/mcp\n", "only http://"),
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
