//! Policy reload: on SIGHUP and whenever the file changes. A new policy replaces the old one
//! whole; an invalid file keeps the old policy and logs why, so a bad edit never opens the gate.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use countersign_proxy::state::PolicyHandle;
use tracing::{error, info};

use crate::config::load_policy;

/// How often the file's modification time is checked. Polling needs no platform watcher and
/// works for Kubernetes ConfigMap mounts, whose symlink swaps inotify watchers often miss.
const POLL: Duration = Duration::from_secs(2);

pub(crate) async fn watch_policy(path: PathBuf, handle: Arc<PolicyHandle>) {
    let mut last_seen = modified(&path);
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
        let now_seen = modified(&path);
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

fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
