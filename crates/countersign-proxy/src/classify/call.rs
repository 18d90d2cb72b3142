//! What a gated call asks for — its target, arguments, presented confirmation and the other
//! params an approval binds — and the one decision of which `confirmationToken` argument is the
//! gateway's. Hashing, showing and forwarding all read the same value from here.

use countersign_jsonrpc::mcp::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION,
};
use countersign_jsonrpc::message::Request;
use countersign_jsonrpc::{Kind, MemberEdit, ObjectWriter, RawJson};
use countersign_policy::{Method, PinnedTool};

use crate::error::ProxyError;
use crate::wire::{APPROVAL_KEY, TOKEN_ARGUMENT, TOKEN_META};

/// The call-like methods the gateway judges.
pub fn gated_method(method: &str) -> Option<Method> {
    match method {
        "tools/call" => Some(Method::ToolsCall),
        "prompts/get" => Some(Method::PromptsGet),
        "resources/read" => Some(Method::ResourcesRead),
        _ => None,
    }
}

/// Params members a confirmation does not bind besides the target (bound as `tool`): the
/// arguments have their own claim (`ah`), and the approval channels' own artefacts come and go
/// between the held call and its retry.
const UNBOUND_PARAMS: &[&str] = &["arguments", "requestState", "inputResponses"];

/// `_meta` keys that only steer transport and reporting, never what runs; every other key
/// (an upstream may act on any) is bound.
const UNBOUND_META: &[&str] = &[
    "progressToken",
    TOKEN_META,
    META_PROTOCOL_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    "traceparent",
    "tracestate",
    "baggage",
];

/// The target, arguments and presented approval of a gated call.
#[derive(Debug, Clone)]
pub struct CallParts {
    pub method: Method,
    pub target: String,
    /// `arguments` as sent (`null` when absent): a slice of the request, never a copy.
    pub arguments: RawJson,
    /// `_meta["countersign/confirmationToken"]`: works for every tool and method.
    pub meta_token: Option<String>,
    /// `arguments.confirmationToken`, when present (non-strings as their JSON text, so a
    /// malformed token is refused rather than ignored).
    pub argument_token: Option<String>,
    /// Whether `arguments.confirmationToken` is the gateway's (a tool that declares no argument
    /// of that name), so it is read and stripped rather than left for the tool.
    pub token_argument_is_ours: bool,
    /// The params as sent, for [`CallParts::bound_params`]: a slice of the request.
    params: Option<RawJson>,
}

impl CallParts {
    pub fn of(method: Method, params: Option<&RawJson>) -> Result<Self, ProxyError> {
        let target_key = target_key(method);
        // One walk over the params for the three members read here.
        let [target, arguments, meta] = params
            .map(|p| p.get_many([target_key, "arguments", "_meta"]))
            .unwrap_or_default();
        let target = target
            .and_then(|t| t.as_str().map(|t| t.into_owned()))
            .ok_or_else(|| {
                ProxyError::InvalidParams(format!(
                    "{} needs a string `params.{target_key}`",
                    method.as_str()
                ))
            })?;
        let arguments = match arguments {
            None => RawJson::null(),
            Some(args) if matches!(args.kind(), Kind::Null | Kind::Object) => args,
            Some(_) => {
                return Err(ProxyError::InvalidParams(
                    "`params.arguments` must be an object".into(),
                ));
            }
        };
        let meta_token = match meta.and_then(|m| m.get(TOKEN_META)) {
            None => None,
            Some(token) => Some(
                token
                    .as_str()
                    .ok_or_else(|| {
                        ProxyError::InvalidParams(format!("`_meta.{TOKEN_META}` must be a string"))
                    })?
                    .into_owned(),
            ),
        };
        let argument_token = arguments
            .get(TOKEN_ARGUMENT)
            .map(|token| match token.as_str() {
                Some(token) => token.into_owned(),
                None => token.as_text().to_owned(),
            });
        Ok(Self {
            method,
            target,
            arguments,
            meta_token,
            argument_token,
            token_argument_is_ours: method == Method::ToolsCall,
            params: params.cloned(),
        })
    }

    /// The other params an approval binds (`task`, acted-on `_meta` keys, unknown members),
    /// or `None` when there are none. Built when a call is held or redeemed, not for every
    /// call judged: a read never needs it.
    pub fn bound_params(&self) -> Option<RawJson> {
        self.params
            .as_ref()
            .and_then(|params| bound_params(params, target_key(self.method)))
    }

    /// Settles whose `confirmationToken` argument it is, once the tool's definition is known:
    /// a tool that declares one keeps it, and only the `_meta` form is read.
    pub fn with_definition(mut self, pinned: Option<&PinnedTool>) -> Self {
        let tool_declares_it = pinned
            .and_then(|p| p.definition.get("inputSchema"))
            .and_then(|s| s.get("properties"))
            .and_then(|p| p.get(TOKEN_ARGUMENT))
            .is_some();
        if tool_declares_it {
            self.token_argument_is_ours = false;
        }
        self
    }

    /// Any confirmation presented, whoever's argument it may turn out to be.
    pub fn carries_token(&self) -> bool {
        self.meta_token.is_some() || self.argument_token.is_some()
    }

    /// A token in `_meta` and a different one in the arguments is ambiguous: which did the
    /// person approve? Such calls are refused as malformed.
    pub fn conflicting_tokens(&self) -> bool {
        self.token_argument_is_ours
            && matches!((&self.meta_token, &self.argument_token), (Some(a), Some(b)) if a != b)
    }

    pub fn presented_token(&self) -> Option<&str> {
        self.meta_token.as_deref().or(self
            .argument_token
            .as_deref()
            .filter(|_| self.token_argument_is_ours))
    }

    /// The arguments the upstream will see: exactly what is hashed into `ah` and shown to
    /// the person.
    pub fn arguments_without_token(&self) -> RawJson {
        match self.arguments.kind() {
            Kind::Object if self.token_argument_is_ours => {
                self.arguments.without_member(TOKEN_ARGUMENT)
            }
            Kind::Null => RawJson::empty_object(),
            _ => self.arguments.clone(),
        }
    }

    /// The request without the gateway's approval artefacts: see [`CallParts::strip_params`].
    pub fn strip_approval(&self, mut call: Request, redeemed: bool) -> Request {
        self.strip_params(call.params.as_mut(), redeemed);
        call
    }

    /// Removes the gateway's approval artefacts from a call's params: the token in `_meta` and
    /// (when ours) `arguments`, and — once an approval was redeemed — the gateway's
    /// `requestState` and its key in `inputResponses`.
    ///
    /// `params` are the ones `self` was read from, so the tokens found then say whether there
    /// is anything to look for: a call without one (every read) is not walked again. Otherwise
    /// the params are rewritten in one walk, and only when something was removed; every other
    /// member is copied byte for byte.
    pub fn strip_params(&self, params: Option<&mut RawJson>, redeemed: bool) {
        let Some(params) = params else { return };
        let strip_meta = self.meta_token.is_some();
        let strip_argument = self.token_argument_is_ours && self.argument_token.is_some();
        if !redeemed && !strip_meta && !strip_argument {
            return;
        }
        let without = |object: &RawJson, key: &str| {
            object
                .edit_each_member(|k, _| {
                    if k == key {
                        MemberEdit::Remove
                    } else {
                        MemberEdit::Keep
                    }
                })
                .map(MemberEdit::Replace)
                .unwrap_or(MemberEdit::Keep)
        };
        let stripped = params.edit_each_member(|key, value| match key {
            "requestState" if redeemed => MemberEdit::Remove,
            "inputResponses" if redeemed => match without(value, APPROVAL_KEY) {
                MemberEdit::Replace(rest)
                    if rest.members().is_some_and(|mut m| m.next().is_none()) =>
                {
                    MemberEdit::Remove
                }
                edit => edit,
            },
            "_meta" if strip_meta => without(value, TOKEN_META),
            // An object with our token (`strip_argument`): made by the one function that made
            // the value hashed into `ah` and shown.
            "arguments" if strip_argument => MemberEdit::Replace(self.arguments_without_token()),
            _ => MemberEdit::Keep,
        });
        if let Some(stripped) = stripped {
            *params = stripped;
        }
    }
}

/// The param naming what a call acts on.
fn target_key(method: Method) -> &'static str {
    if method == Method::ResourcesRead {
        "uri"
    } else {
        "name"
    }
}

/// The params a confirmation binds besides target and arguments (see [`UNBOUND_PARAMS`] and
/// [`UNBOUND_META`]), as one object, or `None` when there are none.
fn bound_params(params: &RawJson, target_key: &str) -> Option<RawJson> {
    let mut bound = ObjectWriter::new();
    for (key, value) in params.members()? {
        if key == target_key || UNBOUND_PARAMS.contains(&key.as_ref()) {
            continue;
        }
        if key == "_meta"
            && let Some(meta) = value.members()
        {
            let mut acted_on = ObjectWriter::new();
            for (meta_key, meta_value) in meta {
                if !UNBOUND_META.contains(&meta_key.as_ref()) {
                    acted_on.push(&meta_key, &meta_value);
                }
            }
            if !acted_on.is_empty() {
                bound.push(&key, &acted_on.finish());
            }
            continue;
        }
        bound.push(&key, &value);
    }
    (!bound.is_empty()).then(|| bound.finish())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

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

        let acted_on = parts(
            json!({"name": "t", "_meta": {"progressToken": 1, "com.example/dry_run": false}}),
        );
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
        let original = RawJson::parse_slice(SPACED_PARAMS).expect("json");
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
        assert!(params.as_text().contains(r#""\u0074ask""#), "{params}");

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
        let original = RawJson::parse_slice(SPACED_PARAMS).expect("json");
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
        let only_ours =
            json!({"name": "t", "inputResponses": {APPROVAL_KEY: {"action": "accept"}}});
        let mut params = RawJson::from(&only_ours);
        call.strip_params(Some(&mut params), true);
        assert_eq!(params, json!({"name": "t"}));
    }

    #[test]
    fn strip_params_keeps_a_tools_own_token_argument_and_copies_nothing_without_tokens() {
        let original = RawJson::parse_slice(SPACED_PARAMS).expect("json");
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

        let plain = RawJson::parse_slice(br#"{ "name" : "t" , "arguments" : { "x" : 1.0 } }"#)
            .expect("json");
        let call = CallParts::of(Method::ToolsCall, Some(&plain)).expect("valid params");
        let mut params = plain.clone();
        call.strip_params(Some(&mut params), true);
        assert_eq!(params.as_bytes(), plain.as_bytes(), "nothing to strip");
        call.strip_params(None, true);
    }

    #[test]
    fn params_written_with_escaped_keys_are_read_by_their_unescaped_names() {
        let params = RawJson::parse_slice(
            br#"{"n\u0061me":"t","\u0061rguments":{"confirmationToken":"tok","x":1},
                "_m\u0065ta":{"countersign/confirmationToken":"tok","com.example/K":1}}"#,
        )
        .expect("json");
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
        let spelled = RawJson::parse_slice(br#"{"nam\\u0065":"t"}"#).expect("json");
        assert!(CallParts::of(Method::ToolsCall, Some(&spelled)).is_err());
    }

    #[test]
    fn the_benchmark_call_binds_nothing_beyond_its_target() {
        let params = RawJson::parse_slice(
            br#"{"name":"list_products","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}"#,
        )
        .expect("json");
        let call = CallParts::of(Method::ToolsCall, Some(&params)).expect("valid params");
        assert_eq!(call.target, "list_products");
        assert_eq!(call.arguments.as_text(), "{}");
        assert!(!call.carries_token());
        assert_eq!(call.bound_params(), None);
        let mut stripped = params.clone();
        call.strip_params(Some(&mut stripped), false);
        assert_eq!(stripped.as_bytes(), params.as_bytes(), "nothing to strip");
    }
}
