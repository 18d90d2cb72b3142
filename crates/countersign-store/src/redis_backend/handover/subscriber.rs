//! This replica's side of the pub/sub channels: the subscriber task that keeps this replica
//! subscribed to its channel (reconnecting with back-off) and handles what arrives on it,
//! handing an answer over to a waiter on another replica, and the messages replicas send each
//! other.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ::redis::Client;
use futures_util::StreamExt as _;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::super::endpoint::connection_timeout;
use super::super::store_error;
use super::{Inner, is_replica_id, lock_recovering};
use crate::StoreError;

/// How often the subscriber pings its connection, to notice one that died without a word.
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Reconnect back-off bounds for the subscriber.
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Forgets a published delivery's acknowledgement slot however the delivery ends.
struct PendingAck<'a> {
    inner: &'a Inner,
    delivery: u64,
}

impl Drop for PendingAck<'_> {
    fn drop(&mut self) {
        lock_recovering(&self.inner.acks).remove(&self.delivery);
    }
}

impl Inner {
    pub(super) async fn hand_over_remotely(
        &self,
        replica: &str,
        key: &str,
        waiter: u64,
        answer: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let delivery = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, acknowledged) = oneshot::channel();
        lock_recovering(&self.acks).insert(delivery, sender);
        let _pending = PendingAck {
            inner: self,
            delivery,
        };
        let message = Message::Answer {
            key: key.to_owned(),
            waiter,
            delivery,
            reply_to: self.replica.clone(),
            answer,
        };
        let mut publish = ::redis::cmd("PUBLISH");
        publish.arg(self.channel(replica)).arg(message.encode());
        let receivers: i64 = self.commands.query(&publish, self.command_timeout).await?;
        // Standalone, nobody on the channel means the waiter's replica is gone and its waiter
        // with it. In a Cluster the count only covers the node that took the PUBLISH.
        if receivers == 0 && !self.endpoint.is_cluster() {
            return Ok(false);
        }
        match tokio::time::timeout(self.command_timeout, acknowledged).await {
            Ok(Ok(taken)) => Ok(taken),
            Ok(Err(_)) => Err(StoreError::Unavailable(
                "answer hand-over acknowledgement lost".to_owned(),
            )),
            // The waiter may or may not have it: not knowing is an error, not `false`.
            Err(_elapsed) => Err(StoreError::Timeout),
        }
    }

    /// Keeps this replica subscribed to its channel for as long as the handover lives.
    pub(super) async fn subscribe_forever(self: Arc<Self>, clients: Vec<Client>) {
        let channel = self.channel(&self.replica);
        let mut backoff = MIN_BACKOFF;
        for client in clients.iter().cycle() {
            let error = self.listen(client, &channel, &mut backoff).await;
            let was_subscribed = self.subscribed.send_replace(false);
            if was_subscribed {
                warn!(redis = %self.endpoint, %error, "answer hand-over subscription lost; reconnecting");
            } else {
                debug!(redis = %self.endpoint, %error, "answer hand-over subscriber cannot connect");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Subscribes through `client` and handles messages until the connection fails.
    async fn listen(
        self: &Arc<Self>,
        client: &Client,
        channel: &str,
        backoff: &mut Duration,
    ) -> StoreError {
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
        self.subscribed.send_replace(true);
        info!(redis = %self.endpoint, "answer hand-over subscribed");
        let start = tokio::time::Instant::now() + HEALTH_CHECK_INTERVAL;
        let mut health = tokio::time::interval_at(start, HEALTH_CHECK_INTERVAL);
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(message) => self.on_message(message.get_payload_bytes()),
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

    fn on_message(self: &Arc<Self>, payload: &[u8]) {
        match Message::decode(payload) {
            Some(Message::Answer {
                key,
                waiter,
                delivery,
                reply_to,
                answer,
            }) => {
                let taken = self.hand_over_locally(&key, waiter, answer);
                let inner = Arc::clone(self);
                // Off the subscriber's loop, which must keep reading.
                self.runtime.spawn(async move {
                    let mut publish = ::redis::cmd("PUBLISH");
                    publish
                        .arg(inner.channel(&reply_to))
                        .arg(Message::Ack { delivery, taken }.encode());
                    if let Err(error) = inner
                        .commands
                        .query::<i64>(&publish, inner.command_timeout)
                        .await
                    {
                        debug!(%error, "could not acknowledge a handed-over answer");
                    }
                });
            }
            Some(Message::Ack { delivery, taken }) => {
                if let Some(sender) = lock_recovering(&self.acks).remove(&delivery) {
                    let _ = sender.send(taken);
                }
            }
            None => debug!("ignored a malformed answer hand-over message"),
        }
    }
}

/// What replicas send each other on their channels. Binary, length-prefixed, so keys and
/// answers are carried byte-exact.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Message {
    /// `A` key-len:u32 key waiter:u64 delivery:u64 reply-to(32 bytes) answer…
    Answer {
        key: String,
        waiter: u64,
        delivery: u64,
        reply_to: String,
        answer: Vec<u8>,
    },
    /// `K` delivery:u64 taken:u8
    Ack { delivery: u64, taken: bool },
}

impl Message {
    pub(super) fn encode(&self) -> Vec<u8> {
        match self {
            Self::Answer {
                key,
                waiter,
                delivery,
                reply_to,
                answer,
            } => {
                let key_len = u32::try_from(key.len()).unwrap_or(u32::MAX);
                let mut out = Vec::with_capacity(1 + 4 + key.len() + 16 + 32 + answer.len());
                out.push(b'A');
                out.extend_from_slice(&key_len.to_be_bytes());
                out.extend_from_slice(key.as_bytes());
                out.extend_from_slice(&waiter.to_be_bytes());
                out.extend_from_slice(&delivery.to_be_bytes());
                out.extend_from_slice(reply_to.as_bytes());
                out.extend_from_slice(answer);
                out
            }
            Self::Ack { delivery, taken } => {
                let mut out = Vec::with_capacity(10);
                out.push(b'K');
                out.extend_from_slice(&delivery.to_be_bytes());
                out.push(u8::from(*taken));
                out
            }
        }
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Self> {
        let (&tag, rest) = bytes.split_first()?;
        match tag {
            b'A' => {
                let (key_len, rest) = split_u32(rest)?;
                let (key, rest) = rest.split_at_checked(usize::try_from(key_len).ok()?)?;
                let (waiter, rest) = split_u64(rest)?;
                let (delivery, rest) = split_u64(rest)?;
                let (reply_to, answer) = rest.split_at_checked(32)?;
                let reply_to = std::str::from_utf8(reply_to).ok()?;
                is_replica_id(reply_to).then_some(())?;
                Some(Self::Answer {
                    key: String::from_utf8(key.to_vec()).ok()?,
                    waiter,
                    delivery,
                    reply_to: reply_to.to_owned(),
                    answer: answer.to_vec(),
                })
            }
            b'K' => {
                let (delivery, rest) = split_u64(rest)?;
                match rest {
                    [0] => Some(Self::Ack {
                        delivery,
                        taken: false,
                    }),
                    [1] => Some(Self::Ack {
                        delivery,
                        taken: true,
                    }),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

fn split_u32(bytes: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*head), rest))
}

fn split_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head), rest))
}
