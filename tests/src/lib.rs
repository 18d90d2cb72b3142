//! End-to-end tests: the real binary against real MCP peers.
