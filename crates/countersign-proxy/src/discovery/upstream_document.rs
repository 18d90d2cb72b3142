//! The protected-resource metadata of an upstream that does its own OAuth, relayed under the
//! gateway's URL.
//!
//! The document is fetched from the upstream's well-known URL for its own path, then, as MCP
//! clients do, from the bare well-known URL of its origin. It is kept for a minute (a failure
//! for five seconds), and one fetch per upstream runs at a time, so however many clients
//! discover at once, the upstream sees one request a minute. It must be a JSON object of at
//! most 64 KiB; everything in it is relayed as the upstream wrote it except `resource`, which
//! becomes the gateway's resource for the route: that is what the client connected to, what it
//! checks the document against, and what it asks the authorization server for a token for.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full, Limited};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tracing::warn;

use crate::body::ResponseBody;
use crate::clock::Clock;
use crate::config::{LegacyPaths, Upstream};
use crate::identity::{WELL_KNOWN, metadata_document};
use crate::route::Route;
use crate::upstream::HttpClient;

/// Largest metadata document accepted from an upstream.
const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// How long a fetched document (or the upstream's answer that it has none) is served.
const FRESH_FOR: Duration = Duration::from_secs(60);
/// How long a failed fetch is answered with 502 before the upstream is asked again.
const FAILURE_FRESH_FOR: Duration = Duration::from_secs(5);

/// What the upstream answered, last time it was asked.
#[derive(Debug, Clone)]
enum Fetched {
    Document(Arc<Map<String, Value>>),
    /// The upstream publishes no metadata: 404 at every well-known URL.
    Absent,
    /// Unreachable, too slow, or not a metadata document (the reason is logged).
    Failed,
}

/// The relayed metadata of one route's upstream.
#[derive(Debug)]
pub(super) struct UpstreamDocument {
    /// The gateway path of the route.
    pub(super) route_path: String,
    legacy: Option<LegacyPaths>,
    upstream: Upstream,
    /// A client of its own: discovery is rare, and never takes a connection calls are using.
    client: HttpClient,
    clock: Arc<dyn Clock>,
    /// Held across a fetch, so concurrent discoveries wait for the one fetch under way.
    cache: Mutex<Option<(Instant, Fetched)>>,
}

impl UpstreamDocument {
    pub(super) fn new(route: &Route, clock: Arc<dyn Clock>) -> Self {
        Self {
            route_path: route.path.clone(),
            legacy: route.legacy.clone(),
            upstream: route.upstream.clone(),
            client: HttpClient::new(&route.upstream),
            clock,
            cache: Mutex::new(None),
        }
    }

    /// Whether a request to `path` reaches this route (its MCP path or a legacy endpoint).
    pub(super) fn serves(&self, path: &str) -> bool {
        path == self.route_path
            || self
                .legacy
                .as_ref()
                .is_some_and(|legacy| legacy.sse == path || legacy.messages == path)
    }

    /// The answer to a client's `GET` of the route's metadata, naming `resource`.
    pub(super) async fn respond(&self, resource: &str) -> Response<ResponseBody> {
        match self.fetched().await {
            Fetched::Document(document) => {
                let mut document = Map::clone(&document);
                document.insert("resource".into(), Value::String(resource.to_owned()));
                metadata_document(StatusCode::OK, &Value::Object(document))
            }
            Fetched::Absent => metadata_document(
                StatusCode::NOT_FOUND,
                &json!({"error": "not_found",
                        "error_description": "the upstream publishes no protected-resource metadata"}),
            ),
            Fetched::Failed => metadata_document(
                StatusCode::BAD_GATEWAY,
                &json!({"error": "upstream_unavailable",
                        "error_description": "the upstream's protected-resource metadata could not be read"}),
            ),
        }
    }

    /// The cached answer while it is fresh, else a new fetch.
    async fn fetched(&self) -> Fetched {
        let mut cache = self.cache.lock().await;
        if let Some((at, fetched)) = cache.as_ref() {
            let fresh_for = match fetched {
                Fetched::Failed => FAILURE_FRESH_FOR,
                Fetched::Document(_) | Fetched::Absent => FRESH_FOR,
            };
            if self.clock.now().saturating_duration_since(*at) < fresh_for {
                return fetched.clone();
            }
        }
        let fetched = self.fetch().await;
        *cache = Some((self.clock.now(), fetched.clone()));
        fetched
    }

    async fn fetch(&self) -> Fetched {
        let mut absent = true;
        for uri in self.candidates() {
            match self.get(uri.clone()).await {
                Ok(Some(body)) => {
                    return match serde_json::from_slice::<Value>(&body) {
                        Ok(Value::Object(document)) => Fetched::Document(Arc::new(document)),
                        _ => {
                            self.failed(&uri, "the document is not a JSON object");
                            Fetched::Failed
                        }
                    };
                }
                Ok(None) => {}
                Err(reason) => {
                    self.failed(&uri, &reason);
                    absent = false;
                    break;
                }
            }
        }
        if absent {
            Fetched::Absent
        } else {
            Fetched::Failed
        }
    }

    /// The upstream's well-known URL for its own path, then its origin's bare one.
    fn candidates(&self) -> Vec<Uri> {
        let path = self.upstream.url.path().trim_end_matches('/');
        let mut paths = vec![format!("{WELL_KNOWN}{path}")];
        if !path.is_empty() {
            paths.push(WELL_KNOWN.to_owned());
        }
        paths
            .into_iter()
            .filter_map(|path| {
                Uri::builder()
                    .scheme(self.upstream.scheme.clone())
                    .authority(self.upstream.authority.clone())
                    .path_and_query(path)
                    .build()
                    .ok()
            })
            .collect()
    }

    /// The body of a 200 for `uri`, `None` for a 404, or why neither came.
    async fn get(&self, uri: Uri) -> Result<Option<Bytes>, String> {
        let mut request = Request::new(Full::new(Bytes::new()));
        *request.method_mut() = Method::GET;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(
            header::HOST,
            HeaderValue::from_str(self.upstream.authority.as_str())
                .expect("a parsed URI authority is a valid header value"),
        );
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let by = self.clock.now() + self.upstream.response_timeout;
        let exchange = async {
            let response = self
                .client
                .send(request, by)
                .await
                .map_err(|failure| failure.to_string())?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
                .collect()
                .await
                .map_err(|error| format!("reading the document: {error}"))?
                .to_bytes();
            match status {
                StatusCode::OK => Ok(Some(body)),
                StatusCode::NOT_FOUND => Ok(None),
                other => Err(format!("answered {other}")),
            }
        };
        tokio::time::timeout_at(by, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no answer within {:?}",
                    self.upstream.response_timeout
                ))
            })
    }

    fn failed(&self, uri: &Uri, reason: &str) {
        warn!(
            upstream = %self.upstream.name,
            url = %uri,
            reason,
            "the upstream's protected-resource metadata could not be read"
        );
    }
}
