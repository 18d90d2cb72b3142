//! Percentiles, resident memory, and a sampler of its peak.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// VmRSS of `pid` in KiB (0 when unreadable).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Samples the RSS of `pid` every 100 ms on a thread of its own; `peak()` is the largest seen.
pub struct PeakRss {
    peak: Arc<AtomicU64>,
}

impl PeakRss {
    pub fn start(pid: Option<u32>) -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        if let Some(pid) = pid {
            let seen = peak.clone();
            std::thread::spawn(move || {
                loop {
                    seen.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        Self { peak }
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

/// FNV-1a, to compare bodies across targets without keeping them.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
