//! A command connection per tokio runtime, for the commands a request waits on (a redemption's
//! `SET NX`, a rate-limit take).
//!
//! The gateway runs each client connection on one of its single-threaded connection workers
//! (`countersign_proxy::workers`). A multiplexed Redis connection is driven by a task on the
//! runtime that opened it, so with one shared connection every command sent from another worker
//! crossed threads twice: the request woke the driver's thread to send it, and the driver woke
//! the request's thread with the answer. Each runtime that sends commands here gets a connection
//! of its own, opened by its first command and driven on its own thread. Which connection a
//! command goes over changes nothing about what it does: `SET NX` is decided by Redis alone.
//!
//! A Cluster connection stays shared (it opens one connection per node already).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ::redis::Client;
use tokio::runtime::{Handle, Id};

use super::Commands;
use super::endpoint::manager;

/// The shared connection, and the other runtimes' own.
pub(super) struct PerRuntime {
    /// Opened by `connect` and driven by the runtime that connected (the gateway's worker 0):
    /// its own commands, readiness checks, and every runtime's when no other can be opened.
    shared: Commands,
    /// The runtime driving `shared`.
    home: Option<Id>,
    /// The standalone client new connections are opened from; `None` for a Cluster.
    client: Option<Client>,
    command_timeout: Duration,
    /// One entry per runtime that has sent a command: the gateway's workers, so a handful.
    others: Mutex<HashMap<Id, Commands>>,
}

impl PerRuntime {
    pub(super) fn new(shared: Commands, client: Option<Client>, command_timeout: Duration) -> Self {
        Self {
            shared,
            home: Handle::try_current().ok().map(|handle| handle.id()),
            client,
            command_timeout,
            others: Mutex::default(),
        }
    }

    /// The connection opened by `connect`.
    pub(super) fn shared(&self) -> &Commands {
        &self.shared
    }

    /// The calling runtime's connection, made on its first use there.
    pub(super) fn current(&self) -> Commands {
        let (Some(client), Ok(handle)) = (&self.client, Handle::try_current()) else {
            return self.shared.clone();
        };
        let id = handle.id();
        if Some(id) == self.home {
            return self.shared.clone();
        }
        let mut others = self.others.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(commands) = others.get(&id) {
            return commands.clone();
        }
        match manager(client, self.command_timeout) {
            Ok(manager) => {
                let commands = Commands::Standalone(manager);
                others.insert(id, commands.clone());
                commands
            }
            // Nothing to connect with that the shared connection does not have: use it.
            Err(_) => self.shared.clone(),
        }
    }

    /// How many runtimes have a connection of their own.
    #[cfg(test)]
    pub(super) fn others(&self) -> usize {
        self.others
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
