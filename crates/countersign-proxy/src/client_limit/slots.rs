//! How many requests each client has in flight. Entries exist only while a client has one,
//! so the map is bounded by the requests in flight, which the connection limit bounds.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use http::HeaderMap;

use crate::config::ClientAddress;

/// Who a request counts against: an address, or `None` for requests whose address is unknown
/// (no peer recorded), which share one count rather than escaping the limit.
pub(super) type ClientKey = Option<IpAddr>;

/// The in-flight counts of one listener.
#[derive(Debug)]
pub(super) struct ClientSlots {
    /// foldhash, seeded per map: each request takes and gives back a slot, and SipHash of an
    /// address was about 250 instructions each way.
    in_flight: Mutex<HashMap<ClientKey, usize, foldhash::fast::RandomState>>,
    limit: usize,
}

impl ClientSlots {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            in_flight: Mutex::default(),
            limit: limit.max(1),
        }
    }

    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// One more request for `key`, or `None` when it already has its limit in flight.
    pub(super) fn take(self: &Arc<Self>, key: ClientKey) -> Option<ClientSlot> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let count = in_flight.entry(key).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            slots: self.clone(),
            key,
        })
    }

    fn give_back(&self, key: ClientKey) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = in_flight.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                in_flight.remove(&key);
            }
        }
    }

    #[cfg(test)]
    pub(super) fn clients(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

/// One request in flight for a client, given back when dropped.
#[derive(Debug)]
pub struct ClientSlot {
    slots: Arc<ClientSlots>,
    key: ClientKey,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.slots.give_back(self.key);
    }
}

/// The address a request counts against. With a header configured, its last value's last
/// entry: in `X-Forwarded-For: client, proxy1` the entries before the last were written by
/// whoever sent the request, the last by the proxy the header is trusted from. A missing or
/// unreadable header counts against the peer (the proxy itself), never against nobody.
pub(super) fn client_key(
    address: &ClientAddress,
    headers: &HeaderMap,
    peer: Option<IpAddr>,
) -> ClientKey {
    let forwarded = match address {
        ClientAddress::Peer => None,
        ClientAddress::Header(name) => headers
            .get_all(name)
            .iter()
            .next_back()
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.rsplit(',').next())
            .and_then(parse_address),
    };
    // An IPv4 client on a dual-stack listener shows up as `::ffff:a.b.c.d`; one client, one key.
    forwarded.or(peer).map(|ip| ip.to_canonical())
}

/// `192.0.2.1`, `2001:db8::1`, or either with a port (`192.0.2.1:5000`, `[2001:db8::1]:5000`).
fn parse_address(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
}
