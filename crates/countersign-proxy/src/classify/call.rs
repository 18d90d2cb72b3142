//! What a gated call asks for — its target, arguments, presented confirmation and the other
//! params an approval binds — and the one decision of which `confirmationToken` argument is the
//! gateway's. Hashing, showing and forwarding all read the same value from here.

use countersign_jsonrpc::mcp::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION,
};
use countersign_jsonrpc::message::Request;
use countersign_policy::{Method, PinnedTool};
use serde_json::{Map, Value};

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
    /// `arguments` as sent (`Null` when absent).
    pub arguments: Value,
    /// `_meta["countersign/confirmationToken"]`: works for every tool and method.
    pub meta_token: Option<String>,
    /// `arguments.confirmationToken`, when present (non-strings as their JSON text, so a
    /// malformed token is refused rather than ignored).
    pub argument_token: Option<String>,
    /// Whether `arguments.confirmationToken` is the gateway's (a tool that declares no argument
    /// of that name), so it is read and stripped rather than left for the tool.
    pub token_argument_is_ours: bool,
    /// The other params an approval binds (`task`, acted-on `_meta` keys, unknown members),
    /// or `None` when there are none.
    pub bound_params: Option<Value>,
}

impl CallParts {
    pub fn of(method: Method, params: Option<&Map<String, Value>>) -> Result<Self, ProxyError> {
        let target_key = if method == Method::ResourcesRead {
            "uri"
        } else {
            "name"
        };
        let target = params
            .and_then(|p| p.get(target_key))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ProxyError::InvalidParams(format!(
                    "{} needs a string `params.{target_key}`",
                    method.as_str()
                ))
            })?
            .to_owned();
        let arguments = match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) => Value::Null,
            Some(Value::Object(args)) => Value::Object(args.clone()),
            Some(_) => {
                return Err(ProxyError::InvalidParams(
                    "`params.arguments` must be an object".into(),
                ));
            }
        };
        let meta = params.and_then(|p| p.get("_meta"));
        let meta_token = match meta.and_then(|m| m.get(TOKEN_META)) {
            None => None,
            Some(Value::String(token)) => Some(token.clone()),
            Some(_) => {
                return Err(ProxyError::InvalidParams(format!(
                    "`_meta.{TOKEN_META}` must be a string"
                )));
            }
        };
        let argument_token = match arguments.get(TOKEN_ARGUMENT) {
            None => None,
            Some(Value::String(token)) => Some(token.clone()),
            Some(other) => Some(other.to_string()),
        };
        Ok(Self {
            method,
            target,
            arguments,
            meta_token,
            argument_token,
            token_argument_is_ours: method == Method::ToolsCall,
            bound_params: params.and_then(|p| bound_params(p, target_key)),
        })
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
    pub fn arguments_without_token(&self) -> Value {
        match &self.arguments {
            Value::Object(args) if self.token_argument_is_ours => {
                let mut args = args.clone();
                args.remove(TOKEN_ARGUMENT);
                Value::Object(args)
            }
            Value::Null => Value::Object(Map::new()),
            other => other.clone(),
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
    pub fn strip_params(&self, params: Option<&mut Map<String, Value>>, redeemed: bool) {
        let Some(params) = params else { return };
        if redeemed {
            params.remove("requestState");
            if let Some(Value::Object(responses)) = params.get_mut("inputResponses") {
                responses.remove(APPROVAL_KEY);
                if responses.is_empty() {
                    params.remove("inputResponses");
                }
            }
        }
        if let Some(Value::Object(meta)) = params.get_mut("_meta") {
            meta.remove(TOKEN_META);
        }
        if self.token_argument_is_ours
            && let Some(Value::Object(args)) = params.get_mut("arguments")
        {
            args.remove(TOKEN_ARGUMENT);
        }
    }
}

/// The params a confirmation binds besides target and arguments (see [`UNBOUND_PARAMS`] and
/// [`UNBOUND_META`]), as one object, or `None` when there are none.
fn bound_params(params: &Map<String, Value>, target_key: &str) -> Option<Value> {
    let mut bound = Map::new();
    for (key, value) in params {
        if key == target_key || UNBOUND_PARAMS.contains(&key.as_str()) {
            continue;
        }
        if key == "_meta" {
            let Value::Object(meta) = value else {
                bound.insert(key.clone(), value.clone());
                continue;
            };
            let acted_on: Map<String, Value> = meta
                .iter()
                .filter(|(k, _)| !UNBOUND_META.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !acted_on.is_empty() {
                bound.insert(key.clone(), Value::Object(acted_on));
            }
            continue;
        }
        bound.insert(key.clone(), value.clone());
    }
    (!bound.is_empty()).then_some(Value::Object(bound))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parts(params: Value) -> CallParts {
        CallParts::of(Method::ToolsCall, params.as_object()).expect("valid params")
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
        assert_eq!(plain.bound_params, None);

        let with_task = parts(json!({"name": "t", "task": {"ttl": 60000}}));
        assert_eq!(
            with_task.bound_params,
            Some(json!({"task": {"ttl": 60000}}))
        );

        let acted_on = parts(
            json!({"name": "t", "_meta": {"progressToken": 1, "com.example/dry_run": false}}),
        );
        assert_eq!(
            acted_on.bound_params,
            Some(json!({"_meta": {"com.example/dry_run": false}}))
        );
    }

    #[test]
    fn a_call_without_a_name_or_with_odd_arguments_is_invalid() {
        assert!(CallParts::of(Method::ToolsCall, json!({}).as_object()).is_err());
        assert!(
            CallParts::of(
                Method::ToolsCall,
                json!({"name": "t", "arguments": [1]}).as_object()
            )
            .is_err()
        );
        assert!(
            CallParts::of(
                Method::ResourcesRead,
                json!({"uri": "file:///x"}).as_object()
            )
            .is_ok()
        );
    }
}
