//! The wire format alone: requests as written, response heads and body framing as read.

use super::*;

fn head(text: &str) -> Result<Option<Head>, WireError> {
    parse_head(&mut BytesMut::from(text.as_bytes()))
}

fn whole_head(text: &str) -> Head {
    head(text).unwrap().expect("a whole head")
}

/// Decodes `wire` fed in pieces of `step` bytes; the body and whether it ended exactly.
fn decode_in_steps(
    mut framing: Framing,
    wire: &[u8],
    step: usize,
) -> Result<(Vec<u8>, bool), WireError> {
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    for piece in wire.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match framing.decode(&mut buf)? {
                Decoded::Data(data) => body.extend_from_slice(&data),
                Decoded::End => return Ok((body, buf.is_empty())),
                Decoded::More => break,
            }
        }
    }
    Ok((body, framing.is_done()))
}

#[test]
fn a_request_is_written_in_origin_form_with_its_own_length() {
    let request = Request::post("http://upstream.internal:8080/mcp?x=1")
        .header("host", "upstream.internal")
        .header("content-length", "999")
        .header("transfer-encoding", "chunked")
        .header("mcp-session-id", "s1")
        .body(())
        .unwrap();
    let mut out = Vec::new();
    encode_request(&request, b"{}", &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /mcp?x=1 HTTP/1.1\r\nhost: upstream.internal\r\nmcp-session-id: s1\r\n\
         content-length: 2\r\n\r\n{}"
    );
    let get = Request::get("http://u/.well-known/x").body(()).unwrap();
    let mut out = Vec::new();
    encode_request(&get, b"", &mut out);
    assert_eq!(out, b"GET /.well-known/x HTTP/1.1\r\n\r\n");
}

#[test]
fn a_head_arriving_in_pieces_is_parsed_once_whole_and_interim_answers_are_skipped() {
    assert!(head("HTTP/1.1 200 OK\r\ncontent-len").unwrap().is_none());
    let mut buf =
        BytesMut::from(&b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nMcp-Session-Id: a\r\n\r\nokNEXT"[..]);
    let parsed = parse_head(&mut buf).unwrap().unwrap();
    assert_eq!(parsed.response.status(), StatusCode::OK);
    assert_eq!(parsed.response.headers()["mcp-session-id"], "a");
    assert_eq!(parsed.framing, Framing::Length(2));
    assert!(parsed.reusable);
    // The head is consumed; the body stays in the buffer.
    assert_eq!(&buf[..], b"okNEXT");
}

#[test]
fn the_head_keeps_only_the_fields_an_answer_passes_on() {
    // `X-Hop` comes before the `Connection` field that lists it: left out all the same.
    let parsed = whole_head(
        "HTTP/1.1 200 OK\r\nServer: up\r\nX-Hop: secret\r\nConnection: keep-alive, X-Hop\r\n\
         Keep-Alive: timeout=5\r\nContent-Length: 2\r\nMcp-Session-Id: a\r\n\
         Set-Cookie: a=1\r\nTE: trailers\r\nUpgrade: h2c\r\nTrailer: x\r\n\
         Proxy-Connection: close\r\nSet-Cookie: b=2\r\n\r\n",
    );
    let kept: Vec<_> = parsed
        .response
        .headers()
        .iter()
        .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap()))
        .collect();
    assert_eq!(
        kept,
        [
            "server: up",
            "mcp-session-id: a",
            "set-cookie: a=1",
            "set-cookie: b=2"
        ]
    );
    // What was left out still framed the body and decided the connection's reuse.
    assert_eq!(parsed.framing, Framing::Length(2));
    assert!(parsed.reusable);
    // More listed names than are kept aside: the fields are read again for the rest.
    let many = whole_head(
        "HTTP/1.1 200 OK\r\nX-Late: 1\r\nConnection: a, b\r\nConnection: c, d, X-Late\r\n\
         X-Kept: 2\r\nContent-Length: 0\r\n\r\n",
    );
    let names: Vec<_> = many
        .response
        .headers()
        .keys()
        .map(|name| name.as_str())
        .collect();
    assert_eq!(names, ["x-kept"]);
    let closing = whole_head("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: Close\r\n\r\n");
    assert!(!closing.reusable && closing.response.headers().is_empty());
}

#[test]
fn a_malformed_framing_field_counts_only_where_the_body_is_framed_by_it() {
    let no_body = whole_head("HTTP/1.1 204 No Content\r\ncontent-length: x\r\n\r\n");
    assert!(no_body.framing.is_done());
    let chunked =
        whole_head("HTTP/1.1 200 OK\r\ncontent-length: x\r\ntransfer-encoding: chunked\r\n\r\n");
    assert_eq!(chunked.framing, Framing::Chunked(Chunk::Size));
    assert!(!chunked.reusable);
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\xff\r\n\r\n"[..]);
    assert!(matches!(parse_head(&mut buf), Err(WireError::Framing(_))));
}

#[test]
fn malformed_or_oversized_heads_are_refused() {
    assert!(matches!(
        head("HTTP/1.1 2x0 OK\r\n\r\n"),
        Err(WireError::Head(_))
    ));
    assert!(matches!(
        head("HTTP/1.1 200 OK\r\nbad header\r\n\r\n"),
        Err(WireError::Head(_))
    ));
    assert!(matches!(
        head("HTTP/1.1 101 Switching\r\n\r\n"),
        Err(WireError::Head(_))
    ));
    let huge = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES + 1));
    assert!(matches!(head(&huge), Err(WireError::HeadTooLarge)));
}

#[test]
fn content_lengths_that_disagree_or_do_not_parse_are_refused() {
    for text in [
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 2, 3\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 0x2\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
    ] {
        assert!(matches!(head(text), Err(WireError::Framing(_))), "{text}");
    }
    // Repeating the same length is allowed (RFC 9112 §6.3).
    let same = whole_head("HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n");
    assert_eq!(same.framing, Framing::Length(2));
}

#[test]
fn transfer_encoding_wins_over_content_length_and_forbids_reuse() {
    let both =
        whole_head("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n");
    assert_eq!(both.framing, Framing::Chunked(Chunk::Size));
    assert!(!both.reusable);
    let chunked = whole_head("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n");
    assert_eq!(chunked.framing, Framing::Chunked(Chunk::Size));
    assert!(chunked.reusable);
    // A final coding other than chunked: the body runs to the close.
    let other = whole_head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n");
    assert_eq!(other.framing, Framing::UntilClose);
    assert!(!other.reusable);
}

#[test]
fn reuse_needs_http_1_1_an_exact_length_and_no_close() {
    assert!(!whole_head("HTTP/1.1 200 OK\r\n\r\n").reusable);
    assert!(!whole_head("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").reusable);
    assert!(
        !whole_head(
            "HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\ncontent-length: 0\r\n\r\n"
        )
        .reusable
    );
    let empty = whole_head("HTTP/1.1 204 No Content\r\ncontent-length: 7\r\n\r\n");
    assert!(empty.framing.is_done() && empty.reusable);
}

#[test]
fn a_length_body_ends_at_its_length_whatever_the_pieces() {
    for step in [1, 2, 5, 100] {
        let (body, exact) = decode_in_steps(Framing::Length(5), b"hello", step).unwrap();
        assert_eq!(
            (body.as_slice(), exact),
            (&b"hello"[..], true),
            "step {step}"
        );
    }
    // Bytes past the length are not body.
    let mut buf = BytesMut::from(&b"helloEXTRA"[..]);
    let mut framing = Framing::Length(5);
    assert_eq!(
        framing.decode(&mut buf).unwrap(),
        Decoded::Data(Bytes::from_static(b"hello"))
    );
    assert_eq!(framing.decode(&mut buf).unwrap(), Decoded::End);
    assert_eq!(&buf[..], b"EXTRA");
}

#[test]
fn a_chunked_body_is_decoded_whatever_the_pieces() {
    let wire = b"5;name=value\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-trailer: 1\r\n\r\n";
    for step in 1..=wire.len() {
        let (body, exact) = decode_in_steps(Framing::chunked(), wire, step).unwrap();
        assert_eq!(body, b"hello world", "step {step}");
        assert!(exact, "step {step}");
    }
}

#[test]
fn a_malformed_chunked_body_is_an_error() {
    for wire in [
        &b"zz\r\nhello\r\n0\r\n\r\n"[..],
        b"\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhelloXX0\r\n\r\n",
        b"1000000000000000\r\n",
    ] {
        assert!(
            decode_in_steps(Framing::chunked(), wire, 64).is_err(),
            "{wire:?}"
        );
    }
    let long_line = format!("5;{}", "e".repeat(MAX_CHUNK_LINE + 1));
    assert!(decode_in_steps(Framing::chunked(), long_line.as_bytes(), 64).is_err());
    let mut trailers = b"0\r\n".to_vec();
    while trailers.len() <= MAX_TRAILER_BYTES {
        trailers.extend_from_slice(b"x-filler: aaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    assert!(decode_in_steps(Framing::chunked(), &trailers, 64).is_err());
}

#[test]
fn a_close_ends_only_a_body_that_runs_to_the_close() {
    assert!(Framing::UntilClose.at_close().is_ok());
    assert!(Framing::Length(0).at_close().is_ok());
    assert!(matches!(
        Framing::Length(3).at_close(),
        Err(WireError::Truncated)
    ));
    assert!(matches!(
        Framing::chunked().at_close(),
        Err(WireError::Truncated)
    ));
}
