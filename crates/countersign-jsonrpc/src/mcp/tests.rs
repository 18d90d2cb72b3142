use proptest::prelude::*;

use super::*;
use crate::message::{Message, Payload};

fn request(body: &str) -> Request {
    match Payload::parse(body.as_bytes()) {
        Ok(Payload::Single(Message::Request(r))) => r,
        other => panic!("expected a request for {body}, got {other:?}"),
    }
}

// --- protocol versions ----------------------------------------------------------------------

#[test]
fn protocol_versions_round_trip_through_their_strings() {
    for v in ProtocolVersion::ALL {
        assert_eq!(ProtocolVersion::parse(v.as_str()), Some(v));
        assert_eq!(v.to_string(), v.as_str());
    }
}

#[test]
fn unknown_or_differently_written_versions_do_not_parse() {
    for s in [
        "",
        "2024-10-07",
        "2025-06-18 ",
        " 2025-06-18",
        "2025-6-18",
        "draft",
        "2026-07-28\0",
    ] {
        assert_eq!(ProtocolVersion::parse(s), None, "{s:?}");
    }
}

#[test]
fn protocol_versions_are_ordered_by_date() {
    let mut sorted = ProtocolVersion::ALL;
    sorted.sort();
    assert_eq!(sorted, ProtocolVersion::ALL);
    assert!(ProtocolVersion::V2025_06_18 > ProtocolVersion::V2025_03_26);
    assert_eq!(ProtocolVersion::LATEST, ProtocolVersion::V2026_07_28);
    assert_eq!(
        ProtocolVersion::ALL.iter().max(),
        Some(&ProtocolVersion::LATEST)
    );
}

#[test]
fn only_revisions_before_2025_06_18_allow_batches() {
    let allowing: Vec<_> = ProtocolVersion::ALL
        .into_iter()
        .filter(|v| v.allows_batches())
        .collect();
    assert_eq!(
        allowing,
        [ProtocolVersion::V2024_11_05, ProtocolVersion::V2025_03_26]
    );
}

#[test]
fn only_2026_07_28_is_stateless() {
    let stateless: Vec<_> = ProtocolVersion::ALL
        .into_iter()
        .filter(|v| v.is_stateless())
        .collect();
    assert_eq!(stateless, [ProtocolVersion::V2026_07_28]);
}

// --- method allowlist ---------------------------------------------------------------------------

#[test]
fn every_standard_method_is_known() {
    for m in [
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "server/discover",
        "subscriptions/listen",
        "tasks/get",
        "tasks/list",
        "tasks/result",
        "tasks/cancel",
        "sampling/createMessage",
        "elicitation/create",
        "roots/list",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/message",
        "notifications/roots/list_changed",
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/elicitation/complete",
        "notifications/tasks/status",
        "notifications/subscriptions/acknowledged",
    ] {
        assert!(is_known_method(m), "{m}");
    }
}

#[test]
fn requests_and_notifications_are_told_apart() {
    assert!(is_known_request_method("tools/call"));
    assert!(!is_known_notification_method("tools/call"));
    assert!(is_known_notification_method("notifications/progress"));
    assert!(!is_known_request_method("notifications/progress"));
    for m in KNOWN_REQUEST_METHODS {
        assert!(!KNOWN_NOTIFICATION_METHODS.contains(m));
    }
}

#[test]
fn method_variants_are_unknown() {
    for m in [
        "Tools/Call",
        "TOOLS/CALL",
        "tools/call ",
        " tools/call",
        "tools/call\0",
        "tools//call",
        "tools/call/",
        "tools/Call",
        "x-vendor/exec",
        "rpc.discover",
        "",
        "notifications/tools/list_Changed",
        "logging/setlevel",
    ] {
        assert!(!is_known_method(m), "{m:?}");
    }
}

// --- _meta ------------------------------------------------------------------------------------------

#[test]
fn protocol_version_is_read_from_params_meta() {
    let req = request(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}"#,
    );
    assert_eq!(
        request_protocol_version(&req).as_deref(),
        Some("2026-07-28")
    );
    let caps = request_client_capabilities(&req).expect("capabilities object");
    assert!(caps.get("elicitation").is_some());
    assert_eq!(caps.as_bytes(), br#"{"elicitation":{}}"#);
}

#[test]
fn protocol_version_is_absent_when_meta_is_missing_or_malformed() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"protocolVersion":"2026-07-28"}}}"#,
    ] {
        let req = request(body);
        assert_eq!(request_protocol_version(&req), None, "{body}");
        assert_eq!(request_client_capabilities(&req), None, "{body}");
    }
}

// --- Mcp-Name source ------------------------------------------------------------------------------

#[test]
fn expected_mcp_name_follows_the_method() {
    let call = request(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather","uri":"x"}}"#,
    );
    assert_eq!(expected_mcp_name(&call).as_deref(), Some("get_weather"));
    let prompt =
        request(r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"greet"}}"#);
    assert_eq!(expected_mcp_name(&prompt).as_deref(), Some("greet"));
    let read = request(
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a","name":"n"}}"#,
    );
    assert_eq!(expected_mcp_name(&read).as_deref(), Some("file:///a"));
    // The header mirrors the unescaped value.
    let escaped = request(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get\u005fweather\/x"}}"#,
    );
    assert_eq!(
        expected_mcp_name(&escaped).as_deref(),
        Some("get_weather/x")
    );
}

#[test]
fn expected_mcp_name_is_none_for_other_methods_or_bad_values() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"name":"x"}}"#,
    ] {
        assert_eq!(expected_mcp_name(&request(body)), None, "{body}");
    }
}

// --- header value codec ----------------------------------------------------------------------

#[test]
fn spec_encoding_examples_round_trip() {
    for (value, header) in [
        ("us-west1", "us-west1"),
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    ] {
        assert_eq!(encode_header_value(value), header, "{value:?}");
        assert_eq!(
            decode_header_value(header).as_deref(),
            Ok(value),
            "{header}"
        );
    }
}

#[test]
fn plain_values_keep_inner_spaces_and_encode_tabs_and_controls() {
    assert_eq!(encode_header_value("a b"), "a b");
    assert_eq!(encode_header_value("a\tb"), "=?base64?YQli?=");
    assert_eq!(encode_header_value("a\u{7f}"), "=?base64?YX8=?=");
    assert_eq!(encode_header_value("x "), "=?base64?eCA=?=");
    assert_eq!(encode_header_value(""), "");
}

#[test]
fn sentinel_markers_are_case_sensitive() {
    let upper = "=?BASE64?ZGVsZXRlX3JlcG8=?=";
    assert_eq!(decode_header_value(upper).as_deref(), Ok(upper));
    let mixed = "=?Base64?ZGVsZXRlX3JlcG8=?=";
    assert_eq!(decode_header_value(mixed).as_deref(), Ok(mixed));
    assert_eq!(
        decode_header_value("=?base64?ZGVsZXRlX3JlcG8=?=").as_deref(),
        Ok("delete_repo")
    );
}

#[test]
fn values_that_only_look_partly_like_the_sentinel_are_plain() {
    assert_eq!(
        decode_header_value("=?base64?abc").as_deref(),
        Ok("=?base64?abc")
    );
    assert_eq!(encode_header_value("=?base64?abc"), "=?base64?abc");
    assert_eq!(decode_header_value("abc?=").as_deref(), Ok("abc?="));
}

#[test]
fn overlapping_sentinel_markers_are_rejected() {
    assert_eq!(
        decode_header_value("=?base64?="),
        Err(HeaderValueError::MalformedSentinel)
    );
    assert_ne!(encode_header_value("=?base64?="), "=?base64?=");
    assert_eq!(
        decode_header_value(&encode_header_value("=?base64?=")).as_deref(),
        Ok("=?base64?=")
    );
}

#[test]
fn empty_sentinel_decodes_to_empty_string() {
    assert_eq!(decode_header_value("=?base64??=").as_deref(), Ok(""));
}

#[test]
fn non_strict_base64_is_rejected() {
    for raw in [
        "=?base64?ZGVsZXRl?X3JlcG8=?=",
        "=?base64?ZGVsZXRlX3JlcG8?=",
        "=?base64?ZGVsZXRlX3JlcG8==?=",
        "=?base64?ZGVs ZXRl?=",
        "=?base64?ZGVsZXRl\n?=",
        "=?base64?ZGVsZXRl_3JlcG8=?=",
        "=?base64?ZGVsZXRl-3JlcG8=?=",
        "=?base64?ZA=A?=",
        "=?base64?ZA==ZGVs?=",
        "=?base64?====?=",
        "=?base64?Z===?=",
        // Non-zero unused bits: `ZB==` and `ZGF=` are non-canonical spellings of `d` and `da`.
        "=?base64?ZB==?=",
        "=?base64?ZGF=?=",
    ] {
        assert_eq!(
            decode_header_value(raw),
            Err(HeaderValueError::InvalidBase64),
            "{raw:?}"
        );
    }
}

#[test]
fn base64_of_invalid_utf8_is_rejected() {
    // 0xFF 0xFE
    assert_eq!(
        decode_header_value("=?base64?//4=?="),
        Err(HeaderValueError::InvalidUtf8)
    );
    // Overlong `/`.
    assert_eq!(
        decode_header_value("=?base64?wK8=?="),
        Err(HeaderValueError::InvalidUtf8)
    );
}

#[test]
fn plain_values_with_invalid_characters_are_rejected() {
    for raw in ["a\tb", "a\rb", "a\nb", "é", "a\0", "\u{7f}"] {
        assert_eq!(
            decode_header_value(raw),
            Err(HeaderValueError::InvalidCharacter),
            "{raw:?}"
        );
    }
}

#[test]
fn header_value_errors_read_lowercase() {
    for err in [
        HeaderValueError::InvalidCharacter,
        HeaderValueError::MalformedSentinel,
        HeaderValueError::InvalidBase64,
        HeaderValueError::InvalidUtf8,
    ] {
        let text = err.to_string();
        assert!(
            text.chars().next().is_some_and(|c| c.is_lowercase()),
            "{text}"
        );
    }
}

proptest! {
    #[test]
    fn any_string_survives_encode_then_decode(value in any::<String>()) {
        let header = encode_header_value(&value);
        prop_assert!(header.bytes().all(|b| b == b' ' || b.is_ascii_graphic()));
        prop_assert!(!header.starts_with(' ') && !header.ends_with(' '));
        let decoded = decode_header_value(&header);
        prop_assert_eq!(decoded.as_deref(), Ok(value.as_str()));
    }

    #[test]
    fn base64_matches_a_reference_bit_layout(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut encoded = String::new();
        base64_encode(&bytes, &mut encoded);
        prop_assert_eq!(encoded.len(), bytes.len().div_ceil(3) * 4);
        prop_assert_eq!(base64_decode(&encoded), Some(bytes));
    }

    #[test]
    fn decoding_arbitrary_header_text_never_panics(raw in "(=\\?base64\\?)?[A-Za-z0-9+/=?_ -]{0,24}(\\?=)?") {
        if let Ok(decoded) = decode_header_value(&raw) {
            if raw.starts_with("=?base64?") && raw.ends_with("?=") {
                // Strict decoding leaves each value exactly one sentinel spelling.
                let reencoded = encode_header_value(&decoded);
                if looks_like_sentinel(&reencoded) {
                    prop_assert_eq!(reencoded.as_ref(), raw.as_str());
                }
            } else {
                prop_assert_eq!(decoded.as_ref(), raw.as_str());
            }
        }
    }
}
