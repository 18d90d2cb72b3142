//! The environment a stdio server runs with: the gateway's own, without the gateway's secrets,
//! with the upstream's `env:` on top.

use std::ffi::{OsStr, OsString};

/// Prefix of the gateway's own variables (`COUNTERSIGN_SIGNING_KEYS` and the like): never
/// passed to a program the gateway starts.
const GATEWAY_PREFIX: &str = "COUNTERSIGN_";

/// `inherited` (the gateway's environment) minus every `COUNTERSIGN_*` variable and every name
/// in `withheld` (the variables holding the gateway's upstream credentials), then `set` on top:
/// what the configuration sets explicitly always reaches the program.
pub(super) fn child_environment(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    withheld: &[String],
    set: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = inherited
        .into_iter()
        .filter(|(name, _)| !is_withheld(name, withheld))
        .collect();
    for (name, value) in set {
        env.retain(|(existing, _)| existing.as_os_str() != OsStr::new(name));
        env.push((name.into(), value.into()));
    }
    env
}

fn is_withheld(name: &OsStr, withheld: &[String]) -> bool {
    let bytes = name.as_encoded_bytes();
    bytes.starts_with(GATEWAY_PREFIX.as_bytes()) || withheld.iter().any(|w| w.as_bytes() == bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn gateway_secrets_are_withheld_and_configured_variables_win() {
        let env = child_environment(
            vars(&[
                ("PATH", "/usr/bin"),
                ("COUNTERSIGN_SIGNING_KEYS", "k1:secret"),
                ("UPSTREAM_TOKEN", "Bearer abc"),
                ("HOME", "/root"),
            ]),
            &["UPSTREAM_TOKEN".to_owned()],
            &[
                ("HOME".to_owned(), "/srv".to_owned()),
                ("MEMORY_FILE_PATH".to_owned(), "/tmp/m".to_owned()),
            ],
        );
        assert_eq!(
            env,
            vars(&[
                ("PATH", "/usr/bin"),
                ("HOME", "/srv"),
                ("MEMORY_FILE_PATH", "/tmp/m")
            ])
        );
    }

    #[test]
    fn a_configured_gateway_prefixed_variable_is_passed_on_purpose() {
        let env = child_environment(
            vars(&[("COUNTERSIGN_SIGNING_KEYS", "k1:secret")]),
            &[],
            &[("COUNTERSIGN_DEMO".to_owned(), "1".to_owned())],
        );
        assert_eq!(env, vars(&[("COUNTERSIGN_DEMO", "1")]));
    }
}
