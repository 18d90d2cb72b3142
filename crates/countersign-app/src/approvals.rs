//! The approval page in the running gateway: its book (in Redis when `redis:` is configured,
//! so any replica's page can decide a call held on another; else in memory), the page itself
//! as the approval layer's out-of-band channel, and its listener.

use std::sync::Arc;

use anyhow::Context as _;
use countersign_approvals::{ApprovalPage, PageMetrics};
use countersign_proxy::Gateway;
use countersign_store::{ApprovalBook, MemoryApprovalBook, RedisApprovalBook};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::Config;

/// The page's listener, bound, and the page it serves.
pub(crate) struct PageListener {
    pub listener: TcpListener,
    pub page: Arc<ApprovalPage>,
}

/// Builds the page of `config`, makes it `gateway`'s out-of-band channel and binds its
/// listener; `None` without `approvals:`.
pub(crate) async fn prepare(
    config: &Config,
    gateway: &mut Gateway,
    registry: &mut Registry,
) -> anyhow::Result<Option<PageListener>> {
    let Some(approvals) = &config.approvals else {
        return Ok(None);
    };
    let page_config = approvals.page.clone();
    if approvals.link_key_generated {
        warn!(
            "no approval link key configured (COUNTERSIGN_APPROVAL_LINK_KEY or \
             approvals.link_key_file): using a random key, so approval links stop working on \
             restart and are refused by every other replica"
        );
    }
    let listener = TcpListener::bind(page_config.listen)
        .await
        .with_context(|| {
            format!(
                "binding the approval page listener on {}",
                page_config.listen
            )
        })?;
    let book: Arc<dyn ApprovalBook> = match &config.approval.redis {
        None => Arc::new(MemoryApprovalBook::new(page_config.max_pending)),
        Some(redis) => Arc::new(
            RedisApprovalBook::connect(&redis.url, &redis.namespace, redis.command_timeout)
                .await
                .with_context(|| format!("connecting to Redis at {}", crate::redact(&redis.url)))?,
        ),
    };
    let page = Arc::new(ApprovalPage::new(
        page_config,
        book,
        gateway.approval.clock.clone(),
        gateway.approval.audit.clone(),
        PageMetrics::register(registry),
    ));
    gateway.approval.out_of_band = Some(page.clone());
    info!(
        addr = ?listener.local_addr().ok(),
        public_url = %page.config().public_url,
        "approval page is listening"
    );
    Ok(Some(PageListener { listener, page }))
}
