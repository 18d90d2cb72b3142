//! The policy watcher against a Kubernetes ConfigMap volume, laid out the way the kubelet's
//! atomic writer does it:
//!
//! ```text
//! policy.yaml -> ..data/policy.yaml
//! ..data      -> ..2026_12_01_00_00_00.1
//! ..2026_12_01_00_00_00.1/policy.yaml
//! ```
//!
//! An update writes a new timestamped directory, points a fresh `..data_tmp` symlink at it and
//! renames that over `..data` — one atomic step; the path the gateway reads never changes.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use countersign_policy::{Action, Risk};
use countersign_proxy::state::PolicyHandle;
use countersign_testkit::TempDir;

use super::{POLL, watch_policy};
use crate::config::load_policy;

const WRITES_ALLOWED: &str = "version: 1\ndefaults: { read: allow, write: allow }\n";
const WRITES_HELD: &str = "version: 1\ndefaults: { read: allow, write: confirm }\n";
const BROKEN: &str = "version: 1\ndefaults: { read: allow, write: sometimes }\n";

/// A ConfigMap volume holding one key, `policy.yaml`.
struct ConfigMapVolume {
    dir: TempDir,
    revision: u32,
}

impl ConfigMapVolume {
    fn new(policy: &str) -> Self {
        let mut volume = Self {
            dir: TempDir::new(),
            revision: 0,
        };
        volume.update(policy, None);
        symlink("..data/policy.yaml", volume.dir.path().join("policy.yaml"))
            .expect("link policy.yaml");
        volume
    }

    /// The path the gateway is configured with.
    fn policy_path(&self) -> PathBuf {
        self.dir.path().join("policy.yaml")
    }

    /// What the kubelet does on a ConfigMap change. `mtime` pins the new file's modification
    /// time, as a copy that preserves times, or a filesystem with coarse timestamps, leaves it.
    fn update(&mut self, policy: &str, mtime: Option<SystemTime>) {
        self.revision += 1;
        let root = self.dir.path();
        let data_dir = format!("..2026_12_01_00_00_00.{}", self.revision);
        std::fs::create_dir(root.join(&data_dir)).expect("create the timestamped directory");
        let file = root.join(&data_dir).join("policy.yaml");
        std::fs::write(&file, policy).expect("write the new policy");
        if let Some(mtime) = mtime {
            std::fs::File::options()
                .write(true)
                .open(&file)
                .and_then(|f| f.set_modified(mtime))
                .expect("set the new file's mtime");
        }
        let tmp = root.join("..data_tmp");
        symlink(&data_dir, &tmp).expect("link ..data_tmp");
        std::fs::rename(&tmp, root.join("..data")).expect("swap ..data");
    }

    fn current_mtime(&self) -> SystemTime {
        modified_time(&self.policy_path())
    }
}

fn modified_time(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("policy file mtime")
}

fn write_action(handle: &PolicyHandle) -> Action {
    handle.current().defaults().action_for(Risk::Write)
}

/// Starts the watcher on `volume` and lets it take its first look at the file.
async fn watch(volume: &ConfigMapVolume) -> Arc<PolicyHandle> {
    let path = volume.policy_path();
    let handle = Arc::new(PolicyHandle::new(load_policy(&path).expect("first policy")));
    tokio::spawn(watch_policy(path, handle.clone()));
    tokio::task::yield_now().await;
    handle
}

/// Two poll periods: the watcher has looked at the file at least once since the swap.
async fn let_it_poll() {
    tokio::time::sleep(POLL * 2 + Duration::from_millis(10)).await;
}

#[tokio::test(start_paused = true)]
async fn configmap_symlink_swap_reloads_the_policy() {
    let mut volume = ConfigMapVolume::new(WRITES_ALLOWED);
    let handle = watch(&volume).await;
    assert_eq!(write_action(&handle), Action::Allow);

    volume.update(WRITES_HELD, None);
    let_it_poll().await;
    assert_eq!(
        write_action(&handle),
        Action::Confirm,
        "the new policy holds writes"
    );
}

#[tokio::test(start_paused = true)]
async fn configmap_swap_to_a_file_with_the_same_mtime_reloads_the_policy() {
    let mut volume = ConfigMapVolume::new(WRITES_ALLOWED);
    let handle = watch(&volume).await;

    let same = volume.current_mtime();
    volume.update(WRITES_HELD, Some(same));
    assert_eq!(volume.current_mtime(), same, "the swap kept the mtime");
    let_it_poll().await;
    assert_eq!(
        write_action(&handle),
        Action::Confirm,
        "a new file, not a new mtime"
    );
}

#[tokio::test(start_paused = true)]
async fn configmap_swap_to_a_broken_policy_keeps_the_previous_one() {
    let mut volume = ConfigMapVolume::new(WRITES_HELD);
    let handle = watch(&volume).await;

    volume.update(BROKEN, None);
    let_it_poll().await;
    assert_eq!(
        write_action(&handle),
        Action::Confirm,
        "still the last good policy"
    );

    // And the next good one is picked up again.
    volume.update(WRITES_ALLOWED, None);
    let_it_poll().await;
    assert_eq!(write_action(&handle), Action::Allow);
}
