use std::convert::Infallible;

use http::{HeaderName, Request};
use tower::{Layer, ServiceExt, service_fn};

use super::{Caller, Identity, IdentityLayer};

fn caller_of(
    identity: Identity,
    headers: &[(&str, &str)],
) -> Option<countersign_policy::Principal> {
    let service =
        IdentityLayer::new(identity).layer(service_fn(|request: Request<()>| async move {
            Ok::<_, Infallible>(request.extensions().get::<Caller>().cloned())
        }));
    let mut request = Request::builder();
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(()).expect("request");
    let caller = futures_util::FutureExt::now_or_never(service.oneshot(request))
        .expect("identity never waits")
        .expect("infallible");
    caller.expect("every request gets a Caller").0
}

fn trusted() -> Identity {
    Identity {
        header: Some(HeaderName::from_static("x-user")),
        groups_header: Some(HeaderName::from_static("x-groups")),
    }
}

#[test]
fn without_an_identity_header_everyone_is_anonymous() {
    let principal = caller_of(Identity::default(), &[("x-user", "mallory")]).expect("principal");
    assert_eq!(principal.id, "anonymous");
}

#[test]
fn the_trusted_header_names_the_principal_and_groups() {
    let principal = caller_of(
        trusted(),
        &[("x-user", " ada "), ("x-groups", "ops, ,admins")],
    )
    .expect("principal");
    assert_eq!(principal.id, "ada");
    assert_eq!(principal.groups, ["ops", "admins"]);
}

#[test]
fn a_missing_or_blank_identity_is_no_principal() {
    assert!(caller_of(trusted(), &[]).is_none());
    assert!(caller_of(trusted(), &[("x-user", "  ")]).is_none());
}
