//! What the layers learn about one request, kept together in one request extension.
//!
//! Each layer used to keep what it learned in an extension of its own type: six on every call,
//! each a boxed value in a map that outgrows its first table at the fourth, then looked up by
//! type id and dropped one by one. A read paid about 1,800 instructions for that bookkeeping
//! (`bench/instructions.sh`, callgrind). Here one record, inserted with the first thing learned
//! (the server's peer address), holds them all. Each field names the one layer that writes it;
//! the others only read it, or take it once (the classification, the audit lines owed).

use http::Extensions;

use crate::audit::CallAudit;
use crate::classify::Classification;
use crate::client_limit::PeerAddr;
use crate::identity::Caller;
use crate::parse::HeldBody;
use crate::route::Route;

/// Everything the layers learn about one request (see the [module docs](self)).
#[derive(Debug, Clone, Default)]
pub struct RequestContext {
    /// The TCP peer the request came from. Written by the server (and by the legacy clients'
    /// adapter, for the messages of a session).
    pub peer: Option<PeerAddr>,
    /// The route the request's path selects. Written by hardening (and by the legacy clients'
    /// adapter).
    pub route: Option<Route>,
    /// Who is calling. Written by the identity layer, taken by approval.
    pub caller: Option<Caller>,
    /// The body bytes the parsed request holds of the listener's budget, for as long as the
    /// request lives. Written by the parse layer.
    pub held_body: Option<HeldBody>,
    /// The judged gated calls. Written by classification, taken by approval.
    pub classification: Option<Classification>,
    /// The outcome lines owed for the calls approval let through. Written by approval, taken by
    /// the audit layer.
    pub audits: Vec<CallAudit>,
}

/// The request context of a request's (or response's) extensions.
pub trait RequestContextExt {
    /// The context, if any layer has written one.
    fn context(&self) -> Option<&RequestContext>;

    /// The context, inserted empty if none was written yet.
    fn context_mut(&mut self) -> &mut RequestContext;

    /// The request's route, once hardening has chosen one.
    fn route(&self) -> Option<&Route> {
        self.context()?.route.as_ref()
    }

    /// The request's caller, once the identity layer has let it through.
    fn caller(&self) -> Option<&Caller> {
        self.context()?.caller.as_ref()
    }

    /// The peer the request came from, when the server recorded one.
    fn peer(&self) -> Option<PeerAddr> {
        self.context()?.peer
    }
}

impl RequestContextExt for Extensions {
    fn context(&self) -> Option<&RequestContext> {
        self.get()
    }

    fn context_mut(&mut self) -> &mut RequestContext {
        self.get_or_insert_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_one_layer_writes_the_next_reads_from_the_one_record() {
        let mut extensions = Extensions::new();
        assert!(extensions.route().is_none() && extensions.peer().is_none());
        let peer = PeerAddr("127.0.0.1:5000".parse().expect("an address"));
        extensions.context_mut().peer = Some(peer);
        extensions.context_mut().caller = Some(Caller(None));
        assert_eq!(extensions.peer(), Some(peer));
        assert!(extensions.caller().is_some());
        assert!(extensions.route().is_none());
        assert_eq!(extensions.len(), 1, "one extension holds the whole context");
    }
}
