//! Reading members by key: a key token matches the key it unescapes to, never its escaped
//! spelling, in narrow and wide objects alike.

use super::*;

fn raw(text: &str) -> RawJson {
    RawJson::parse_slice(text.as_bytes()).expect("valid json")
}

fn number(object: &RawJson, key: &str) -> Option<i64> {
    object.get(key).and_then(|v| v.as_i64())
}

#[test]
fn an_escaped_key_matches_its_unescaped_text_only() {
    let object = raw(r#"{"\u0061":1,"\u0042c":2,"\n":3,"\/":4,"a\\u0062":5,"\ud83d\ude00":6}"#);
    for (key, expected) in [
        ("a", Some(1)),
        ("\\u0061", None),
        ("Bc", Some(2)),
        ("bc", None),
        ("\n", Some(3)),
        ("\\n", None),
        ("/", Some(4)),
        // As long as the token's inner text: a plain comparison would match it.
        ("\\/", None),
        ("a\\u0062", Some(5)),
        ("ab", None),
        ("😀", Some(6)),
        ("\\ud83d\\ude00", None),
    ] {
        assert_eq!(number(&object, key), expected, "{key:?}");
    }
}

#[test]
fn a_plain_key_matches_only_itself() {
    let object = raw(r#"{ "name" : 1 , "Name":2, "nam":3, "names":4, "":5 }"#);
    for (key, expected) in [
        ("name", Some(1)),
        ("Name", Some(2)),
        ("NAME", None),
        ("nam", Some(3)),
        ("na", None),
        ("names", Some(4)),
        ("", Some(5)),
        (" name", None),
    ] {
        assert_eq!(number(&object, key), expected, "{key:?}");
    }
    assert_eq!(raw("[1]").get("0"), None, "not an object");
    assert_eq!(raw(r#""name""#).get("name"), None, "not an object");
}

#[test]
fn every_member_of_a_wide_object_is_found_with_its_exact_value() {
    let mut text = String::from("{");
    for i in 0..40 {
        if i > 0 {
            text.push(',');
        }
        // Every third key escaped, every value a different shape.
        let key = if i % 3 == 0 {
            format!(r"k\u0065y{i}")
        } else {
            format!("key{i}")
        };
        text.push_str(&format!(r#""{key}": {{"v":[{i}, "}}"]}}"#));
    }
    text.push('}');
    let object = raw(&text);
    for i in 0..40 {
        let value = object.get(&format!("key{i}")).expect("present");
        assert_eq!(value.as_text(), format!(r#"{{"v":[{i}, "}}"]}}"#), "key{i}");
    }
    assert_eq!(object.get("key40"), None);
    assert_eq!(object.get("v"), None, "nested keys are not members");
}

#[test]
fn editing_by_key_finds_escaped_keys_and_keeps_their_spelling() {
    let object = raw(r#"{"n\u0061me":"t","other":1}"#);
    assert_eq!(object.without_member("name").as_text(), r#"{"other":1}"#);
    assert_eq!(
        object.with_member("name", &RawJson::string("u")).as_text(),
        r#"{"n\u0061me":"u","other":1}"#
    );
    assert_eq!(object.without_member(r"n\u0061me"), object);
}

#[test]
fn get_many_answers_each_key_as_get_does() {
    let object = raw(r#"{"name":"t", "\u0061rguments":{"a":1}, "_meta":{"name":2}, "n\u0000":3}"#);
    let keys = [
        "_meta",
        "name",
        "missing",
        "arguments",
        "n\u{0}",
        "name",
        "\\u0061rguments",
    ];
    let found = object.get_many(keys);
    for (key, value) in keys.iter().zip(&found) {
        assert_eq!(value, &object.get(key), "{key:?}");
    }
    assert_eq!(found[1].as_ref().map(RawJson::as_text), Some(r#""t""#));
    assert_eq!(found[5], found[1], "a key asked for twice is found twice");
    assert_eq!(found[2], None);
    assert_eq!(
        raw("[1]").get_many(["a", "b"]),
        [None, None],
        "not an object"
    );
    assert_eq!(object.get_many([]), []);
}
