use prometheus_client::encoding::text::encode;

use super::*;

#[test]
fn each_decision_counts_under_its_own_labels() {
    let mut registry = Registry::default();
    let metrics = ProxyMetrics::register(&mut registry);
    for _ in 0..3 {
        metrics.record_decision("shop", "decision", "allow", None, "reads", "allowed");
    }
    metrics.record_decision(
        "shop",
        "decision",
        "confirm",
        Some("token"),
        "writes",
        "held",
    );
    metrics.record_decision("crm", "decision", "allow", None, "reads", "allowed");
    // An outcome line is no decision.
    metrics.record_decision("shop", "outcome", "allow", None, "reads", "forwarded");
    let mut scrape = String::new();
    encode(&mut scrape, &registry).expect("encodes");
    let count = |labels: &str| {
        scrape
            .lines()
            .find(|l| l.starts_with(&format!("countersign_decisions_total{{{labels}}}")))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    let shop_reads =
        r#"upstream="shop",action="allow",channel="none",rule="reads",decision="allowed""#;
    assert_eq!(count(shop_reads).as_deref(), Some("3"), "{scrape}");
    let held = r#"upstream="shop",action="confirm",channel="token",rule="writes",decision="held""#;
    assert_eq!(count(held).as_deref(), Some("1"), "{scrape}");
    let crm = r#"upstream="crm",action="allow",channel="none",rule="reads",decision="allowed""#;
    assert_eq!(count(crm).as_deref(), Some("1"), "{scrape}");
    assert!(!scrape.contains("forwarded"), "{scrape}");
}
