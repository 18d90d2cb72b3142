//! Policy loading and classification, end to end through the public API.

use std::time::Duration;

use countersign_jsonrpc::RawJson;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::*;

// ---------------------------------------------------------------------------------------
// Helpers

fn policy(yaml: &str) -> Policy {
    Policy::from_yaml(yaml).unwrap_or_else(|e| panic!("policy must load: {e}\n{yaml}"))
}

fn load_error(yaml: &str) -> String {
    match Policy::from_yaml(yaml) {
        Ok(_) => panic!("policy must be refused:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

fn tool(name: &str, annotations: Value) -> Value {
    let mut t = json!({"name": name, "inputSchema": {"type": "object"}});
    if !annotations.is_null() {
        t["annotations"] = annotations;
    }
    t
}

/// The demo store's listing (crates/countersign-demo).
fn store_listing() -> Vec<Value> {
    vec![
        tool("list_products", json!({"readOnlyHint": true})),
        tool("get_order", json!({"readOnlyHint": true})),
        tool(
            "create_order",
            json!({"readOnlyHint": false, "destructiveHint": false}),
        ),
        tool(
            "adjust_stock",
            json!({"readOnlyHint": false, "destructiveHint": true}),
        ),
        tool(
            "cancel_order",
            json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true}),
        ),
        tool("restock_all", Value::Null),
    ]
}

fn store_catalog() -> Catalog {
    let mut catalog = Catalog::new();
    catalog.observe("store", &store_listing());
    catalog
}

/// Classifies a `tools/call` of `name` on `upstream` with `args` from `principal`.
struct Call<'a> {
    upstream: &'a str,
    method: Method,
    target: &'a str,
    args: RawJson,
    principal: Principal,
}

impl<'a> Call<'a> {
    fn tool(upstream: &'a str, target: &'a str) -> Self {
        Call {
            upstream,
            method: Method::ToolsCall,
            target,
            args: RawJson::empty_object(),
            principal: Principal::default(),
        }
    }
    fn args(mut self, args: Value) -> Self {
        self.args = RawJson::from_value(&args);
        self
    }
    fn groups(mut self, groups: &[&str]) -> Self {
        self.principal = Principal {
            id: "u1".into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            claims: Default::default(),
        };
        self
    }
    fn method(mut self, method: Method) -> Self {
        self.method = method;
        self
    }
    fn classify(&self, policy: &Policy, catalog: &Catalog) -> Decision {
        policy.classify(&CallFacts {
            upstream: self.upstream,
            method: self.method,
            target: self.target,
            arguments: &self.args,
            principal: &self.principal,
            tool: catalog.get(self.upstream, self.target),
        })
    }
}

fn decide(
    policy: &Policy,
    catalog: &Catalog,
    upstream: &str,
    target: &str,
) -> (Risk, Action, String) {
    let d = Call::tool(upstream, target).classify(policy, catalog);
    (d.risk, d.action, d.rule)
}

fn rd(risk: Risk, action: Action, rule: &str) -> (Risk, Action, String) {
    (risk, action, rule.to_owned())
}

const V1: &str = "version: 1\n";

// ---------------------------------------------------------------------------------------
// Loading

#[test]
fn minimal_file_gets_the_spec_defaults() {
    let p = policy(V1);
    assert_eq!(*p.defaults(), Defaults::default());
    assert_eq!(p.defaults().action_for(Risk::Read), Action::Allow);
    for risk in [Risk::Write, Risk::Destructive, Risk::Unknown] {
        assert_eq!(p.defaults().action_for(risk), Action::Confirm);
    }
    assert_eq!(p.approval(), Approval::Any);
    assert_eq!(p.token_ttl(), Duration::from_secs(300));
    assert!(p.upstream("anything").trust_annotations);
    assert_eq!(p.rule_ids().count(), 0);
}

#[test]
fn top_level_settings_are_read() {
    let p = policy(
        "version: 1\ndefaults: { read: confirm, unknown: deny }\napproval: human\ntoken_ttl: 30s\n\
         upstreams:\n  github: { trust_annotations: false }\n  store:\n",
    );
    assert_eq!(p.defaults().read, Action::Confirm);
    assert_eq!(
        p.defaults().write,
        Action::Confirm,
        "unset defaults keep the spec value"
    );
    assert_eq!(p.defaults().unknown, Action::Deny);
    assert_eq!(p.approval(), Approval::Human);
    assert_eq!(p.token_ttl(), Duration::from_secs(30));
    assert!(!p.upstream("github").trust_annotations);
    assert!(
        p.upstream("store").trust_annotations,
        "an empty entry means defaults"
    );
    let mut names: Vec<&str> = p.upstream_names().collect();
    names.sort_unstable();
    assert_eq!(names, ["github", "store"]);
}

#[test]
fn token_ttl_accepts_human_durations_in_range() {
    for (text, secs) in [("30s", 30), ("5m", 300), ("1h", 3600), ("2m 30s", 150)] {
        assert_eq!(
            policy(&format!("{V1}token_ttl: {text}\n")).token_ttl(),
            Duration::from_secs(secs)
        );
    }
    for (text, needle) in [
        ("0s", "between 1s and 1h"),
        ("2h", "between 1s and 1h"),
        ("1500ms", "whole seconds"),
        ("five minutes", "invalid token_ttl `five minutes`"),
        ("300", "invalid token_ttl"),
    ] {
        let err = load_error(&format!("{V1}token_ttl: \"{text}\"\n"));
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn version_is_required_and_must_be_one() {
    assert!(load_error("defaults: {}\n").contains("missing field `version`"));
    assert_eq!(
        load_error("version: 2\n"),
        "unsupported policy version 2: only `version: 1` is understood"
    );
    assert!(load_error("").contains("invalid policy file"));
}

#[test]
fn unknown_keys_are_refused_everywhere() {
    for (yaml, needle) in [
        ("version: 1\nrule: []\n", "unknown field `rule`"),
        (
            "version: 1\ndefaults: { reads: allow }\n",
            "unknown field `reads`",
        ),
        (
            "version: 1\nupstreams: { s: { trust: false } }\n",
            "unknown field `trust`",
        ),
        (
            "version: 1\nrules:\n  - id: a\n    acton: deny\n",
            "unknown field `acton`",
        ),
        (
            "version: 1\nrules:\n  - id: a\n    action: deny\n    preview: { arguments: {}, extra: 1 }\n",
            "unknown field `extra`",
        ),
    ] {
        let err = load_error(yaml);
        assert!(err.contains(needle), "{yaml}: {err}");
        assert!(err.contains("line"), "errors carry a location: {err}");
    }
}

#[test]
fn wrong_enum_values_are_refused_with_the_choices() {
    let err = load_error("version: 1\nrules:\n  - id: a\n    action: maybe\n");
    assert!(
        err.contains("unknown variant `maybe`") && err.contains("confirm"),
        "{err}"
    );
    let err = load_error("version: 1\napproval: email\n");
    assert!(err.contains("unknown variant `email`"), "{err}");
    let err =
        load_error("version: 1\nrules:\n  - id: a\n    method: tools/list\n    action: deny\n");
    assert!(err.contains("unknown variant `tools/list`"), "{err}");
}

#[test]
fn duplicate_yaml_keys_are_refused() {
    let err = load_error("version: 1\nrules:\n  - id: a\n    action: allow\n    action: deny\n");
    assert!(err.contains("duplicate"), "{err}");
}

#[test]
fn duplicate_rule_ids_are_refused() {
    let err = load_error(
        "version: 1\nrules:\n  - { id: a, action: deny }\n  - { id: b, action: deny }\n  - { id: a, action: allow }\n",
    );
    assert_eq!(err, "duplicate rule id `a` (rules #1 and #3)");
}

#[test]
fn rule_field_errors_name_the_rule_and_field() {
    for (rule, expected) in [
        (
            "{ id: 'bad id', action: deny }",
            "rule `#1`: id: `bad id` is not a valid id (use [A-Za-z0-9_.-]+)",
        ),
        (
            "{ id: default, action: deny }",
            "rule `default`: id: `default` is reserved for the gateway's own decisions",
        ),
        (
            "{ id: r, tools: [x] }",
            "rule `r`: action: a rule must set `action`, `risk`, or both",
        ),
        (
            "{ id: r, tools: [], action: deny }",
            "rule `r`: tools: an empty list matches nothing; omit `tools` to match every target",
        ),
        (
            "{ id: r, tools: ['delete_[abc'], action: deny }",
            "rule `r`: tools: invalid glob `delete_[abc`: unclosed character class; missing ']'",
        ),
        (
            "{ id: r, tools: [''], action: deny }",
            "rule `r`: tools: empty glob",
        ),
        (
            "{ id: r, upstream: 'st{ore', action: deny }",
            "rule `r`: upstream: invalid glob `st{ore`",
        ),
        (
            "{ id: r, when: 'args.x >', action: deny }",
            "rule `r`: when: invalid CEL: ",
        ),
        (
            "{ id: r, summary: 'hi {{args.x', action: deny }",
            "rule `r`: summary: `{{` at byte 3 is never closed",
        ),
        (
            "{ id: r, summary: '{{args.x | upper}}', action: deny }",
            "rule `r`: summary: unknown filter `upper`",
        ),
        (
            "{ id: r, summary: '{{who}}', action: deny }",
            "rule `r`: summary: unknown placeholder `{{who}}`",
        ),
    ] {
        let err = load_error(&format!("version: 1\nrules:\n  - {rule}\n"));
        assert!(
            err.starts_with(expected),
            "{rule}\n  got: {err}\n want: {expected}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
    }
}

#[test]
fn yaml_null_sections_mean_empty() {
    let p = policy("version: 1\ndefaults:\nupstreams:\nrules:\n");
    assert_eq!(*p.defaults(), Defaults::default());
    assert_eq!(p.rule_ids().count(), 0);
}

#[test]
fn policy_is_send_sync_and_clone() {
    fn assert_traits<T: Send + Sync + Clone + 'static>() {}
    assert_traits::<Policy>();
    assert_traits::<Catalog>();
}

// ---------------------------------------------------------------------------------------
// Classification: defaults and the catalog

#[test]
fn annotations_decide_risk_and_defaults_decide_action() {
    let p = Policy::default();
    let c = store_catalog();
    assert_eq!(
        decide(&p, &c, "store", "list_products"),
        rd(Risk::Read, Action::Allow, "default")
    );
    assert_eq!(
        decide(&p, &c, "store", "create_order"),
        rd(Risk::Write, Action::Confirm, "default")
    );
    assert_eq!(
        decide(&p, &c, "store", "cancel_order"),
        rd(Risk::Destructive, Action::Confirm, "default")
    );
}

#[test]
fn tool_without_annotations_is_destructive() {
    let p = Policy::default();
    assert_eq!(
        decide(&p, &store_catalog(), "store", "restock_all"),
        rd(Risk::Destructive, Action::Confirm, "default")
    );
}

#[test]
fn tool_missing_from_the_catalog_is_unknown() {
    let p = Policy::default();
    let c = store_catalog();
    assert_eq!(
        decide(&p, &c, "store", "drop_tables"),
        rd(Risk::Unknown, Action::Confirm, "default")
    );
    assert_eq!(
        decide(&p, &c, "elsewhere", "list_products"),
        rd(Risk::Unknown, Action::Confirm, "default")
    );
}

#[test]
fn default_actions_are_configurable() {
    let p = policy(
        "version: 1\ndefaults: { read: confirm, write: allow, destructive: deny, unknown: deny }\n",
    );
    let c = store_catalog();
    assert_eq!(decide(&p, &c, "store", "get_order").1, Action::Confirm);
    assert_eq!(decide(&p, &c, "store", "create_order").1, Action::Allow);
    assert_eq!(decide(&p, &c, "store", "adjust_stock").1, Action::Deny);
    assert_eq!(decide(&p, &c, "store", "nope").1, Action::Deny);
}

#[test]
fn untrusted_annotations_make_unnamed_tools_unknown() {
    let p = policy(
        "version: 1\nupstreams: { store: { trust_annotations: false } }\nrules:\n  - { id: orders, tools: [get_order], action: allow }\n",
    );
    let c = store_catalog();
    assert_eq!(
        decide(&p, &c, "store", "list_products"),
        rd(Risk::Unknown, Action::Confirm, "default")
    );
    assert_eq!(
        decide(&p, &c, "store", "get_order"),
        rd(Risk::Read, Action::Allow, "orders")
    );
    let mut other = Catalog::new();
    other.observe(
        "other",
        &[tool("list_products", json!({"readOnlyHint": true}))],
    );
    assert_eq!(
        decide(&p, &other, "other", "list_products").0,
        Risk::Read,
        "other upstreams stay trusted"
    );
}

#[test]
fn removed_tool_is_unknown() {
    let p = Policy::default();
    let mut c = store_catalog();
    c.observe("store", &store_listing()[1..]);
    assert_eq!(
        decide(&p, &c, "store", "list_products"),
        rd(Risk::Unknown, Action::Confirm, "default")
    );
}

#[test]
fn annotation_rug_pull_keeps_the_call_held_until_repin() {
    let p = Policy::default();
    let mut c = store_catalog();
    c.observe(
        "store",
        &[tool("cancel_order", json!({"readOnlyHint": true}))],
    );
    assert_eq!(
        decide(&p, &c, "store", "cancel_order"),
        rd(Risk::Destructive, Action::Confirm, "default")
    );
    c.repin("store", "cancel_order").expect("listed, clean");
    assert_eq!(
        decide(&p, &c, "store", "cancel_order"),
        rd(Risk::Read, Action::Allow, "default")
    );
}

#[test]
fn pin_of_another_tool_is_ignored() {
    let p = Policy::default();
    let c = store_catalog();
    let d = p.classify(&CallFacts {
        upstream: "store",
        method: Method::ToolsCall,
        target: "wipe",
        arguments: &RawJson::empty_object(),
        principal: &Principal::default(),
        tool: c.get("store", "list_products"),
    });
    assert_eq!(d.risk, Risk::Unknown);
}

// ---------------------------------------------------------------------------------------
// Classification: tool names

#[test]
fn invalid_tool_names_are_denied_even_when_everything_is_allowed() {
    let p = policy(
        "version: 1\ndefaults: { read: allow, write: allow, destructive: allow, unknown: allow }\nrules:\n  - { id: all, action: allow }\n",
    );
    let c = Catalog::new();
    let long = "a".repeat(129);
    for name in [
        "d\u{435}lete_repo",   // Cyrillic е
        "\u{ff44}elete_repo",  // fullwidth ｄ
        "delete\u{200b}_repo", // zero-width space
        "\u{202e}oper_eteled", // RTL override
        "delete_repo ",        // trailing space
        "",
        long.as_str(),
    ] {
        let d = Call::tool("store", name).classify(&p, &c);
        assert_eq!(
            (d.action, d.rule.as_str(), d.risk),
            (Action::Deny, INVALID_TOOL_NAME_RULE, Risk::Unknown),
            "{name:?}"
        );
        assert!(d.reason.is_some());
    }
    assert_eq!(decide(&p, &c, "store", &"a".repeat(128)).1, Action::Allow);
}

#[test]
fn case_different_name_is_not_matched_by_the_rule_and_is_unknown() {
    let p =
        policy("version: 1\nrules:\n  - { id: repo-reads, tools: [delete_repo], action: allow }\n");
    let mut c = Catalog::new();
    c.observe("gh", &[tool("delete_repo", json!({"readOnlyHint": false}))]);
    assert_eq!(
        decide(&p, &c, "gh", "delete_repo"),
        rd(Risk::Destructive, Action::Allow, "repo-reads")
    );
    assert_eq!(
        decide(&p, &c, "gh", "Delete_Repo"),
        rd(Risk::Unknown, Action::Confirm, "default")
    );

    let deny =
        policy("version: 1\nrules:\n  - { id: no-delete, tools: [delete_repo], action: deny }\n");
    assert_eq!(
        decide(&deny, &c, "gh", "Delete_Repo"),
        rd(Risk::Unknown, Action::Confirm, "default")
    );
}

#[test]
fn suspicious_tools_are_never_allowed() {
    let allow_all = policy(
        "version: 1\ndefaults: { read: allow, write: allow, destructive: allow, unknown: allow }\nrules:\n  - { id: reads, tools: [delete_repo], risk: read }\n",
    );
    let mut c = Catalog::new();
    c.observe(
        "gh",
        &[
            tool("delete_repo", json!({"readOnlyHint": true})),
            tool("Delete_Repo", json!({"readOnlyHint": true})),
        ],
    );
    assert_eq!(
        decide(&allow_all, &c, "gh", "delete_repo"),
        rd(Risk::Unknown, Action::Confirm, "reads")
    );
    assert_eq!(
        decide(&allow_all, &c, "gh", "Delete_Repo"),
        rd(Risk::Unknown, Action::Confirm, "default")
    );
    let deny = policy("version: 1\nrules:\n  - { id: no, tools: [\"*\"], action: deny }\n");
    assert_eq!(
        decide(&deny, &c, "gh", "delete_repo").1,
        Action::Deny,
        "stricter rules still apply"
    );
}

// ---------------------------------------------------------------------------------------
// Classification: rules

#[test]
fn first_matching_rule_wins() {
    let p = policy(
        "version: 1\nrules:\n  - { id: deny-cancel, tools: [cancel_order], action: deny }\n  - { id: confirm-all, tools: [\"*_order\"], action: confirm }\n  - { id: allow-cancel, tools: [cancel_order], action: allow }\n",
    );
    let c = store_catalog();
    assert_eq!(decide(&p, &c, "store", "cancel_order").2, "deny-cancel");
    assert_eq!(
        decide(&p, &c, "store", "get_order"),
        rd(Risk::Read, Action::Confirm, "confirm-all")
    );
    assert_eq!(decide(&p, &c, "store", "list_products").2, "default");
}

#[test]
fn rule_with_only_risk_takes_the_default_action_for_it() {
    let p = policy(
        "version: 1\ndefaults: { destructive: deny }\nrules:\n  - { id: lookups, tools: [\"get_*\", restock_all], risk: read }\n  - { id: danger, tools: [create_order], risk: destructive }\n",
    );
    let c = store_catalog();
    assert_eq!(
        decide(&p, &c, "store", "restock_all"),
        rd(Risk::Read, Action::Allow, "lookups")
    );
    assert_eq!(
        decide(&p, &c, "store", "create_order"),
        rd(Risk::Destructive, Action::Deny, "danger")
    );
}

#[test]
fn rule_with_only_action_keeps_the_catalog_risk() {
    let p =
        policy("version: 1\nrules:\n  - { id: ok, tools: [adjust_stock, nope], action: allow }\n");
    let c = store_catalog();
    assert_eq!(
        decide(&p, &c, "store", "adjust_stock"),
        rd(Risk::Destructive, Action::Allow, "ok")
    );
    assert_eq!(
        decide(&p, &c, "store", "nope"),
        rd(Risk::Unknown, Action::Allow, "ok")
    );
}

#[test]
fn rule_with_action_and_risk_sets_both() {
    let p = policy(
        "version: 1\nrules:\n  - { id: r, tools: [get_order], action: deny, risk: write }\n",
    );
    assert_eq!(
        decide(&p, &store_catalog(), "store", "get_order"),
        rd(Risk::Write, Action::Deny, "r")
    );
}

#[test]
fn upstream_glob_limits_a_rule() {
    let p = policy("version: 1\nrules:\n  - { id: prod, upstream: \"prod-*\", action: deny }\n");
    let mut c = Catalog::new();
    for up in ["prod-store", "dev-store"] {
        c.observe(up, &[tool("get_order", json!({"readOnlyHint": true}))]);
    }
    assert_eq!(decide(&p, &c, "prod-store", "get_order").2, "prod");
    assert_eq!(decide(&p, &c, "dev-store", "get_order").2, "default");
    assert_eq!(
        decide(&p, &c, "Prod-store", "get_order").2,
        "default",
        "globs are case-sensitive"
    );
}

#[test]
fn tool_globs_support_star_question_and_classes_byte_exact() {
    let p = policy(
        "version: 1\nrules:\n  - { id: g, tools: [\"del*\", \"get_?rder\", \"adjust_[st]tock\"], action: deny }\n",
    );
    let c = Catalog::new();
    for (name, hit) in [
        ("delete_repo", true),
        ("del", true),
        ("Delete_repo", false),
        ("get_order", true),
        ("get_oorder", false),
        ("adjust_stock", true),
        ("adjust_ttock", true),
        ("adjust_xtock", false),
        ("xdelete", false),
    ] {
        assert_eq!(decide(&p, &c, "s", name).2 == "g", hit, "{name}");
    }
}

#[test]
fn rule_without_tools_matches_every_tool_of_its_method() {
    let p = policy("version: 1\nrules:\n  - { id: all, action: deny }\n");
    let c = store_catalog();
    assert_eq!(decide(&p, &c, "store", "list_products").2, "all");
    let prompt = Call::tool("store", "greeting")
        .method(Method::PromptsGet)
        .classify(&p, &c);
    assert_eq!(
        (prompt.risk, prompt.action, prompt.rule.as_str()),
        (Risk::Read, Action::Allow, "default")
    );
}

#[test]
fn prompts_and_resources_pass_unless_a_rule_names_them() {
    let p = policy(
        "version: 1\ndefaults: { read: confirm }\nrules:\n  - { id: secrets, method: resources/read, tools: [\"file:///etc/*\"], action: deny }\n  - { id: admin-prompt, method: prompts/get, tools: [admin_*], risk: write }\n",
    );
    let c = Catalog::new();
    let r = |method, target| {
        let d = Call::tool("fs", target).method(method).classify(&p, &c);
        (d.risk, d.action, d.rule)
    };
    assert_eq!(
        r(Method::ResourcesRead, "file:///etc/shadow"),
        rd(Risk::Read, Action::Deny, "secrets")
    );
    assert_eq!(
        r(Method::ResourcesRead, "file:///etc/ssl/certs/x.pem"),
        rd(Risk::Read, Action::Deny, "secrets")
    );
    assert_eq!(
        r(Method::ResourcesRead, "file:///home/readme"),
        rd(Risk::Read, Action::Allow, "default")
    );
    assert_eq!(
        r(Method::PromptsGet, "admin_reset"),
        rd(Risk::Write, Action::Confirm, "admin-prompt")
    );
    assert_eq!(
        r(Method::PromptsGet, "hello world"),
        rd(Risk::Read, Action::Allow, "default"),
        "names are not tool names"
    );
    assert_eq!(
        r(Method::ToolsCall, "admin_reset"),
        rd(Risk::Unknown, Action::Confirm, "default"),
        "rules keep to their method"
    );
}

#[test]
fn rule_outputs_reach_the_decision() {
    let p = policy(
        r#"version: 1
approval: token
token_ttl: 2m
rules:
  - id: no-restock
    tools: [restock_all]
    action: deny
    reason: Restocking is done by the warehouse.
  - id: orders
    tools: [create_order]
    action: confirm
    approval: human
    summary: 'Create order for {{args.customer}} with {{args.items | length}} lines ({{args.note}})'
    preview: { arguments: { dry_run: true } }
"#,
    );
    let c = store_catalog();
    let d = Call::tool("store", "restock_all").classify(&p, &c);
    assert_eq!(
        d.reason.as_deref(),
        Some("Restocking is done by the warehouse.")
    );
    assert_eq!(
        d.approval,
        Approval::Token,
        "policy-wide approval applies when the rule sets none"
    );
    let d = Call::tool("store", "create_order")
        .args(json!({"customer": "Ada", "items": [1, 2, 3]}))
        .classify(&p, &c);
    assert_eq!(
        d.summary.as_deref(),
        Some("Create order for Ada with 3 lines ()")
    );
    assert_eq!(d.approval, Approval::Human);
    assert_eq!(d.ttl, Duration::from_secs(120));
    assert_eq!(d.preview, Some(json!({"arguments": {"dry_run": true}})));
    assert_eq!(d.condition_error, None);
    let d = Call::tool("store", "list_products").classify(&p, &c);
    assert_eq!((d.summary, d.reason, d.preview), (None, None, None));
}

// ---------------------------------------------------------------------------------------
// Classification: conditions

const BIG_ORDERS: &str = r#"version: 1
rules:
  - id: big-orders
    tools: [create_order]
    when: 'args.items.size() > 5 || principal.groups.exists(g, g == "interns")'
    action: deny
  - id: orders
    tools: [create_order]
    action: allow
"#;

#[test]
fn condition_true_matches_and_false_falls_through() {
    let p = policy(BIG_ORDERS);
    let c = store_catalog();
    let rule = |call: Call<'_>| call.classify(&p, &c).rule;
    assert_eq!(
        rule(Call::tool("store", "create_order").args(json!({"items": [1, 2, 3, 4, 5, 6]}))),
        "big-orders"
    );
    assert_eq!(
        rule(
            Call::tool("store", "create_order")
                .args(json!({"items": [1]}))
                .groups(&["interns"])
        ),
        "big-orders"
    );
    assert_eq!(
        rule(
            Call::tool("store", "create_order")
                .args(json!({"items": [1]}))
                .groups(&["staff"])
        ),
        "orders"
    );
}

#[test]
fn condition_error_on_a_restrictive_rule_counts_as_a_match() {
    let p = policy(BIG_ORDERS);
    let c = store_catalog();
    for args in [json!({}), json!({"items": 7}), Value::Null] {
        let d = Call::tool("store", "create_order")
            .args(args.clone())
            .classify(&p, &c);
        assert_eq!(
            (d.action, d.rule.as_str()),
            (Action::Deny, "big-orders"),
            "{args}"
        );
        let note = d.condition_error.expect("the error is reported");
        assert!(note.starts_with("rule `big-orders`: when: "), "{note}");
    }
}

#[test]
fn condition_error_on_a_relaxing_rule_counts_as_no_match() {
    let p = policy(
        "version: 1\nrules:\n  - { id: small, tools: [create_order], when: 'args.items.size() < 3', action: allow }\n  - { id: low, tools: [adjust_stock], when: 'args.delta > 0', risk: read }\n",
    );
    let c = store_catalog();
    let d = Call::tool("store", "create_order")
        .args(json!({"items": 2}))
        .classify(&p, &c);
    assert_eq!((d.action, d.rule.as_str()), (Action::Confirm, "default"));
    assert!(
        d.condition_error
            .as_deref()
            .is_some_and(|e| e.contains("rule `small`"))
    );
    let d = Call::tool("store", "create_order")
        .args(json!({"items": [1]}))
        .classify(&p, &c);
    assert_eq!(
        (d.action, d.rule.as_str(), d.condition_error),
        (Action::Allow, "small", None)
    );
    let d = Call::tool("store", "adjust_stock")
        .args(json!({}))
        .classify(&p, &c);
    assert_eq!(
        (d.risk, d.action, d.rule.as_str()),
        (Risk::Destructive, Action::Confirm, "default")
    );
    let d = Call::tool("store", "adjust_stock")
        .args(json!({"delta": 4}))
        .classify(&p, &c);
    assert_eq!(
        (d.risk, d.action, d.rule.as_str()),
        (Risk::Read, Action::Allow, "low")
    );
}

#[test]
fn erroring_confirm_rule_does_not_shadow_a_later_deny() {
    let p = policy(
        "version: 1\nrules:\n  - { id: check, tools: [adjust_stock], when: 'args.delta > 10', action: confirm, approval: human }\n  - { id: frozen, tools: [adjust_stock], action: deny }\n",
    );
    let c = store_catalog();
    let d = Call::tool("store", "adjust_stock")
        .args(json!({"delta": "many"}))
        .classify(&p, &c);
    assert_eq!((d.action, d.rule.as_str()), (Action::Deny, "frozen"));
    assert!(d.condition_error.is_some());
    // And when the rest would be laxer, the erroring rule keeps its own approval.
    let p = policy(
        "version: 1\nrules:\n  - { id: check, tools: [adjust_stock], when: 'args.delta > 10', action: confirm, approval: human }\n",
    );
    let d = Call::tool("store", "adjust_stock")
        .args(json!({}))
        .classify(&p, &c);
    assert_eq!(
        (d.action, d.rule.as_str(), d.approval),
        (Action::Confirm, "check", Approval::Human)
    );
}

#[test]
fn non_bool_condition_result_fails_closed() {
    let p = policy(
        "version: 1\nrules:\n  - { id: odd, tools: [get_order], when: 'args.id', action: deny }\n",
    );
    let d = Call::tool("store", "get_order")
        .args(json!({"id": "ord-1"}))
        .classify(&p, &store_catalog());
    assert_eq!((d.action, d.rule.as_str()), (Action::Deny, "odd"));
    assert!(
        d.condition_error
            .as_deref()
            .is_some_and(|e| e.contains("not a bool")),
        "{:?}",
        d.condition_error
    );
}

#[test]
fn conditions_see_tool_and_pinned_annotations() {
    let p = policy(
        "version: 1\nrules:\n  - { id: idem, when: 'has(annotations.idempotentHint) && annotations.idempotentHint && tool.endsWith(\"_order\")', action: deny }\n",
    );
    let c = store_catalog();
    assert_eq!(decide(&p, &c, "store", "cancel_order").2, "idem");
    assert_eq!(decide(&p, &c, "store", "adjust_stock").2, "default");
    assert_eq!(
        decide(&p, &c, "store", "unknown_tool").2,
        "default",
        "no pin: empty annotations"
    );
}

// ---------------------------------------------------------------------------------------
// explain

#[test]
fn explain_lists_every_tool_with_its_decision_and_conditional_rules() {
    let p = policy(include_str!("../../../policies/store.yaml"));
    let rows = p.explain("store", &store_listing());
    type Row<'a> = (&'a str, Risk, Action, &'a str, Approval, Vec<&'a str>);
    let table: Vec<Row<'_>> = rows
        .iter()
        .map(|r| {
            (
                r.tool.as_str(),
                r.risk,
                r.action,
                r.rule.as_str(),
                r.approval,
                r.conditional_rules.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        table,
        vec![
            (
                "list_products",
                Risk::Read,
                Action::Allow,
                "lookups",
                Approval::Any,
                vec![]
            ),
            (
                "get_order",
                Risk::Read,
                Action::Allow,
                "lookups",
                Approval::Any,
                vec![]
            ),
            (
                "create_order",
                Risk::Write,
                Action::Confirm,
                "orders",
                Approval::Any,
                vec!["big-orders"]
            ),
            (
                "adjust_stock",
                Risk::Destructive,
                Action::Confirm,
                "stock-changes",
                Approval::Any,
                vec![]
            ),
            (
                "cancel_order",
                Risk::Destructive,
                Action::Confirm,
                "cancellations",
                Approval::Any,
                vec![]
            ),
            (
                "restock_all",
                Risk::Destructive,
                Action::Deny,
                "no-restock-all",
                Approval::Any,
                vec![]
            ),
        ]
    );
    assert!(rows.iter().all(|r| r.status == Some(PinStatus::Pinned)));
}

#[test]
fn explain_reports_invalid_and_colliding_names() {
    let p = Policy::default();
    let rows = p.explain(
        "s",
        &[
            tool("ok", json!({"readOnlyHint": true})),
            tool("OK", Value::Null),
            tool("b\u{430}d", Value::Null),
        ],
    );
    let summary: Vec<(&str, Option<PinStatus>, Action, &str)> = rows
        .iter()
        .map(|r| (r.tool.as_str(), r.status, r.action, r.rule.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "ok",
                Some(PinStatus::Suspicious),
                Action::Confirm,
                "default"
            ),
            (
                "OK",
                Some(PinStatus::Suspicious),
                Action::Confirm,
                "default"
            ),
            (
                "b\u{430}d",
                Some(PinStatus::Suspicious),
                Action::Deny,
                INVALID_TOOL_NAME_RULE
            ),
        ]
    );
    let json = serde_json::to_value(&rows[0]).expect("serializes");
    assert_eq!(json["status"], "suspicious");
    assert_eq!(json["risk"], "unknown");
}

// ---------------------------------------------------------------------------------------
// Example policies

fn example_policies() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("policies/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .map(|p| {
            (
                p.display().to_string(),
                std::fs::read_to_string(&p).expect("readable"),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_policy_is_valid() {
    let files = example_policies();
    assert!(files.len() >= 3, "{files:?}");
    for (path, text) in files {
        if let Err(e) = Policy::from_yaml(&text) {
            panic!("{path}: {e}");
        }
    }
}

#[test]
fn the_benchmark_policy_lets_the_benchmarked_read_through() {
    let p = policy(include_str!("../../../bench/policy.yaml"));
    assert_eq!(
        decide(&p, &Catalog::new(), "default", "list_products"),
        rd(Risk::Read, Action::Allow, "lookups")
    );
}

#[test]
fn default_example_behaves_like_no_policy() {
    let file = policy(include_str!("../../../policies/default.yaml"));
    let none = Policy::default();
    let c = store_catalog();
    for t in [
        "list_products",
        "get_order",
        "create_order",
        "adjust_stock",
        "cancel_order",
        "restock_all",
        "nope",
    ] {
        assert_eq!(
            decide(&file, &c, "store", t),
            decide(&none, &c, "store", t),
            "{t}"
        );
    }
    assert_eq!(file.token_ttl(), none.token_ttl());
    assert_eq!(file.approval(), none.approval());
}

#[test]
fn store_example_denies_restock_and_escalates_big_orders() {
    let p = policy(include_str!("../../../policies/store.yaml"));
    let c = store_catalog();
    let d = Call::tool("store", "restock_all").classify(&p, &c);
    assert_eq!(
        (d.action, d.rule.as_str()),
        (Action::Deny, "no-restock-all")
    );
    assert!(d.reason.is_some());
    let items = json!([{"sku": "TOY-001", "quantity": 1}]);
    let d = Call::tool("store", "create_order")
        .args(json!({"customer": "Grace", "items": items}))
        .classify(&p, &c);
    assert_eq!(
        (d.action, d.rule.as_str(), d.approval),
        (Action::Confirm, "orders", Approval::Any)
    );
    assert_eq!(
        d.summary.as_deref(),
        Some("Create order for Grace with 1 lines")
    );
    let many: Vec<Value> = (0..6)
        .map(|i| json!({"sku": format!("TOY-00{i}"), "quantity": 1}))
        .collect();
    let d = Call::tool("store", "create_order")
        .args(json!({"customer": "Grace", "items": many}))
        .classify(&p, &c);
    assert_eq!(
        (d.action, d.rule.as_str(), d.approval),
        (Action::Confirm, "big-orders", Approval::Human)
    );
    let d = Call::tool("store", "create_order")
        .args(json!({"customer": "Grace", "items": items}))
        .groups(&["interns"])
        .classify(&p, &c);
    assert_eq!(d.rule, "big-orders");
    let d = Call::tool("store", "adjust_stock")
        .args(json!({"sku": "TOY-001", "delta": -3}))
        .classify(&p, &c);
    assert_eq!(d.summary.as_deref(), Some("Change stock of TOY-001 by -3"));
}

#[test]
fn allow_all_example_allows_every_valid_tool() {
    let p = policy(include_str!("../../../policies/allow-all.yaml"));
    let c = store_catalog();
    for t in [
        "list_products",
        "create_order",
        "adjust_stock",
        "restock_all",
        "never_listed",
    ] {
        assert_eq!(decide(&p, &c, "store", t).1, Action::Allow, "{t}");
    }
}

#[test]
fn only_a_policy_that_confirms_something_can_hold_on_an_upstream() {
    let allow_all = policy(include_str!("../../../policies/allow-all.yaml"));
    assert!(!allow_all.can_hold_on("store"));
    assert!(policy(include_str!("../../../policies/default.yaml")).can_hold_on("store"));
    let scoped = policy(
        "version: 1\ndefaults: { read: allow, write: allow, destructive: deny, unknown: deny }\n\
         rules:\n  - id: billing-writes\n    upstream: billing\n    tools: [\"*\"]\n    action: confirm\n",
    );
    assert!(scoped.can_hold_on("billing"));
    assert!(!scoped.can_hold_on("store"));
}

// ---------------------------------------------------------------------------------------
// Properties

fn arb_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.-]{1,40}"
}

fn arb_policy_yaml() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["any", "human", "token"]),
        1u64..3600,
        prop::collection::vec((arb_name(), any::<Option<bool>>()), 0..4),
    )
        .prop_map(|(approval, ttl, upstreams)| {
            let mut yaml =
                format!("version: 1\napproval: {approval}\ntoken_ttl: {ttl}s\nupstreams:\n");
            for (name, trust) in upstreams {
                match trust {
                    Some(t) => {
                        yaml.push_str(&format!("  \"{name}\": {{ trust_annotations: {t} }}\n"))
                    }
                    None => yaml.push_str(&format!("  \"{name}\":\n")),
                }
            }
            yaml
        })
}

/// Annotation objects that never say `readOnlyHint: true`.
fn arb_not_read_only() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!({})),
        (
            any::<Option<bool>>(),
            any::<Option<bool>>(),
            any::<Option<bool>>()
        )
            .prop_map(|(d, i, o)| {
                let mut a = json!({"readOnlyHint": false});
                for (k, v) in [
                    ("destructiveHint", d),
                    ("idempotentHint", i),
                    ("openWorldHint", o),
                ] {
                    if let Some(v) = v {
                        a[k] = json!(v);
                    }
                }
                a
            }),
        Just(json!({"readOnlyHint": "true"})),
        Just(json!({"readOnlyHint": 1})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn tool_lacking_read_only_annotation_is_never_allowed_by_default(
        yaml in arb_policy_yaml(),
        upstream in arb_name(),
        name in arb_name(),
        annotations in arb_not_read_only(),
        in_catalog in any::<bool>(),
        args in prop::collection::btree_map("[a-z]{1,5}", any::<i64>(), 0..4),
    ) {
        let p = Policy::from_yaml(&yaml).map_err(|e| TestCaseError::fail(format!("{e}\n{yaml}")))?;
        let mut catalog = Catalog::new();
        if in_catalog {
            catalog.observe(&upstream, &[tool(&name, annotations)]);
        }
        let args = serde_json::to_value(args).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let d = Call::tool(&upstream, &name).args(args).classify(&p, &catalog);
        prop_assert_ne!(d.action, Action::Allow);
        prop_assert!(d.risk >= Risk::Write);
    }

    #[test]
    fn names_outside_the_charset_are_always_denied(name in "\\PC{0,20}[^A-Za-z0-9_.-]\\PC{0,20}") {
        let p = policy("version: 1\ndefaults: { read: allow, write: allow, destructive: allow, unknown: allow }\n");
        let d = Call::tool("s", &name).classify(&p, &Catalog::new());
        prop_assert_eq!(d.action, Action::Deny);
        prop_assert_eq!(d.rule, INVALID_TOOL_NAME_RULE);
    }

    #[test]
    fn pinned_risk_never_falls_without_repin(flips in prop::collection::vec(any::<(Option<bool>, Option<bool>, bool)>(), 1..8)) {
        let mut catalog = Catalog::new();
        let mut highest = Risk::Read;
        for (read_only, destructive, describe) in flips {
            let mut a = json!({});
            if let Some(r) = read_only { a["readOnlyHint"] = json!(r); }
            if let Some(d) = destructive { a["destructiveHint"] = json!(d); }
            let mut t = tool("t", a.clone());
            if describe { t["description"] = json!("changed"); }
            catalog.observe("s", &[t]);
            highest = highest.max(ToolAnnotations::from_value(Some(&a)).risk());
            prop_assert_eq!(catalog.get("s", "t").map(|p| p.pinned_risk), Some(highest));
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_loader(text in "\\PC{0,200}") {
        let _ = Policy::from_yaml(&text);
    }
}

#[test]
fn a_shared_risk_only_ever_raises_a_pin() {
    let mut catalog = Catalog::new();
    catalog.observe(
        "up",
        &[serde_json::json!({"name": "t", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}})],
    );
    assert!(!catalog.raise("up", "t", Risk::Read));
    assert!(catalog.raise("up", "t", Risk::Destructive));
    assert!(!catalog.raise("up", "t", Risk::Write), "never lowered");
    assert_eq!(
        catalog.get("up", "t").map(|p| p.pinned_risk),
        Some(Risk::Destructive)
    );
    assert_eq!(
        catalog.pinned_risks("up"),
        vec![("t".to_owned(), Risk::Destructive)]
    );
    assert!(!catalog.raise("up", "missing", Risk::Unknown));
}

// ---------------------------------------------------------------------------------------
// Out-of-band approval: `approval: out_of_band`, `approvers:`, `four_eyes:`

#[test]
fn out_of_band_approval_and_its_approvers_reach_the_decision() {
    let p = policy(
        "version: 1\nrules:\n  \
         - { id: drops, tools: [cancel_order], action: confirm, approval: out_of_band,\n      \
             approvers: { users: [carol], groups: [sre, dba] }, four_eyes: true }\n  \
         - { id: orders, tools: [create_order], action: confirm, approval: out_of_band }\n",
    );
    let c = store_catalog();
    let d = Call::tool("store", "cancel_order").classify(&p, &c);
    assert_eq!(d.approval, Approval::OutOfBand);
    assert_eq!(d.approval.as_str(), "out_of_band");
    assert_eq!(
        d.approvers,
        RuleApprovers {
            users: vec!["carol".into()],
            groups: vec!["sre".into(), "dba".into()],
            four_eyes: true,
        }
    );
    let d = Call::tool("store", "create_order").classify(&p, &c);
    assert_eq!(
        d.approvers,
        RuleApprovers::default(),
        "no approvers: the requester alone decides, four eyes off"
    );
    let d = Call::tool("store", "adjust_stock").classify(&p, &c);
    assert_eq!(d.approvers, RuleApprovers::default());
    assert_eq!(
        policy("version: 1\napproval: out_of_band\n").approval(),
        Approval::OutOfBand
    );
    assert_eq!(
        serde_json::to_value(Approval::OutOfBand).expect("serializes"),
        json!("out_of_band")
    );
}

#[test]
fn approvers_on_a_human_or_any_rule_are_kept_for_when_it_goes_out_of_band() {
    for approval in ["human", "any"] {
        let p = policy(&format!(
            "version: 1\nrules:\n  - {{ id: r, tools: [create_order], action: confirm, \
             approval: {approval}, approvers: {{ groups: [sre] }} }}\n"
        ));
        let d = Call::tool("store", "create_order").classify(&p, &store_catalog());
        assert_eq!(d.approvers.groups, vec!["sre".to_owned()], "{approval}");
    }
}

#[test]
fn approver_settings_that_could_never_work_are_refused_at_load() {
    for (rule, expected) in [
        (
            "{ id: r, action: confirm, approval: out_of_band, four_eyes: true }",
            "rule `r`: four_eyes: with no `approvers` users or groups only the requester may \
             approve, and four_eyes forbids that: nobody could approve",
        ),
        (
            "{ id: r, action: confirm, approval: out_of_band, four_eyes: true, \
             approvers: { users: [], groups: [] } }",
            "rule `r`: four_eyes: with no `approvers` users or groups",
        ),
        (
            "{ id: r, action: confirm, approval: token, approvers: { users: [carol] } }",
            "rule `r`: approvers: the rule's approval is `token`, which has no approver",
        ),
        (
            "{ id: r, action: confirm, approval: token, four_eyes: false }",
            "rule `r`: four_eyes: the rule's approval is `token`, which has no approver",
        ),
        (
            "{ id: r, action: confirm, approvers: { groups: [''] } }",
            "rule `r`: approvers: an empty user or group name names nobody",
        ),
    ] {
        let err = load_error(&format!("version: 1\nrules:\n  - {rule}\n"));
        assert!(
            err.starts_with(expected),
            "{rule}\n  got: {err}\n want: {expected}"
        );
    }
    // A rule without its own approval inherits the policy's: `token` there has no approver.
    let err = load_error(
        "version: 1\napproval: token\nrules:\n  \
         - { id: r, action: confirm, approvers: { users: [carol] } }\n",
    );
    assert!(err.starts_with("rule `r`: approvers: "), "{err}");
    // An unknown key under `approvers` is a syntax error, not silently ignored.
    let err = load_error(
        "version: 1\nrules:\n  - { id: r, action: confirm, approvers: { user: [carol] } }\n",
    );
    assert!(err.contains("unknown field `user`"), "{err}");
}
