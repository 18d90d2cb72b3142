use base64::Engine as _;
use hmac::Mac as _;
use proptest::prelude::*;

use super::*;

/// 32 bytes 0x00..0x1f.
const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
/// 32 bytes 0xff.
const KEY_B: &str = "__________________________________________8";
const NOW: u64 = 1_700_000_100;

/// Produced independently with Python's `hmac` for the claims of [`claims`] and key [`KEY_A`].
const GOLDEN_TOKEN: &str = "mcp_cf_eyJhbGciOiJIUzI1NiIsInR5cCI6Ik1DUCtDT05GSVJNIiwia2lkIjoiazEifQ.eyJ2IjoxLCJpc3MiOiJndy10ZXN0Iiwic3ViIjoiYWxpY2UiLCJzaWQiOiJzLTEiLCJ1cCI6InN0b3JlIiwibSI6InRvb2xzL2NhbGwiLCJ0b29sIjoiYWRqdXN0X3N0b2NrIiwiYWgiOiJSQk52bzFXelo0b1JScTBXOS1oa25wVDdUOElmNTM2REVNQmc5aHlxXzRvIiwidGRoIjoidGRoLXZhbHVlIiwicnVsZSI6ImRlZmF1bHQiLCJjaCI6InRva2VuIiwiaWF0IjoxNzAwMDAwMDAwLCJleHAiOjE3MDAwMDAzMDAsImp0aSI6IkFBQUFBQUFBQUFBQUFBQUFBQUFBQUEifQ.Vxiwhcl1F3MpbGVoMIkj70y8IMrpVnhZ7ktp8KzNlek";

fn keyring(spec: &str) -> Keyring {
    Keyring::parse(spec).expect("valid keyring")
}

fn k1() -> Keyring {
    keyring(&format!("k1:{KEY_A}"))
}

/// Claims of a plain call, as the golden token carries them; the claims reader's tests start
/// from them too.
pub(super) fn claims() -> Claims {
    Claims {
        v: 1,
        iss: "gw-test".into(),
        sub: "alice".into(),
        sid: Some("s-1".into()),
        up: "store".into(),
        m: "tools/call".into(),
        tool: "adjust_stock".into(),
        ah: "RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o".into(),
        ph: None,
        tdh: "tdh-value".into(),
        rule: "default".into(),
        ch: "token".into(),
        iat: 1_700_000_000,
        exp: 1_700_000_300,
        jti: "AAAAAAAAAAAAAAAAAAAAAA".into(),
        st: None,
        aid: None,
    }
}

fn expectation(c: &Claims) -> Expectation<'_> {
    Expectation {
        sub: &c.sub,
        sid: c.sid.as_deref(),
        up: &c.up,
        m: &c.m,
        tool: &c.tool,
        ah: &c.ah,
        ph: c.ph.as_deref(),
        tdh: &c.tdh,
    }
}

fn rules() -> VerifyRules {
    VerifyRules::default()
}

fn b64(bytes: &[u8]) -> String {
    B64URL.encode(bytes)
}

/// Signs arbitrary header and claims JSON with `secret` exactly as [`mint`] does, so tests can
/// craft authentic tokens that carry content `mint` would never produce.
fn sign_raw(secret_b64: &str, header_json: &str, claims_json: &str) -> String {
    let secret = B64URL.decode(secret_b64).expect("test key");
    let signed = format!(
        "{}.{}",
        b64(header_json.as_bytes()),
        b64(claims_json.as_bytes())
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&secret).expect("any length");
    mac.update(b"countersign-v1\0");
    mac.update(signed.as_bytes());
    format!(
        "{TOKEN_PREFIX}{signed}.{}",
        b64(&mac.finalize().into_bytes())
    )
}

const HEADER_K1: &str = r#"{"alg":"HS256","typ":"MCP+CONFIRM","kid":"k1"}"#;

fn claims_json(c: &Claims) -> String {
    serde_json::to_string(c).expect("serializes")
}

// ---- format ------------------------------------------------------------------------------

#[test]
fn mint_matches_independently_computed_golden_token() {
    assert_eq!(mint(&k1(), &claims()), GOLDEN_TOKEN);
}

#[test]
fn golden_token_verifies_to_its_claims() {
    assert_eq!(verify(&k1(), GOLDEN_TOKEN, NOW, &rules()), Ok(claims()));
}

#[test]
fn header_is_exactly_the_documented_json() {
    let token = mint(&k1(), &claims());
    let header_b64 = token[TOKEN_PREFIX.len()..]
        .split('.')
        .next()
        .expect("header");
    assert_eq!(
        B64URL.decode(header_b64).expect("b64"),
        HEADER_K1.as_bytes()
    );
}

#[test]
fn absent_sid_and_st_are_left_out_and_present_ones_round_trip() {
    let mut c = claims();
    c.sid = None;
    assert!(!claims_json(&c).contains("\"sid\""));
    assert!(!claims_json(&c).contains("\"st\""));
    assert_eq!(
        verify(&k1(), &mint(&k1(), &c), NOW, &rules()),
        Ok(c.clone())
    );

    c.st = Some("upstream-state\u{0}with \"quotes\"".into());
    assert!(claims_json(&c).ends_with(r#""st":"upstream-state\u0000with \"quotes\""}"#));
    assert_eq!(verify(&k1(), &mint(&k1(), &c), NOW, &rules()), Ok(c));
}

#[test]
fn mac_covers_ascii_parts_with_domain_prefix() {
    let token = mint(&k1(), &claims());
    let (signed, tag) = token[TOKEN_PREFIX.len()..]
        .rsplit_once('.')
        .expect("three parts");
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&B64URL.decode(KEY_A).expect("key"))
        .expect("any length");
    mac.update(b"countersign-v1\0");
    mac.update(signed.as_bytes());
    assert_eq!(b64(&mac.finalize().into_bytes()), tag);
}

// ---- verification failures ---------------------------------------------------------------

#[test]
fn token_signed_with_another_key_under_the_same_kid_is_bad_signature() {
    let forged = sign_raw(KEY_B, HEADER_K1, &claims_json(&claims()));
    assert_eq!(
        verify(&k1(), &forged, NOW, &rules()),
        Err(TokenRejection::BadSignature)
    );
}

#[test]
fn every_claim_changed_and_re_signed_with_another_key_is_bad_signature() {
    let original = claims();
    let mut variants: Vec<Claims> = Vec::new();
    let mut push = |f: &dyn Fn(&mut Claims)| {
        let mut c = original.clone();
        f(&mut c);
        assert_ne!(c, original);
        variants.push(c);
    };
    push(&|c| c.v = 2);
    push(&|c| c.iss = "gw-prod".into());
    push(&|c| c.sub = "mallory".into());
    push(&|c| c.sid = None);
    push(&|c| c.sid = Some("s-2".into()));
    push(&|c| c.up = "billing".into());
    push(&|c| c.m = "resources/read".into());
    push(&|c| c.tool = "delete_stock".into());
    push(&|c| c.ah = "AAAA".into());
    push(&|c| c.tdh = "other".into());
    push(&|c| c.rule = "none".into());
    push(&|c| c.ch = "elicitation".into());
    push(&|c| c.iat -= 1);
    push(&|c| c.exp += 1);
    push(&|c| c.jti = "BBBBBBBBBBBBBBBBBBBBBB".into());
    push(&|c| c.st = Some("x".into()));
    for c in variants {
        let forged = sign_raw(KEY_B, HEADER_K1, &claims_json(&c));
        assert_eq!(
            verify(&k1(), &forged, NOW, &rules()),
            Err(TokenRejection::BadSignature),
            "{c:?}"
        );
        // Swapping the changed claims into a genuine token breaks the MAC too.
        let genuine = mint(&k1(), &claims());
        let mut parts: Vec<&str> = genuine.split('.').collect();
        let swapped = b64(claims_json(&c).as_bytes());
        parts[1] = &swapped;
        assert_eq!(
            verify(&k1(), &parts.join("."), NOW, &rules()),
            Err(TokenRejection::BadSignature)
        );
    }
}

#[test]
fn unknown_or_traversal_kid_is_unknown_key() {
    for kid in ["k9", "../../etc/passwd", "", "K1"] {
        let header = format!(r#"{{"alg":"HS256","typ":"MCP+CONFIRM","kid":{kid:?}}}"#);
        let token = sign_raw(KEY_A, &header, &claims_json(&claims()));
        assert_eq!(
            verify(&k1(), &token, NOW, &rules()),
            Err(TokenRejection::UnknownKey),
            "{kid}"
        );
    }
}

#[test]
fn other_algorithms_types_and_header_spellings_are_malformed() {
    for header in [
        r#"{"alg":"none","typ":"MCP+CONFIRM","kid":"k1"}"#,
        r#"{"alg":"HS512","typ":"MCP+CONFIRM","kid":"k1"}"#,
        r#"{"alg":"hs256","typ":"MCP+CONFIRM","kid":"k1"}"#,
        r#"{"alg":"HS256","typ":"JWT","kid":"k1"}"#,
        r#"{"alg":"HS256","kid":"k1"}"#,
        r#"{"alg":"HS256","typ":"MCP+CONFIRM","kid":"k1","crit":["b64"]}"#,
        r#"{"alg":"HS256","typ":"MCP+CONFIRM","kid":"k1","kid":"k1"}"#,
        r#"["HS256","MCP+CONFIRM","k1"]"#,
        r#"{"typ":"MCP+CONFIRM","alg":"HS256","kid":"k1"}"#,
        r#"{"alg":"HS256","typ":"MCP+CONFIRM","kid":"k\u0031"}"#,
        r#"{"alg":"HS256", "typ":"MCP+CONFIRM","kid":"k1"}"#,
        r#"{"alg":"none","typ":"MCP+CONFIRM","kid":"k9"}"#,
        r#" {"alg":"HS256","typ":"MCP+CONFIRM","kid":"k1"}"#,
        "not json",
    ] {
        let token = sign_raw(KEY_A, header, &claims_json(&claims()));
        assert_eq!(
            verify(&k1(), &token, NOW, &rules()),
            Err(TokenRejection::Malformed),
            "{header}"
        );
    }
}

#[test]
fn authentic_but_unexpected_claims_json_is_malformed() {
    let good = claims_json(&claims());
    for claims_text in [
        good.replacen("\"v\":1", "\"v\":2", 1),
        good.replacen("\"v\":1", "\"v\":1.0", 1),
        good.replacen("\"iat\":1700000000", "\"iat\":1.7e9", 1),
        good.replacen("\"iat\":1700000000", "\"iat\":-1", 1),
        good.replacen('}', r#","admin":true}"#, 1),
        good.replacen("\"sub\":\"alice\"", "\"sub\":\"alice\",\"sub\":\"bob\"", 1),
        good.replacen("\"jti\":\"AAAAAAAAAAAAAAAAAAAAAA\"", "\"jti\":null", 1),
        good.replacen(",\"jti\":\"AAAAAAAAAAAAAAAAAAAAAA\"", "", 1),
        format!("{good}{good}"),
        format!(" {good}"),
        "[]".to_owned(),
        r#"[1,"gw-test","alice","s-1","store","tools/call","adjust_stock","a","t","r","c",1700000000,1700000300,"j"]"#.to_owned(),
    ] {
        assert_ne!(claims_text, good);
        let token = sign_raw(KEY_A, HEADER_K1, &claims_text);
        assert_eq!(
            verify(&k1(), &token, NOW, &rules()),
            Err(TokenRejection::Malformed),
            "{claims_text}"
        );
    }
}

#[test]
fn wrong_prefix_and_part_counts_are_malformed() {
    let token = mint(&k1(), &claims());
    let body = &token[TOKEN_PREFIX.len()..];
    let (header, rest) = body.split_once('.').expect("parts");
    let (claims_part, tag) = rest.split_once('.').expect("parts");
    for bad in [
        body.to_owned(),
        format!("MCP_CF_{body}"),
        format!(" {token}"),
        format!("{token} "),
        format!("{token}\n"),
        format!("mcp_cf_{header}.{claims_part}"),
        format!("mcp_cf_{header}.{claims_part}.{tag}.{tag}"),
        format!("mcp_cf_{header}..{claims_part}.{tag}"),
        format!("mcp_cf_{header}.{claims_part}."),
        format!("mcp_cf_.{claims_part}.{tag}"),
        format!("mcp_cf_{header}.{tag}"),
        String::new(),
        "mcp_cf_".to_owned(),
        "mcp_cf_..".to_owned(),
    ] {
        assert_eq!(
            verify(&k1(), &bad, NOW, &rules()),
            Err(TokenRejection::Malformed),
            "{bad}"
        );
    }
}

#[test]
fn padded_and_standard_alphabet_reencodings_are_malformed() {
    // Claims chosen so the claims part needs padding and contains both '-' and '_': "~" and "?"
    // at every alignment give the characters 62 and 63.
    let mut c = claims();
    c.iss = "~~~???".into();
    while claims_json(&c).len().is_multiple_of(3) {
        c.iss.push('a');
    }
    let token = mint(&k1(), &c);
    assert_eq!(verify(&k1(), &token, NOW, &rules()), Ok(c.clone()));
    let parts: Vec<&str> = token.split('.').collect();
    assert!(
        parts[1].contains('-') && parts[1].contains('_'),
        "{}",
        parts[1]
    );
    assert_ne!(parts[1].len() % 4, 0);

    let standard = parts[1].replace('-', "+").replace('_', "/");
    let padded = format!("{}{}", parts[1], "=".repeat(4 - parts[1].len() % 4));
    for claims_part in [standard.as_str(), padded.as_str()] {
        let reencoded = format!("{}.{claims_part}.{}", parts[0], parts[2]);
        assert_eq!(
            verify(&k1(), &reencoded, NOW, &rules()),
            Err(TokenRejection::Malformed),
            "{claims_part}"
        );
    }
    let padded_tag = format!("{token}=");
    assert_eq!(
        verify(&k1(), &padded_tag, NOW, &rules()),
        Err(TokenRejection::Malformed)
    );
}

#[test]
fn non_canonical_trailing_bits_in_tag_are_malformed_not_a_second_encoding() {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let token = mint(&k1(), &claims());
    let last = *token.as_bytes().last().expect("non-empty");
    let index = ALPHABET.iter().position(|&b| b == last).expect("alphabet");
    // 32 bytes end in a character carrying 4 data bits and 2 zero bits; setting one of the
    // zero bits leaves the decoded tag unchanged for a lenient decoder.
    assert_eq!(index % 4, 0);
    let mut tampered = token.clone().into_bytes();
    *tampered.last_mut().expect("non-empty") = ALPHABET[index + 1];
    let tampered = String::from_utf8(tampered).expect("ascii");
    assert_eq!(
        verify(&k1(), &tampered, NOW, &rules()),
        Err(TokenRejection::Malformed)
    );
}

#[test]
fn every_truncation_is_refused() {
    let token = mint(&k1(), &claims());
    for len in 0..token.len() {
        let rejection = verify(&k1(), &token[..len], NOW, &rules());
        assert!(
            matches!(
                rejection,
                Err(TokenRejection::Malformed | TokenRejection::BadSignature)
            ),
            "{len}: {rejection:?}"
        );
    }
}

#[test]
fn oversized_token_is_refused_before_decoding() {
    let mut c = claims();
    c.st = Some("x".repeat(MAX_TOKEN_LEN));
    let token = mint(&k1(), &c);
    assert!(token.len() > MAX_TOKEN_LEN);
    assert_eq!(
        verify(&k1(), &token, NOW, &rules()),
        Err(TokenRejection::Malformed)
    );
}

// ---- time --------------------------------------------------------------------------------

#[test]
fn expiry_honours_leeway_to_the_second() {
    let token = mint(&k1(), &claims());
    let exp = claims().exp;
    assert!(verify(&k1(), &token, exp + DEFAULT_LEEWAY_SECS, &rules()).is_ok());
    assert_eq!(
        verify(&k1(), &token, exp + DEFAULT_LEEWAY_SECS + 1, &rules()),
        Err(TokenRejection::Expired)
    );
    let strict = VerifyRules {
        leeway_secs: 0,
        ..rules()
    };
    assert!(verify(&k1(), &token, exp, &strict).is_ok());
    assert_eq!(
        verify(&k1(), &token, exp + 1, &strict),
        Err(TokenRejection::Expired)
    );
}

#[test]
fn lifetime_above_the_cap_is_refused_whatever_the_token_says() {
    let mut c = claims();
    c.exp = c.iat + DEFAULT_MAX_TTL_SECS;
    assert!(verify(&k1(), &mint(&k1(), &c), NOW, &rules()).is_ok());
    c.exp += 1;
    assert_eq!(
        verify(&k1(), &mint(&k1(), &c), NOW, &rules()),
        Err(TokenRejection::Malformed)
    );
    c.exp = u64::MAX;
    assert_eq!(
        verify(&k1(), &mint(&k1(), &c), NOW, &rules()),
        Err(TokenRejection::Malformed)
    );
}

#[test]
fn expiry_before_issue_is_malformed() {
    let mut c = claims();
    c.exp = c.iat - 1;
    assert_eq!(
        verify(&k1(), &mint(&k1(), &c), c.iat, &rules()),
        Err(TokenRejection::Malformed)
    );
}

#[test]
fn issue_time_in_the_future_beyond_leeway_is_refused() {
    let c = claims();
    let token = mint(&k1(), &c);
    assert!(verify(&k1(), &token, c.iat - DEFAULT_LEEWAY_SECS, &rules()).is_ok());
    assert_eq!(
        verify(&k1(), &token, c.iat - DEFAULT_LEEWAY_SECS - 1, &rules()),
        Err(TokenRejection::Malformed)
    );
}

#[test]
fn clock_arithmetic_saturates_instead_of_wrapping() {
    let mut c = claims();
    c.iat = u64::MAX - 10;
    c.exp = u64::MAX;
    assert!(verify(&k1(), &mint(&k1(), &c), u64::MAX, &rules()).is_ok());
    assert_eq!(
        verify(&k1(), &mint(&k1(), &c), 0, &rules()),
        Err(TokenRejection::Malformed)
    );
}

// ---- rotation ----------------------------------------------------------------------------

#[test]
fn rotated_keyring_signs_with_first_and_verifies_with_all() {
    let old = k1();
    let rotated = keyring(&format!("k2:{KEY_B},k1:{KEY_A}"));
    assert_eq!(rotated.signing_kid(), "k2");
    assert_eq!(rotated.kids().collect::<Vec<_>>(), ["k2", "k1"]);

    let old_token = mint(&old, &claims());
    let new_token = mint(&rotated, &claims());
    assert!(new_token.starts_with(&format!(
        "{TOKEN_PREFIX}{}",
        b64(br#"{"alg":"HS256","typ":"MCP+CONFIRM","kid":"k2"}"#)
    )));
    assert_eq!(verify(&rotated, &old_token, NOW, &rules()), Ok(claims()));
    assert_eq!(verify(&rotated, &new_token, NOW, &rules()), Ok(claims()));

    let retired = keyring(&format!("k2:{KEY_B}"));
    assert_eq!(
        verify(&retired, &old_token, NOW, &rules()),
        Err(TokenRejection::UnknownKey)
    );
    assert_eq!(verify(&retired, &new_token, NOW, &rules()), Ok(claims()));
}

// ---- binding -----------------------------------------------------------------------------

#[test]
fn binding_accepts_the_exact_request() {
    let c = claims();
    assert_eq!(check_binding(&c, &expectation(&c)), Ok(()));
}

#[test]
fn binding_checks_run_in_the_documented_order() {
    let c = claims();
    let mut e = Expectation {
        sub: "mallory",
        sid: Some("s-other"),
        up: "billing",
        m: "resources/read",
        tool: "drop_tables",
        ah: "other-ah",
        ph: None,
        tdh: "other-tdh",
    };
    let ok = expectation(&c);
    type Fix = dyn Fn(&mut Expectation<'_>);
    let steps: [(TokenRejection, &Fix); 6] = [
        (TokenRejection::SubjectMismatch, &|e| e.sub = "alice"),
        (TokenRejection::SessionMismatch, &|e| e.sid = Some("s-1")),
        (TokenRejection::UpstreamMismatch, &|e| e.up = "store"),
        (TokenRejection::ToolMismatch, &|e| e.m = "tools/call"),
        (TokenRejection::ToolMismatch, &|e| e.tool = "adjust_stock"),
        (TokenRejection::ArgumentsMismatch, &|e| {
            e.ah = "RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o"
        }),
    ];
    for (expected, fix) in steps {
        assert_eq!(check_binding(&c, &e), Err(expected));
        fix(&mut e);
    }
    assert_eq!(
        check_binding(&c, &e),
        Err(TokenRejection::DefinitionChanged)
    );
    e.tdh = ok.tdh;
    assert_eq!(e, ok);
    assert_eq!(check_binding(&c, &e), Ok(()));
}

#[test]
fn each_single_binding_mismatch_has_its_own_code() {
    let c = claims();
    let cases: [(TokenRejection, Expectation<'_>); 9] = [
        (
            TokenRejection::SubjectMismatch,
            Expectation {
                sub: "alicE",
                ..expectation(&c)
            },
        ),
        (
            TokenRejection::SessionMismatch,
            Expectation {
                sid: None,
                ..expectation(&c)
            },
        ),
        (
            TokenRejection::SessionMismatch,
            Expectation {
                sid: Some("s-10"),
                ..expectation(&c)
            },
        ),
        (
            TokenRejection::UpstreamMismatch,
            Expectation {
                up: "store2",
                ..expectation(&c)
            },
        ),
        (
            TokenRejection::ToolMismatch,
            Expectation {
                m: "resources/read",
                ..expectation(&c)
            },
        ),
        (
            TokenRejection::ToolMismatch,
            Expectation {
                tool: "Adjust_stock",
                ..expectation(&c)
            },
        ),
        (
            TokenRejection::ArgumentsMismatch,
            Expectation {
                ah: "RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4",
                ..expectation(&c)
            },
        ),
        (
            TokenRejection::ArgumentsMismatch,
            Expectation {
                ah: "",
                ..expectation(&c)
            },
        ),
        (
            TokenRejection::DefinitionChanged,
            Expectation {
                tdh: "tdh-valuE",
                ..expectation(&c)
            },
        ),
    ];
    for (code, e) in cases {
        assert_eq!(check_binding(&c, &e), Err(code), "{e:?}");
    }
    let mut with_params = claims();
    with_params.ph = Some("ph-value".into());
    for ph in [None, Some("ph-valuE")] {
        let e = Expectation {
            ph,
            ..expectation(&with_params)
        };
        assert_eq!(
            check_binding(&with_params, &e),
            Err(TokenRejection::ArgumentsMismatch),
            "{e:?}"
        );
    }
    assert_eq!(
        check_binding(
            &c,
            &Expectation {
                ph: Some("ph-value"),
                ..expectation(&c)
            }
        ),
        Err(TokenRejection::ArgumentsMismatch),
        "params the approval did not bind must not appear later"
    );
    assert_eq!(
        check_binding(&with_params, &expectation(&with_params)),
        Ok(())
    );
    let mut sessionless = claims();
    sessionless.sid = None;
    assert_eq!(
        check_binding(&sessionless, &expectation(&c)),
        Err(TokenRejection::SessionMismatch)
    );
}

#[test]
fn rejection_codes_are_the_design_codes_and_messages_are_lowercase() {
    let all = [
        (TokenRejection::Malformed, "malformed"),
        (TokenRejection::BadSignature, "bad_signature"),
        (TokenRejection::UnknownKey, "unknown_key"),
        (TokenRejection::Expired, "expired"),
        (TokenRejection::SubjectMismatch, "subject_mismatch"),
        (TokenRejection::SessionMismatch, "session_mismatch"),
        (TokenRejection::UpstreamMismatch, "upstream_mismatch"),
        (TokenRejection::ToolMismatch, "tool_mismatch"),
        (TokenRejection::ArgumentsMismatch, "arguments_mismatch"),
        (TokenRejection::DefinitionChanged, "definition_changed"),
    ];
    for (rejection, code) in all {
        assert_eq!(rejection.code(), code);
        let message = rejection.to_string();
        assert_eq!(message, message.to_lowercase(), "{message}");
    }
}

// ---- inspection and ids ------------------------------------------------------------------

#[test]
fn inspect_decodes_without_any_key_or_clock() {
    let forged = sign_raw(
        KEY_B,
        r#"{"alg":"HS256","typ":"MCP+CONFIRM","kid":"k9"}"#,
        &claims_json(&claims()),
    );
    let (header, c) = inspect_unverified(&forged).expect("decodes");
    assert_eq!(header.kid, "k9");
    assert_eq!(c, claims());
    assert_eq!(
        inspect_unverified("mcp_cf_a.b"),
        Err(TokenRejection::Malformed)
    );
}

#[test]
fn jti_is_128_random_bits_in_base64url() {
    let a = new_jti();
    let b = new_jti();
    assert_eq!(a.len(), 22);
    assert_eq!(B64URL.decode(&a).expect("b64url").len(), 16);
    assert_ne!(a, b);
}

// ---- keyring -----------------------------------------------------------------------------

#[test]
fn keyring_parses_commas_newlines_comments_and_whitespace() {
    let spec =
        format!("# rotated 2026-11\n\n  k3 : {KEY_B} , k2:{KEY_A}\r\n# old\nk1.old_-x:{KEY_A}=\n");
    let ring = keyring(&spec);
    assert_eq!(ring.kids().collect::<Vec<_>>(), ["k3", "k2", "k1.old_-x"]);
    assert_eq!(ring.signing_kid(), "k3");
}

#[test]
fn keyring_refuses_bad_specs_without_echoing_keys() {
    let short = b64(&[7u8; 31]);
    let cases = [
        (String::new(), KeyringError::Empty),
        ("# only a comment\n\n".to_owned(), KeyringError::Empty),
        (
            format!("k1{KEY_A}"),
            KeyringError::MissingSeparator { entry: 1 },
        ),
        (
            format!("k1:{KEY_A},:{KEY_B}"),
            KeyringError::InvalidKid { entry: 2 },
        ),
        (
            format!("{}:{KEY_A}", "k".repeat(33)),
            KeyringError::InvalidKid { entry: 1 },
        ),
        (
            format!("k/1:{KEY_A}"),
            KeyringError::InvalidKid { entry: 1 },
        ),
        (format!("ké:{KEY_A}"), KeyringError::InvalidKid { entry: 1 }),
        (
            format!("k1:{KEY_A}\nk1:{KEY_B}"),
            KeyringError::DuplicateKid { kid: "k1".into() },
        ),
        (
            format!("k1:{short}"),
            KeyringError::KeyTooShort {
                kid: "k1".into(),
                len: 31,
            },
        ),
        (
            "k1:not base64!".to_owned(),
            KeyringError::InvalidKey { kid: "k1".into() },
        ),
        (
            format!("k1:{}", KEY_A.replace('A', "+")),
            KeyringError::InvalidKey { kid: "k1".into() },
        ),
    ];
    for (spec, expected) in cases {
        let error = Keyring::parse(&spec).expect_err(&spec);
        assert_eq!(error, expected, "{spec}");
        let message = error.to_string();
        assert!(
            !message.contains(KEY_A) && !message.contains(KEY_B),
            "{message}"
        );
        assert_eq!(message, message.to_lowercase());
    }
}

#[test]
fn debug_output_never_contains_key_material() {
    let ring = keyring(&format!("k2:{KEY_B},k1:{KEY_A}"));
    let debug = format!("{ring:?} {ring:#?}");
    assert!(debug.contains("k2") && debug.contains("k1"));
    assert!(!debug.contains(KEY_A) && !debug.contains(KEY_B));
    assert!(!debug.contains("AAECAwQF") && !debug.contains("255"));
}

#[test]
fn generated_keyring_has_an_ephemeral_kid_and_works() {
    let ring = Keyring::generate();
    let kid = ring.signing_kid();
    assert!(
        kid.starts_with("ephemeral-") && kid.len() == "ephemeral-".len() + 8,
        "{kid}"
    );
    assert_eq!(
        verify(&ring, &mint(&ring, &claims()), NOW, &rules()),
        Ok(claims())
    );
    assert_eq!(
        verify(&Keyring::generate(), &mint(&ring, &claims()), NOW, &rules()),
        Err(TokenRejection::UnknownKey)
    );
}

#[test]
fn keygen_entry_is_a_valid_single_key_keyring() {
    let entry = keygen_entry();
    let ring = keyring(&entry);
    let (kid, key) = entry.split_once(':').expect("kid:key");
    assert_eq!(ring.signing_kid(), kid);
    assert!(kid.starts_with('k') && kid.len() == 9, "{kid}");
    assert_eq!(B64URL.decode(key).expect("b64url").len(), 32);
    assert_ne!(keygen_entry(), entry);
}

// ---- properties --------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn flipping_any_byte_after_the_header_never_verifies(offset in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let token = mint(&k1(), &claims());
        let start = token.find('.').expect("header") + 1;
        let at = start + offset.index(token.len() - start);
        let mut bytes = token.into_bytes();
        bytes[at] ^= xor;
        // Non-UTF-8 cannot even reach `verify` as a &str; that is a refusal by construction.
        if let Ok(tampered) = String::from_utf8(bytes) {
            let result = verify(&k1(), &tampered, NOW, &rules());
            prop_assert!(
                matches!(result, Err(TokenRejection::BadSignature | TokenRejection::Malformed)),
                "{:?}", result
            );
        }
    }

    #[test]
    fn flipping_any_byte_anywhere_never_verifies(offset in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let token = mint(&k1(), &claims());
        let at = offset.index(token.len());
        let mut bytes = token.into_bytes();
        bytes[at] ^= xor;
        if let Ok(tampered) = String::from_utf8(bytes) {
            prop_assert!(verify(&k1(), &tampered, NOW, &rules()).is_err());
        }
    }

    #[test]
    fn random_strings_never_verify(junk in "mcp_cf_[A-Za-z0-9_.=+/-]{0,300}") {
        prop_assert!(verify(&k1(), &junk, NOW, &rules()).is_err());
    }

    #[test]
    fn minted_claims_round_trip(
        sub in ".{0,20}", sid in proptest::option::of(".{0,20}"), tool in "[A-Za-z0-9_.-]{1,128}",
        iat in 0u64..4_000_000_000, ttl in 0u64..=300, st in proptest::option::of(".{0,40}"),
    ) {
        let c = Claims { sub, sid, tool, iat, exp: iat + ttl, st, jti: new_jti(), ..claims() };
        prop_assert_eq!(verify(&k1(), &mint(&k1(), &c), iat, &rules()), Ok(c));
    }
}
