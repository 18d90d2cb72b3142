use super::*;

#[test]
fn ids_are_lower_case_hex() {
    let mut out = [0u8; 4];
    hex(&[0x0a, 0xf1], &mut out);
    assert_eq!(&out, b"0af1");
}

#[test]
fn without_an_exporter_no_request_has_trace_ids() {
    // Nothing in the proxy's tests enables tracing: audit lines must then carry no ids.
    assert!(!enabled());
    let span = tracing::info_span!(target: TARGET, "mcp.request");
    let _entered = span.enter();
    assert_eq!(TraceIds::current(), None);
}
