//! Policy reload: on SIGHUP and whenever the file changes. A new policy replaces the old one
//! whole; an invalid file keeps the old policy and logs why, so a bad edit never opens the gate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use countersign_proxy::state::PolicyHandle;
use tracing::{error, info};

use crate::config::load_policy;

/// How often the file is checked. Polling needs no platform watcher and works for Kubernetes
/// ConfigMap mounts, whose symlink swaps inotify watchers often miss.
const POLL: Duration = Duration::from_secs(2);

pub(crate) async fn watch_policy(path: PathBuf, handle: Arc<PolicyHandle>) {
    let mut last_seen = Fingerprint::of(&path);
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    loop {
        #[cfg(unix)]
        let signalled = async {
            match hangup.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let signalled = std::future::pending::<()>();
        let forced = tokio::select! {
            () = signalled => true,
            () = tokio::time::sleep(POLL) => false,
        };
        let now_seen = Fingerprint::of(&path);
        if !forced && now_seen == last_seen {
            continue;
        }
        last_seen = now_seen;
        match load_policy(&path) {
            Ok(policy) => {
                handle.replace(policy);
                info!(path = %path.display(), "policy reloaded");
            }
            Err(error) => {
                error!(path = %path.display(), error = %format!("{error:#}"), "policy reload failed; keeping the previous policy")
            }
        }
    }
}

/// What identifies one version of the policy file: the file the path resolves to (device and
/// inode, through every symlink) as well as its size and modification time. A Kubernetes
/// ConfigMap update swaps the `..data` symlink to a new directory, so the path resolves to a
/// new file; its mtime alone may equal the old one's (a copy that keeps times, a filesystem
/// with coarse timestamps), and then an mtime-only check would keep the old policy for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    file: (u64, u64),
}

impl Fingerprint {
    /// `None` while the path does not resolve (mid-swap, or deleted): a later success counts as
    /// a change.
    fn of(path: &Path) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            modified: meta.modified().ok(),
            len: meta.len(),
            #[cfg(unix)]
            file: {
                use std::os::unix::fs::MetadataExt as _;
                (meta.dev(), meta.ino())
            },
        })
    }
}

#[cfg(test)]
mod tests;
