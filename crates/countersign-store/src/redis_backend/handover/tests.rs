//! Unit tests of the hand-over's wire format: channel messages and waiter-record tokens.

use super::subscriber::Message;
use super::*;

const REPLICA: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn messages_round_trip_byte_exact() {
    let messages = [
        Message::Answer {
            key: "k{x}:é\u{0}".to_owned(),
            waiter: 7,
            delivery: u64::MAX,
            reply_to: REPLICA.to_owned(),
            answer: vec![0, 255, b'{', b'}'],
        },
        Message::Answer {
            key: String::new(),
            waiter: 0,
            delivery: 0,
            reply_to: REPLICA.to_owned(),
            answer: Vec::new(),
        },
        Message::Ack {
            delivery: 3,
            taken: true,
        },
        Message::Ack {
            delivery: 4,
            taken: false,
        },
    ];
    for message in messages {
        assert_eq!(Message::decode(&message.encode()), Some(message));
    }
}

#[test]
fn truncated_or_foreign_messages_are_ignored() {
    let answer = Message::Answer {
        key: "key".to_owned(),
        waiter: 1,
        delivery: 2,
        reply_to: REPLICA.to_owned(),
        answer: b"yes".to_vec(),
    }
    .encode();
    // Every cut through the fixed fields leaves something undecodable.
    for len in 0..answer.len() - 3 {
        assert_eq!(Message::decode(&answer[..len]), None, "cut at {len}");
    }
    assert_eq!(Message::decode(b"K\0\0\0\0\0\0\0\x01\x02"), None);
    assert_eq!(Message::decode(b"hello"), None);
    let mut bad_replica = answer.clone();
    bad_replica[1 + 4 + 3 + 16] = b'Z';
    assert_eq!(Message::decode(&bad_replica), None);
}

#[test]
fn tokens_name_a_replica_and_a_waiter() {
    assert_eq!(parse_token(&format!("{REPLICA}/42")), Some((REPLICA, 42)));
    assert_eq!(parse_token("short/1"), None);
    assert_eq!(parse_token(&format!("{REPLICA}/x")), None);
    assert_eq!(parse_token(REPLICA), None);
}
