//! Where each route serves clients of the 2024-11-05 HTTP+SSE transport: `legacy_sse_path`,
//! its default beside the route's own path, and the check that no two endpoints of the gateway
//! share a path.

use anyhow::ensure;
use countersign_proxy::config::{LegacyPaths, Route};

/// What an entry asks for its legacy HTTP+SSE endpoints; [`legacy_endpoints`] decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LegacySetting {
    /// Beside the route's path, if free.
    Default,
    Off,
    Path(String),
}

/// Gives each route the legacy HTTP+SSE endpoints `settings` ask for (one setting per route,
/// in order). Paths given in the configuration are claimed first and must be free; a default
/// that is taken is simply not served, so adding an upstream never fails for lack of one.
pub(super) fn legacy_endpoints(
    routes: &mut [Route],
    settings: &[LegacySetting],
) -> anyhow::Result<()> {
    let route_paths: Vec<String> = routes.iter().map(|r| r.path.clone()).collect();
    let mut claimed: Vec<String> = Vec::new();
    // Free for route `own`: no other route's path and no endpoint claimed already; the SSE
    // path may be the route's own.
    let free = |paths: &LegacyPaths, own: &str, claimed: &[String]| {
        let sse_free = paths.sse == own || !route_paths.contains(&paths.sse);
        let messages_free = !route_paths.contains(&paths.messages);
        let unclaimed = !claimed.contains(&paths.sse) && !claimed.contains(&paths.messages);
        sse_free && messages_free && unclaimed && paths.sse != paths.messages
    };
    for (i, (route, setting)) in routes.iter_mut().zip(settings).enumerate() {
        if let LegacySetting::Path(path) = setting {
            let paths = LegacyPaths::new(path);
            ensure!(
                free(&paths, &route.path, &claimed),
                "upstreams[{i}]: legacy_sse_path {} (messages at {}) is already used by another \
                 endpoint of the gateway",
                paths.sse,
                paths.messages
            );
            claimed.extend([paths.sse.clone(), paths.messages.clone()]);
            route.legacy = Some(paths);
        }
    }
    for (route, setting) in routes.iter_mut().zip(settings) {
        if *setting == LegacySetting::Default {
            let paths = LegacyPaths::new(&default_sse_path(&route.path));
            if free(&paths, &route.path, &claimed) {
                claimed.extend([paths.sse.clone(), paths.messages.clone()]);
                route.legacy = Some(paths);
            }
        }
    }
    Ok(())
}

/// `/sse` beside `path`, where a legacy client's configuration most likely points: `/mcp` →
/// `/sse`, `/a/mcp` → `/a/sse`; a path that ends in `/sse` already (a legacy server's URL,
/// swapped for the gateway's) is its own; any other path gets `/sse` appended.
fn default_sse_path(path: &str) -> String {
    if path.ends_with("/sse") {
        path.to_owned()
    } else if let Some(parent) = path.strip_suffix("/mcp") {
        format!("{parent}/sse")
    } else {
        format!("{}/sse", path.trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawUpstream;

    fn route(path: &str) -> Route {
        let raw = RawUpstream {
            url: Some(format!("http://127.0.0.1:3001{path}")),
            name: Some(path.replace('/', "_")),
            ..RawUpstream::default()
        };
        raw.validate().expect("a valid upstream").0
    }

    fn resolve(paths: &[&str], settings: &[LegacySetting]) -> anyhow::Result<Vec<Option<String>>> {
        let mut routes: Vec<Route> = paths.iter().map(|p| route(p)).collect();
        legacy_endpoints(&mut routes, settings)?;
        Ok(routes
            .into_iter()
            .map(|r| r.legacy.map(|l| format!("{} {}", l.sse, l.messages)))
            .collect())
    }

    #[test]
    fn the_default_sits_beside_the_route_path() {
        use LegacySetting::Default;
        assert_eq!(
            resolve(
                &["/mcp", "/a/mcp", "/github", "/old/sse"],
                &[Default, Default, Default, Default]
            )
            .expect("valid"),
            [
                Some("/sse /sse/messages".to_owned()),
                Some("/a/sse /a/sse/messages".to_owned()),
                Some("/github/sse /github/sse/messages".to_owned()),
                Some("/old/sse /old/sse/messages".to_owned()),
            ]
        );
    }

    #[test]
    fn a_taken_default_is_off_and_a_taken_explicit_path_is_an_error() {
        use LegacySetting::{Default, Off, Path};
        // `/sse` is another route's path: the first route's default is not served.
        assert_eq!(
            resolve(&["/mcp", "/sse"], &[Default, Default]).expect("valid"),
            [None, Some("/sse /sse/messages".to_owned())]
        );
        // An explicit path wins over a default.
        assert_eq!(
            resolve(&["/mcp", "/b/mcp"], &[Default, Path("/sse".into())]).expect("valid"),
            [None, Some("/sse /sse/messages".to_owned())]
        );
        assert_eq!(resolve(&["/mcp"], &[Off]).expect("valid"), [None]);
        let error = resolve(&["/mcp", "/sse"], &[Path("/sse".into()), Default])
            .expect_err("another route's path");
        assert!(
            error.to_string().contains("legacy_sse_path /sse"),
            "{error}"
        );
        assert!(
            resolve(&["/mcp", "/sse/messages"], &[Default, Off]).expect("valid")[0].is_none(),
            "the messages path is another route's"
        );
    }
}
