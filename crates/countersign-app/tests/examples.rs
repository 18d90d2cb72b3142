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
