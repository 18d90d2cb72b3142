//! Why an HTTP upstream could not be reached, in words an operator can act on.
//!
//! hyper's client error says only "client error (Connect)"; the cause sits further down its
//! `source()` chain (which [`ProxyError`](crate::error::ProxyError) also walks, for errors of
//! other kinds). A TLS failure is a `rustls::Error` wrapped (twice) inside an `io::Error`,
//! whose `source()` skips it, so `io::Error`s are unwrapped by hand. On an HTTP/2 connection
//! the typed error is lost: h2 keeps only the kind and text of the I/O error, and hyper wraps
//! that text in a new `io::Error`. tokio-rustls reports every rustls error as `InvalidData`,
//! which nothing else below hyper does before the response headers (hyper reports a bad
//! response head as a parse error), so on a TLS upstream that kind marks a TLS failure too.
//!
//! An upstream that requires a client certificate refuses a missing or unwelcome one only after
//! the handshake (TLS 1.3), with an alert or by simply closing the connection. The gateway knows
//! whether the upstream asked for one ([`ClientCertRequests`](super::tls::ClientCertRequests))
//! and says so, since the bare symptom — a closed connection — names no cause.

use std::error::Error;
use std::io::ErrorKind;

use crate::body::BoxError;

/// An HTTP upstream request (or connection) that failed before a response arrived. Displays
/// as its whole cause, such as `TLS: invalid peer certificate: UnknownIssuer` or `tcp connect
/// error: Connection refused (os error 111)`; the error it was built from stays in
/// [`ConnectFailure::inner`].
#[derive(Debug)]
pub struct ConnectFailure {
    cause: String,
    is_tls: bool,
    inner: BoxError,
}

/// No response head arrived by the request's deadline (the upstream's `response_timeout`
/// from when the request was sent on); the caller answers with a timeout, not a failure to
/// connect.
#[derive(Debug, thiserror::Error)]
#[error("no response head within the upstream's response_timeout")]
pub(crate) struct HeadOverdue;

/// What an `https://` upstream has done about client certificates so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientCertState {
    /// It asked for one, on some connection.
    pub(crate) asked: bool,
    /// The gateway has one to present.
    pub(crate) configured: bool,
}

/// What went wrong in TLS.
enum TlsCause {
    /// The gateway's own checks refused the upstream (its certificate, say).
    Local(String),
    /// The upstream's alert.
    Alert(String),
    /// The upstream closed the connection without a word, after asking for a client
    /// certificate.
    Closed,
}

const NO_CLIENT_CERTIFICATE: &str = "the upstream asked for a client certificate and none is \
                                     configured (tls.client_cert, tls.client_key)";

impl ConnectFailure {
    /// A failure of a plain `http://` upstream.
    pub(crate) fn plain(error: impl Into<BoxError>) -> Self {
        let inner = error.into();
        Self {
            cause: describe(&*inner),
            is_tls: false,
            inner,
        }
    }

    /// A failure of an `https://` upstream, with what it did about client certificates.
    pub(crate) fn tls(error: impl Into<BoxError>, client_cert: ClientCertState) -> Self {
        let inner = error.into();
        let missing = client_cert.asked && !client_cert.configured;
        let cause = match tls_cause(&*inner, client_cert.asked) {
            Some(TlsCause::Local(text)) => format!("TLS: {text}"),
            Some(TlsCause::Alert(text)) if missing => {
                format!("TLS: {NO_CLIENT_CERTIFICATE}; {text}")
            }
            Some(TlsCause::Alert(text)) => format!("TLS: {text}"),
            Some(TlsCause::Closed) if missing => {
                format!("TLS: {NO_CLIENT_CERTIFICATE}; it closed the connection")
            }
            Some(TlsCause::Closed) => format!(
                "TLS: the upstream asked for a client certificate, was sent tls.client_cert, and \
                 closed the connection (does it accept that certificate?): {}",
                describe(&*inner)
            ),
            None => return Self::plain(inner),
        };
        Self {
            cause,
            is_tls: true,
            inner,
        }
    }

    /// The error this failure was built from (hyper's, or the connector's).
    pub fn inner(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.inner
    }

    /// Whether the response head did not arrive in time ([`HeadOverdue`]).
    pub(crate) fn is_overdue(&self) -> bool {
        self.inner.is::<HeadOverdue>()
    }

    /// Whether TLS failed: the handshake, or the upstream ending the session (such as over a
    /// client certificate it demands).
    pub fn is_tls(&self) -> bool {
        self.is_tls
    }
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.cause)
    }
}

// No `source()`: the text already is the whole chain, and whoever walks sources (the
// `ProxyError` messages do) would print it twice.
impl Error for ConnectFailure {}

/// Every message of `error`'s chain, joined by `: `; hyper's own client error ("client error
/// (Connect)") left out, since it says nothing its causes do not.
fn describe(error: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = if error.is::<hyper_util::client::legacy::Error>() {
        error.source()
    } else {
        Some(error)
    };
    while let Some(cause) = next {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        next = cause.source();
    }
    if parts.is_empty() {
        error.to_string()
    } else {
        parts.join(": ")
    }
}

/// What TLS reported, if TLS is what failed anywhere in `error`'s chain. A connection that
/// ends without a word counts only after the upstream asked for a client certificate:
/// elsewhere it is an ordinary dropped connection.
fn tls_cause(error: &(dyn Error + 'static), asked_for_client_cert: bool) -> Option<TlsCause> {
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(tls) = unwrap_io(current).downcast_ref::<rustls::Error>() {
            return Some(match tls {
                rustls::Error::AlertReceived(_) => TlsCause::Alert(tls.to_string()),
                _ => TlsCause::Local(tls.to_string()),
            });
        }
        // The connection ended before the request was written: under TLS 1.3 the upstream's
        // alert can reach the connection's task before the request does, and only that task
        // sees it. After a request for a client certificate, that is the refusal.
        if asked_for_client_cert
            && current
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_canceled)
        {
            return Some(TlsCause::Closed);
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            match io.kind() {
                // Past the handshake (on HTTP/2, see above): the upstream's alert.
                ErrorKind::InvalidData => return Some(TlsCause::Alert(io.to_string())),
                ErrorKind::UnexpectedEof
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                    if asked_for_client_cert =>
                {
                    return Some(TlsCause::Closed);
                }
                _ => {}
            }
        }
        next = current.source();
    }
    None
}

/// The innermost error an `io::Error` (or a nest of them) wraps; `error` itself otherwise.
fn unwrap_io<'a>(mut error: &'a (dyn Error + 'static)) -> &'a (dyn Error + 'static) {
    while let Some(inner) = error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        error = inner;
    }
    error
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::Request;
    use http_body_util::Full;

    use std::time::Duration;

    use crate::clock::{Clock, SystemClock};
    use crate::testing::{route, unreachable_url};

    #[tokio::test]
    async fn refused_connection_names_the_tcp_cause_not_hypers_wrapper() {
        let route = route(&unreachable_url());
        let request = Request::post(route.upstream.url.clone())
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        let crate::upstream::UpstreamClient::Http { client, .. } = &route.client else {
            panic!("an HTTP route");
        };
        let failure = client
            .send(request, SystemClock.now() + Duration::from_secs(10))
            .await
            .expect_err("nothing listens there");
        let text = failure.to_string();
        assert!(text.starts_with("tcp connect error"), "{text}");
        assert!(!failure.is_tls());
    }
}
