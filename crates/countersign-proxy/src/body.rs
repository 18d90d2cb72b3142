//! Body types and the bounded request-body read.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};

use crate::error::ProxyError;

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

/// Reads a whole request body, refusing it once it passes `limit` bytes or once `deadline` has
/// passed since the first poll. The deadline covers the whole body, not the gap between frames,
/// so a client dripping one byte at a time cannot hold the request open.
pub async fn collect_limited<B>(
    body: B,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, ProxyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let read = async move {
        let mut body = body;
        let mut buffer = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ProxyError::BodyRead(e.into()))?;
            if let Ok(data) = frame.into_data() {
                if buffer.len() + data.len() > limit {
                    return Err(ProxyError::BodyTooLarge { limit });
                }
                buffer.extend_from_slice(&data);
            }
        }
        Ok(buffer.freeze())
    };
    tokio::time::timeout(deadline, read)
        .await
        .map_err(|_| ProxyError::BodyTimeout(deadline))?
}
