//! What a gated call asks for — its target, arguments, presented confirmation and the other
//! params an approval binds — and the one decision of which `confirmationToken` argument is the
//! gateway's. Hashing, showing and forwarding all read the same value from here.

use countersign_jsonrpc::mcp::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION,
};
use countersign_jsonrpc::message::{Params, Request};
use countersign_jsonrpc::{Kind, MemberEdit, ObjectWriter, RawJson};
use countersign_policy::{Method, PinnedTool};
use countersign_token::{CanonicalError, normalize_numbers_raw};

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
    pub fn of(method: Method, params: Option<&Params>) -> Result<Self, ProxyError> {
        let target_key = target_key(method);
        // The three members read here, found among the places the parse noted.
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
            params: params.map(|params| params.raw().clone()),
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

    /// An approved call as it is forwarded: [`CallParts::strip_approval`]'s, with arguments
    /// that are exactly `hashed` — the value hashed into `ah` and shown, made by
    /// [`CallParts::arguments_without_token`] — with every number in its canonical text, so the
    /// upstream runs `1` where the person approved `1` and the client wrote `1.0`. The params
    /// are rewritten in at most one walk.
    ///
    /// Fails on a number with no canonical text; the hash would have refused it first.
    pub fn approved_call(
        &self,
        mut call: Request,
        redeemed: bool,
        hashed: &RawJson,
    ) -> Result<Request, CanonicalError> {
        let arguments = match self.arguments.kind() {
            Kind::Object => {
                let forwarded = normalize_numbers_raw(hashed)?;
                (forwarded != self.arguments).then_some(forwarded)
            }
            _ => None,
        };
        if let Some(params) = call.params.as_mut() {
            self.rewrite_params(params, redeemed, arguments);
        }
        Ok(call)
    }

    /// Removes the gateway's approval artefacts from a call's params: the token in `_meta` and
    /// (when ours) `arguments`, and — once an approval was redeemed — the gateway's
    /// `requestState` and its key in `inputResponses`.
    ///
    /// `params` are the ones `self` was read from, so the tokens found then say whether there
    /// is anything to look for: a call without one (every read) is not walked again. Otherwise
    /// the params are rewritten in one walk, and only when something was removed; every other
    /// member is copied byte for byte.
    pub fn strip_params(&self, params: Option<&mut Params>, redeemed: bool) {
        let Some(params) = params else { return };
        // An object with our token: made by the one function that made the value hashed into
        // `ah` and shown.
        let arguments = (self.token_argument_is_ours && self.argument_token.is_some())
            .then(|| self.arguments_without_token());
        self.rewrite_params(params, redeemed, arguments);
    }

    /// [`CallParts::strip_params`], with `arguments` (when given) in place of the arguments.
    fn rewrite_params(&self, params: &mut Params, redeemed: bool, mut arguments: Option<RawJson>) {
        let strip_meta = self.meta_token.is_some();
        if !redeemed && !strip_meta && arguments.is_none() {
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
            "arguments" => arguments
                .take()
                .map_or(MemberEdit::Keep, MemberEdit::Replace),
            _ => MemberEdit::Keep,
        });
        if let Some(stripped) = stripped {
            *params = stripped.into();
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
mod tests;
