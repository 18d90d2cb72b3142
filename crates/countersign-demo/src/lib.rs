//! The demo upstream behind `countersign demo`: a small, real MCP server for a toy store.
//!
//! It owns an in-memory store ([`DemoStore`]: products, stock, orders) and serves it over
//! Streamable HTTP at `/mcp` ([`serve`]), speaking both the session revisions (2025-03-26,
//! 2025-06-18, 2025-11-25) and the stateless 2026-07-28 one. Its six tools are annotated to
//! cover every risk class the gateway knows — read, write, destructive, and unannotated — so a
//! newcomer can watch the gateway gate them with one command and nothing to install.
//!
//! This is a demo, **not** part of the gateway's security boundary: it trusts whoever reaches
//! it, keeps state only in memory, and exists to be put behind the gateway. It must not import
//! other countersign crates, so the gateway is exercised against an upstream it knows nothing of.
//! Protocol choices are noted in this crate's README.

#![forbid(unsafe_code)]

mod mcp;
mod server;
mod store;
mod tools;

pub use server::serve;
pub use store::{DemoStore, Order, OrderLine, OrderStatus, Product, Snapshot};

#[cfg(test)]
mod tests;
