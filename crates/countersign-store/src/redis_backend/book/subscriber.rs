//! Keeps one replica subscribed to the decisions channel and relays each announced key to the
//! replica's local waiters.

use std::sync::Arc;
use std::time::Duration;

use ::redis::Client;
use futures_util::StreamExt as _;
use tracing::{debug, warn};

use super::super::endpoint::connection_timeout;
use super::super::store_error;
use super::Inner;
use crate::StoreError;

const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl Inner {
    pub(super) async fn subscribe_forever(self: Arc<Self>, clients: Vec<Client>) {
        let channel = self.channel();
        let mut backoff = MIN_BACKOFF;
        for client in clients.iter().cycle() {
            let error = self.listen(client, &channel, &mut backoff).await;
            debug!(redis = %self.endpoint, %error, "approval subscription lost; reconnecting");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn listen(&self, client: &Client, channel: &str, backoff: &mut Duration) -> StoreError {
        let limit = connection_timeout(self.command_timeout);
        let pubsub = match tokio::time::timeout(limit, client.get_async_pubsub()).await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(error)) => return store_error(error),
            Err(_elapsed) => return StoreError::Timeout,
        };
        let (mut sink, mut messages) = pubsub.split();
        match tokio::time::timeout(limit, sink.subscribe(channel)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return store_error(error),
            Err(_elapsed) => return StoreError::Timeout,
        }
        *backoff = MIN_BACKOFF;
        // Announcements made while we were not subscribed are lost: have every waiter look.
        let _ = self.decided.send(Arc::from(""));
        let start = tokio::time::Instant::now() + HEALTH_CHECK_INTERVAL;
        let mut health = tokio::time::interval_at(start, HEALTH_CHECK_INTERVAL);
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(message) => match std::str::from_utf8(message.get_payload_bytes()) {
                        Ok(key) if !key.is_empty() => { let _ = self.decided.send(Arc::from(key)); }
                        _ => warn!("ignoring a malformed approval announcement"),
                    },
                    None => return StoreError::Unavailable("redis: subscriber connection closed".to_owned()),
                },
                _ = health.tick() => {
                    match tokio::time::timeout(limit, sink.ping::<::redis::Value>()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => return store_error(error),
                        Err(_elapsed) => return StoreError::Timeout,
                    }
                }
            }
        }
    }
}
