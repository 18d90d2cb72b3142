//! Every configuration example shipped in the repository loads and validates.

use countersign_app::RawConfig;

#[test]
fn every_example_config_validates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/ exists") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let config = RawConfig::load(&path).and_then(RawConfig::validate);
            assert!(
                config.is_ok(),
                "{}: {:#}",
                path.display(),
                config.expect_err("checked")
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no example configs found in {}", dir.display());
}

/// The gateway configurations and policies the kustomize bases mount, and the chart's default
/// inline policy. (scripts/deploy-check.sh also runs `countersign check` on every rendered
/// chart configuration.)
#[test]
fn every_deploy_config_and_policy_validates() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kustomize = root.join("deploy/kustomize");
    let (mut configs, mut policies) = (0, 0);
    for entry in std::fs::read_dir(&kustomize).expect("deploy/kustomize exists") {
        let dir = entry.expect("dir entry").path();
        for file in std::fs::read_dir(&dir).expect("a kustomization directory") {
            let path = file.expect("dir entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.ends_with("gateway.yaml") {
                // The mounted paths (/etc/countersign/…) exist only in the pod: the policy
                // beside the file stands in for its ConfigMap, a random key for the Secret.
                let config = RawConfig::load(&path)
                    .map(|mut raw| {
                        raw.policy = Some(dir.join("policy.yaml"));
                        raw.signing_keys_file = None;
                        raw
                    })
                    .and_then(RawConfig::validate);
                assert!(
                    config.is_ok(),
                    "{}: {:#}",
                    path.display(),
                    config.expect_err("checked")
                );
                configs += 1;
            } else if name == "policy.yaml" {
                let text = std::fs::read_to_string(&path).expect("read the policy");
                let policy = countersign_policy::Policy::from_yaml(&text);
                assert!(
                    policy.is_ok(),
                    "{}: {}",
                    path.display(),
                    policy.expect_err("checked")
                );
                policies += 1;
            }
        }
    }
    assert!(
        configs >= 2 && policies >= 2,
        "found {configs} configs, {policies} policies"
    );

    let values = root.join("helm/countersign/values.yaml");
    let values: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&values).expect("values.yaml"))
            .expect("values.yaml is YAML");
    let inline = values["policy"]["inline"].as_str().expect("policy.inline");
    countersign_policy::Policy::from_yaml(inline).expect("the chart's default policy");
}
