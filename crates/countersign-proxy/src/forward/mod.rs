//! The innermost service: sends upstream exactly the [`Cleared`] value the approval layer
//! passed on — its serialization, with framing and routing headers rebuilt — and relays the
//! answer, letting the response watcher observe every message.
//!
//! It accepts nothing but `Request<Cleared>`, so nothing reaches an upstream without passing
//! the approval layer, and it never sees the client's raw bytes.
//!
//! [`Cleared`]: crate::approval::Cleared

mod service;

pub use service::Forwarder;

#[cfg(test)]
mod tests;
