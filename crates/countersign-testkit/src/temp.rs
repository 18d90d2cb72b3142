//! Files a test writes for the gateway to read (policies, configs, secrets) or to write to.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file in a fresh temporary directory of its own; the directory goes when this is dropped.
#[derive(Debug)]
pub struct TempFile {
    dir: PathBuf,
    path: PathBuf,
}

impl TempFile {
    /// Writes `contents` to a file called `name` in a new directory under the system's temp dir.
    pub fn new(name: &str, contents: &str) -> Self {
        let dir = fresh_dir();
        let path = dir.join(name);
        std::fs::write(&path, contents).expect("write the temporary file");
        Self { dir, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as text, for command lines and YAML.
    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("temporary paths are UTF-8")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh temporary directory, removed with everything in it when this is dropped.
#[derive(Debug)]
pub struct TempDir {
    dir: PathBuf,
}

impl TempDir {
    pub fn new() -> Self {
        Self { dir: fresh_dir() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new, empty directory under the system's temp dir, unique to this process and call.
fn fresh_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "countersign-tests-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).expect("create the temporary directory");
    dir
}
