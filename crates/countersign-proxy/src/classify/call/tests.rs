//! `CallParts`: reading a gated call's params, and the params forwarded once it is approved.

use countersign_jsonrpc::message::Message;
use serde_json::{Value, json};

use super::*;

/// `text` as the params of a parsed request, its members noted as the gateway reads them.
fn params_of(text: &[u8]) -> Params {
    let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"#.to_vec();
    body.extend_from_slice(text);
    body.push(b'}');
    match Message::parse(&body) {
        Ok(Message::Request(request)) => request.params.expect("params"),
        other => panic!("not a request with params: {other:?}"),
    }
}

fn parts(params: Value) -> CallParts {
    CallParts::of(Method::ToolsCall, Some(&params.into())).expect("valid params")
}

#[test]
fn the_token_argument_is_the_gateways_unless_the_tool_declares_one() {
    let call = parts(json!({"name": "t", "arguments": {"x": 1, "confirmationToken": "tok"}}));
    assert_eq!(call.presented_token(), Some("tok"));
    assert_eq!(call.arguments_without_token(), json!({"x": 1}));

    let definition = json!({"name": "t", "inputSchema": {"type": "object",
        "properties": {"confirmationToken": {"type": "string"}}}});
    let mut catalog = countersign_policy::Catalog::new();
    catalog.observe("up", std::slice::from_ref(&definition));
    let own = call.with_definition(catalog.get("up", "t"));
    assert_eq!(
        own.presented_token(),
        None,
        "the tool's own argument is not a token"
    );
    assert_eq!(
        own.arguments_without_token(),
        json!({"x": 1, "confirmationToken": "tok"}),
        "the tool's own argument is hashed and forwarded"
    );
}

#[test]
fn task_and_acted_on_meta_are_bound_but_transport_meta_is_not() {
    let plain = parts(json!({"name": "t", "arguments": {},
        "_meta": {"progressToken": 7, "countersign/confirmationToken": "tok",
                  "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}));
    assert_eq!(plain.bound_params(), None);

    let with_task = parts(json!({"name": "t", "task": {"ttl": 60000}}));
    assert_eq!(
        with_task.bound_params().map(|b| b.to_value()),
        Some(json!({"task": {"ttl": 60000}}))
    );

    let acted_on =
        parts(json!({"name": "t", "_meta": {"progressToken": 1, "com.example/dry_run": false}}));
    assert_eq!(
        acted_on.bound_params().map(|b| b.to_value()),
        Some(json!({"_meta": {"com.example/dry_run": false}}))
    );
}

#[test]
fn a_call_without_a_name_or_with_odd_arguments_is_invalid() {
    assert!(CallParts::of(Method::ToolsCall, Some(&json!({}).into())).is_err());
    assert!(
        CallParts::of(
            Method::ToolsCall,
            Some(&json!({"name": "t", "arguments": [1]}).into())
        )
        .is_err()
    );
    assert!(
        CallParts::of(
            Method::ResourcesRead,
            Some(&json!({"uri": "file:///x"}).into())
        )
        .is_ok()
    );
}

/// The members of an object, each value as its exact text.
fn members(object: &RawJson) -> Vec<(String, Vec<u8>)> {
    object
        .members()
        .expect("an object")
        .map(|(key, value)| (key.into_owned(), value.as_bytes().to_vec()))
        .collect()
}

/// `members(object)` without `key`.
fn members_but(object: &RawJson, key: &str) -> Vec<(String, Vec<u8>)> {
    members(object)
        .into_iter()
        .filter(|(k, _)| k != key)
        .collect()
}

/// Params as a client may write them: whitespace between tokens, escapes, exact numbers.
const SPACED_PARAMS: &[u8] = br#"{ "name" : "send" ,
    "arguments" : { "to" : "ada\u0040example.com" , "confirmationToken" : "tok" ,
                    "n" : 1.50 , "deep" : { "a" : [ 1e5 , -0 , "\u00e9\n" ] , "e" : { } } } ,
    "_meta" : { "progressToken" : 7 , "countersign/confirmationToken" : "tok" ,
                "com.example/x" : "\u00e9" } ,
    "\u0074ask" : { "ttl" : 60000 } ,
    "requestState" : "opaque" ,
    "inputResponses" : { "countersign/approval" : { "action" : "accept" } , "other" : 1 } }"#;

#[test]
fn strip_params_removes_only_the_tokens_and_leaves_every_other_member_byte_identical() {
    let original = params_of(SPACED_PARAMS);
    let call = CallParts::of(Method::ToolsCall, Some(&original)).expect("valid params");
    assert_eq!(call.presented_token(), Some("tok"));
    let mut params = original.clone();
    call.strip_params(Some(&mut params), false);

    // Same members in the same order; only `_meta` and `arguments` changed.
    let keys = |object: &RawJson| -> Vec<String> {
        members(object).into_iter().map(|(key, _)| key).collect()
    };
    assert_eq!(keys(&params), keys(&original));
    let untouched = |object: &RawJson| -> Vec<(String, Vec<u8>)> {
        members(object)
            .into_iter()
            .filter(|(key, _)| key != "_meta" && key != "arguments")
            .collect()
    };
    assert_eq!(untouched(&params), untouched(&original));
    // An escaped key is kept as written.
    assert!(params.as_text().contains(r#""\u0074ask""#), "{params:?}");

    let meta = params.get("_meta").expect("_meta kept");
    let original_meta = original.get("_meta").expect("_meta");
    assert_eq!(meta.get(TOKEN_META), None);
    assert_eq!(members(&meta), members_but(&original_meta, TOKEN_META));

    let arguments = params.get("arguments").expect("arguments kept");
    let original_arguments = original.get("arguments").expect("arguments");
    assert_eq!(arguments.get(TOKEN_ARGUMENT), None);
    assert_eq!(
        members(&arguments),
        members_but(&original_arguments, TOKEN_ARGUMENT)
    );
    // What is forwarded is what was hashed and shown (the same value; whitespace between
    // tokens is not part of it, and is dropped when the call is written).
    assert_eq!(
        arguments.minified(),
        call.arguments_without_token().minified()
    );
    assert_eq!(
        arguments.get("deep").expect("deep").as_bytes(),
        br#"{ "a" : [ 1e5 , -0 , "\u00e9\n" ] , "e" : { } }"#
    );

    // Without a redeemed approval, the approval channels' artefacts stay as they were.
    assert_eq!(
        params.get("requestState").map(|v| v.as_bytes().to_vec()),
        original.get("requestState").map(|v| v.as_bytes().to_vec())
    );
    assert_eq!(
        params.get("inputResponses").map(|v| v.as_bytes().to_vec()),
        original
            .get("inputResponses")
            .map(|v| v.as_bytes().to_vec())
    );
}

#[test]
fn strip_params_after_redemption_also_removes_the_gateways_answer() {
    let original = params_of(SPACED_PARAMS);
    let call = CallParts::of(Method::ToolsCall, Some(&original)).expect("valid params");
    let mut params = original.clone();
    call.strip_params(Some(&mut params), true);
    assert_eq!(params.get("requestState"), None);
    let responses = params
        .get("inputResponses")
        .expect("another answer is kept");
    let original_responses = original.get("inputResponses").expect("inputResponses");
    assert_eq!(
        members(&responses),
        members_but(&original_responses, APPROVAL_KEY)
    );
    for key in ["name", "task"] {
        assert_eq!(
            params.get(key).map(|v| v.as_bytes().to_vec()),
            original.get(key).map(|v| v.as_bytes().to_vec()),
            "{key}"
        );
    }

    // With only the gateway's answer in it, `inputResponses` goes altogether.
    let only_ours = json!({"name": "t", "inputResponses": {APPROVAL_KEY: {"action": "accept"}}});
    let mut params = Params::from(only_ours);
    call.strip_params(Some(&mut params), true);
    assert_eq!(params.raw(), &json!({"name": "t"}));
}

#[test]
fn strip_params_keeps_a_tools_own_token_argument_and_copies_nothing_without_tokens() {
    let original = params_of(SPACED_PARAMS);
    let definition = json!({"name": "send", "inputSchema": {"type": "object",
        "properties": {"confirmationToken": {"type": "string"}}}});
    let mut catalog = countersign_policy::Catalog::new();
    catalog.observe("up", std::slice::from_ref(&definition));
    let call = CallParts::of(Method::ToolsCall, Some(&original))
        .expect("valid params")
        .with_definition(catalog.get("up", "send"));
    let mut params = original.clone();
    call.strip_params(Some(&mut params), false);
    assert_eq!(
        params.get("arguments").map(|v| v.as_bytes().to_vec()),
        original.get("arguments").map(|v| v.as_bytes().to_vec()),
        "the tool's own argument is forwarded as sent"
    );
    let meta = params.get("_meta").expect("_meta kept");
    assert_eq!(meta.get(TOKEN_META), None);

    let plain = params_of(br#"{ "name" : "t" , "arguments" : { "x" : 1.0 } }"#);
    let call = CallParts::of(Method::ToolsCall, Some(&plain)).expect("valid params");
    let mut params = plain.clone();
    call.strip_params(Some(&mut params), true);
    assert_eq!(params.as_bytes(), plain.as_bytes(), "nothing to strip");
    call.strip_params(None, true);
}

#[test]
fn an_approved_call_forwards_the_hashed_arguments_with_canonical_numbers() {
    let original = params_of(SPACED_PARAMS);
    let call = CallParts::of(Method::ToolsCall, Some(&original)).expect("valid params");
    let request = |params: &Params| Request {
        id: countersign_jsonrpc::message::RequestId::Number(1),
        method: "tools/call".into(),
        params: Some(params.clone()),
    };
    let approved = call
        .approved_call(request(&original), true, &call.arguments_without_token())
        .expect("canonical numbers exist");
    let params = approved.params.expect("params");

    let arguments = params.get("arguments").expect("arguments kept");
    assert_eq!(
        arguments.to_value(),
        json!({"to": "ada@example.com", "n": 1.5, "deep": {"a": [100000, 0, "\u{e9}\n"], "e": {}}})
    );
    assert_eq!(
        arguments.minified().as_text(),
        r#"{"to":"ada\u0040example.com","n":1.5,"deep":{"a":[100000,0,"\u00e9\n"],"e":{}}}"#,
        "numbers in canonical text, everything else as written"
    );
    // Everything else as `strip_params` leaves it.
    let mut stripped = original.clone();
    call.strip_params(Some(&mut stripped), true);
    assert_eq!(
        members_but(&params, "arguments"),
        members_but(&stripped, "arguments")
    );

    // The params an approved call written as `text` is forwarded with.
    let approved_params = |text: &[u8]| {
        let params = params_of(text);
        let call = CallParts::of(Method::ToolsCall, Some(&params)).expect("valid params");
        call.approved_call(request(&params), false, &call.arguments_without_token())
            .expect("canonical")
            .params
            .expect("params")
    };
    // Nothing to strip and every number canonical: the params are not rewritten.
    let plain = br#"{ "name" : "t" , "arguments" : { "x" : 1.5 } }"#;
    assert_eq!(approved_params(plain).as_bytes(), plain);
    // Only a number to rewrite: the arguments are replaced (the params written anew).
    let inexact = br#"{ "name" : "t" , "arguments" : { "x" : 1.0 } }"#;
    assert_eq!(
        approved_params(inexact).as_text(),
        r#"{"name":"t","arguments":{"x":1}}"#
    );
}

#[test]
fn params_written_with_escaped_keys_are_read_by_their_unescaped_names() {
    let params = params_of(
        br#"{"n\u0061me":"t","\u0061rguments":{"confirmationToken":"tok","x":1},
            "_m\u0065ta":{"countersign/confirmationToken":"tok","com.example/K":1}}"#,
    );
    let call = CallParts::of(Method::ToolsCall, Some(&params)).expect("valid params");
    assert_eq!(call.target, "t");
    assert_eq!(call.meta_token.as_deref(), Some("tok"));
    assert_eq!(call.presented_token(), Some("tok"));
    assert_eq!(call.arguments_without_token(), json!({"x": 1}));
    assert_eq!(
        call.bound_params().map(|b| b.to_value()),
        Some(json!({"_meta": {"com.example/K": 1}}))
    );
    // A key whose escaped spelling reads `name` is not `name`.
    let spelled = params_of(br#"{"nam\\u0065":"t"}"#);
    assert!(CallParts::of(Method::ToolsCall, Some(&spelled)).is_err());
}

#[test]
fn the_benchmark_call_binds_nothing_beyond_its_target() {
    let params = params_of(
        br#"{"name":"list_products","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}"#,
    );
    let call = CallParts::of(Method::ToolsCall, Some(&params)).expect("valid params");
    assert_eq!(call.target, "list_products");
    assert_eq!(call.arguments.as_text(), "{}");
    assert!(!call.carries_token());
    assert_eq!(call.bound_params(), None);
    let mut stripped = params.clone();
    call.strip_params(Some(&mut stripped), false);
    assert_eq!(stripped.as_bytes(), params.as_bytes(), "nothing to strip");
}
