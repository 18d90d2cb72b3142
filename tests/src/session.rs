//! A 2025-11-25 session with the notes store, driven by hand: what the transport tests use to
//! hold a write, approve it and read the store's own audit log.

use countersign_testkit::mcp::{held_token, open_session};
use countersign_testkit::{TestClient, sse_messages};
use serde_json::{Value, json};

use crate::Peer;

/// A legacy (2025-11-25) session opened by hand, declaring no elicitation: a held call comes
/// back with a confirmation token.
#[derive(Debug)]
pub struct Session {
    url: String,
    id: String,
    next_id: i64,
}

impl Session {
    pub async fn open(url: &str) -> Self {
        let id = open_session(url, json!({})).await;
        let session = Self {
            url: url.to_owned(),
            id,
            next_id: 1,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = session.post(&initialized).await;
        assert_eq!(answer.status, 202, "{}", answer.text());
        session
    }

    pub async fn post(&self, message: &Value) -> countersign_testkit::Collected {
        TestClient::default()
            .post_json(
                &self.url,
                &[
                    ("mcp-session-id", self.id.as_str()),
                    ("mcp-protocol-version", "2025-11-25"),
                ],
                &message.to_string(),
            )
            .await
    }

    /// Calls `tool` and returns the JSON-RPC response to the call.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}});
        let answer = self.post(&call).await;
        assert_eq!(answer.status, 200, "{tool}: {}", answer.text());
        let messages = if answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
        {
            sse_messages(&answer.text())
        } else {
            vec![answer.json()]
        };
        messages
            .into_iter()
            .find(|m| m["id"] == id && (m.get("result").is_some() || m.get("error").is_some()))
            .unwrap_or_else(|| panic!("{tool}: no response in {}", answer.text()))
    }

    /// What the notes store executed, by its own audit log.
    pub async fn executed(&mut self) -> Value {
        self.call("audit_log", json!({})).await["result"]["structuredContent"]["entries"].clone()
    }

    /// Holds `delete_note` on the store's `readme` and approves it: nothing runs while it is
    /// held (the store's own audit log is empty and the note is still listed), the approved call
    /// runs once, and its replay is rejected.
    pub async fn assert_held_delete_runs_once_approved(&mut self) {
        let held = self.call("delete_note", json!({"name": "readme"})).await;
        let token = held_token(&held);
        assert_eq!(
            self.executed().await,
            json!([]),
            "nothing ran while it was held"
        );
        let notes = self.call("list_notes", json!({})).await;
        assert_eq!(
            notes["result"]["structuredContent"]["names"],
            json!(["readme"])
        );

        let approved = json!({"name": "readme", "confirmationToken": token});
        let ran = self.call("delete_note", approved.clone()).await;
        assert_eq!(
            ran["result"]["structuredContent"],
            json!({"result": "deleted note 'readme'"}),
            "{ran}"
        );
        let replayed = self.call("delete_note", approved).await;
        assert_eq!(
            replayed["result"]["_meta"]["countersign/confirmation"]["status"], "rejected",
            "{replayed}"
        );
        assert_eq!(
            self.executed().await,
            json!([{"tool": "delete_note", "arguments": {"name": "readme"}}]),
            "the upstream ran it exactly once"
        );
    }

    pub async fn delete(&self) -> u16 {
        TestClient::default()
            .send(
                http::Method::DELETE,
                &self.url,
                &[("mcp-session-id", self.id.as_str())],
                "",
            )
            .await
            .status()
            .as_u16()
    }
}

/// The `session` script's transcript must exercise the side channels, or comparing it proves
/// little: the upstream's own elicitation reached the client, and every progress notification.
pub fn assert_rich(peer: Peer, transcript: &Value) {
    let steps = transcript["steps"].as_array().expect("steps");
    let confirm = steps
        .iter()
        .find(|s| s["call"] == "confirm_delete")
        .expect("a confirm_delete step");
    assert_eq!(
        confirm["elicitations"][0]["action"], "accept",
        "{peer:?}: the upstream's own elicitation reached the client: {transcript}"
    );
    let count = steps
        .iter()
        .find(|s| s["call"] == "slow_count")
        .expect("a slow_count step");
    assert_eq!(
        count["progress"].as_array().map(Vec::len),
        Some(5),
        "{peer:?}"
    );
}
