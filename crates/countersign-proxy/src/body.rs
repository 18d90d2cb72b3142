//! The body types of the gateway's responses.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every response body the gateway produces: buffered JSON, relayed SSE, or nothing.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> ResponseBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}
