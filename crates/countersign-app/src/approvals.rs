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
    let book: Arc<dyn ApprovalBook> = match &config.approval.redis {
        None => Arc::new(MemoryApprovalBook::new(page_config.max_pending)),
        Some(redis) => Arc::new(
            RedisApprovalBook::connect(&redis.url, &redis.namespace, redis.command_timeout)
                .await
                .with_context(|| format!("connecting to Redis at {}", crate::redact(&redis.url)))?,
        ),
    };
    // Bound once the book is connected: a page port that opened while Redis was still being
    // reached would accept people for a gateway that may yet exit on a Redis error.
    let listener = TcpListener::bind(page_config.listen)
        .await
        .with_context(|| {
            format!(
                "binding the approval page listener on {}",
                page_config.listen
            )
        })?;
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

#[cfg(test)]
mod tests {
    use countersign_proxy::ProxyMetrics;
    use countersign_proxy::approval::out_of_band::{ApprovalRequest, ApprovalStatus, Approvers};

    use super::*;
    use crate::RawConfig;

    fn config(approvals: &str) -> Config {
        let yaml = format!(
            "upstreams:\n  - url: http://127.0.0.1:9/mcp\naudit:\n  path: off\n{approvals}"
        );
        RawConfig::from_yaml(&yaml)
            .expect("yaml")
            .validate()
            .expect("valid")
    }

    #[tokio::test]
    async fn configured_page_becomes_the_out_of_band_channel() {
        let config = config(
            "approvals:\n  listen: 127.0.0.1:0\n  public_url: https://approve.example.com/gw\n  \
             auth:\n    trusted_header:\n      user: X-Forwarded-User\n",
        );
        let mut gateway = crate::build_gateway(&config, ProxyMetrics::unregistered())
            .await
            .expect("gateway");
        assert!(
            gateway.approval.out_of_band.is_none(),
            "none before the page"
        );
        let mut registry = Registry::default();
        let page = prepare(&config, &mut gateway, &mut registry)
            .await
            .expect("prepare")
            .expect("a page");
        assert!(page.listener.local_addr().is_ok(), "its listener is bound");
        let channel = gateway
            .approval
            .out_of_band
            .clone()
            .expect("the page is the out-of-band channel");
        let ticket = channel
            .open(ApprovalRequest {
                principal: "ada".to_owned(),
                principal_groups: Vec::new(),
                client_name: None,
                session: None,
                upstream: "default".to_owned(),
                tool: "delete_note".to_owned(),
                risk: "destructive".to_owned(),
                rule: None,
                arguments: "{}".to_owned(),
                preview: None,
                approvers: Approvers::default(),
                binding: "b".to_owned(),
            })
            .await
            .expect("open");
        assert!(
            ticket
                .url
                .starts_with("https://approve.example.com/gw/approve/")
        );
        assert_eq!(
            channel.status(&ticket.id).await,
            Ok(ApprovalStatus::Pending)
        );
        let mut metrics = String::new();
        prometheus_client::encoding::text::encode(&mut metrics, &registry).expect("encode");
        assert!(
            metrics.contains("countersign_approval_requests_opened_total 1"),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn the_page_opens_its_port_only_once_its_book_is_connected() {
        // A Redis that accepts connections and never answers.
        let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let redis = format!("redis://{}", silent.local_addr().expect("address"));
        let held = tokio::spawn(async move {
            let mut connections = Vec::new();
            while let Ok((connection, _)) = silent.accept().await {
                connections.push(connection);
            }
        });
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            probe.local_addr().expect("address").port()
        };
        let page = format!(
            "approvals:\n  listen: 127.0.0.1:{port}\n  public_url: https://approve.example.com\n  \
             auth:\n    trusted_header:\n      user: X-Forwarded-User\n"
        );
        // The gateway itself without Redis, so that only the page's book meets the silent one.
        let mut gateway = crate::build_gateway(&config(&page), ProxyMetrics::unregistered())
            .await
            .expect("gateway");
        let with_redis = config(&format!("{page}redis:\n  url: {redis}\n"));
        let preparing = tokio::spawn(async move {
            let mut registry = Registry::default();
            prepare(&with_redis, &mut gateway, &mut registry)
                .await
                .map(|page| page.is_some())
        });
        let mut connected = 0;
        while !preparing.is_finished() {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                connected += 1;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        held.abort();
        let error = preparing
            .await
            .expect("task")
            .expect_err("no book, no page");
        assert!(
            format!("{error:#}").contains("connecting to Redis"),
            "{error:#}"
        );
        assert_eq!(connected, 0, "the page's port accepted a connection");
    }

    #[tokio::test]
    async fn without_approvals_there_is_no_page() {
        let config = config("");
        let mut gateway = crate::build_gateway(&config, ProxyMetrics::unregistered())
            .await
            .expect("gateway");
        let mut registry = Registry::default();
        assert!(
            prepare(&config, &mut gateway, &mut registry)
                .await
                .expect("prepare")
                .is_none()
        );
        assert!(gateway.approval.out_of_band.is_none());
    }
}
