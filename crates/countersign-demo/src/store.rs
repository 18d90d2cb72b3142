//! The toy store's state and the only operations that change it.
//!
//! Every operation validates fully before it mutates, so a refused call leaves the store exactly
//! as it was — the walkthrough relies on that to show "nothing changed".

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

/// Stock level `restock_all` sets every product to.
const RESTOCK_LEVEL: u32 = 100;
/// Longest customer name accepted, in characters.
const MAX_CUSTOMER_CHARS: usize = 100;

/// Handle to the demo store's in-memory state. Clones share the same state.
#[derive(Clone, Debug)]
pub struct DemoStore {
    state: Arc<Mutex<Snapshot>>,
}

/// A copy of the whole store at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Catalog keyed by SKU (sorted, so listings are deterministic).
    pub products: BTreeMap<String, Product>,
    /// Orders keyed by id.
    pub orders: BTreeMap<String, Order>,
    /// Number the next order id is made from.
    pub next_order_number: u64,
}

/// One catalog entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Product {
    pub sku: String,
    pub name: String,
    pub price_cents: u64,
    pub stock: u32,
}

/// One order, as `get_order` returns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Order {
    pub id: String,
    pub customer: String,
    pub lines: Vec<OrderLine>,
    pub total_cents: u64,
    pub status: OrderStatus,
}

/// One line of an order, priced when the order was placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OrderLine {
    pub sku: String,
    pub quantity: u32,
    pub unit_price_cents: u64,
}

/// Where an order is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    Placed,
    Cancelled,
}

/// One requested line of `create_order`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrderItem {
    pub(crate) sku: String,
    pub(crate) quantity: u32,
}

/// Why the store refused an operation; shown to the model as a tool error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("unknown sku `{0}`; call list_products for the catalog")]
    UnknownSku(String),
    #[error("unknown order `{0}`")]
    UnknownOrder(String),
    #[error("customer must be 1 to {MAX_CUSTOMER_CHARS} characters")]
    BadCustomer,
    #[error("an order needs at least one item")]
    NoItems,
    #[error("quantity for `{0}` must be at least 1")]
    ZeroQuantity(String),
    #[error("not enough stock for `{sku}`: requested {requested}, available {available}")]
    InsufficientStock {
        sku: String,
        requested: u64,
        available: u32,
    },
    #[error("stock for `{sku}` would become {would_be}, outside 0..={}", u32::MAX)]
    StockOutOfRange { sku: String, would_be: i64 },
    #[error("order `{0}` is already cancelled")]
    AlreadyCancelled(String),
}

impl Default for DemoStore {
    fn default() -> Self {
        Self::new()
    }
}

impl DemoStore {
    /// A store seeded with four products and one placed order.
    pub fn new() -> Self {
        let products = [
            ("TOY-001", "Wooden train set", 3499, 12),
            ("TOY-002", "Plush octopus", 1599, 30),
            ("TOY-003", "Delta-wing kite", 2250, 5),
            ("TOY-004", "Marble run", 4999, 8),
        ]
        .into_iter()
        .map(|(sku, name, price_cents, stock)| {
            let product = Product {
                sku: sku.to_owned(),
                name: name.to_owned(),
                price_cents,
                stock,
            };
            (product.sku.clone(), product)
        })
        .collect();
        let seed_order = Order {
            id: "ord-1001".to_owned(),
            customer: "Ada Lovelace".to_owned(),
            lines: vec![OrderLine {
                sku: "TOY-002".to_owned(),
                quantity: 2,
                unit_price_cents: 1599,
            }],
            total_cents: 3198,
            status: OrderStatus::Placed,
        };
        let snapshot = Snapshot {
            products,
            orders: BTreeMap::from([(seed_order.id.clone(), seed_order)]),
            next_order_number: 1002,
        };
        Self {
            state: Arc::new(Mutex::new(snapshot)),
        }
    }

    /// A copy of the current state.
    pub fn snapshot(&self) -> Snapshot {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, Snapshot> {
        // Operations validate before they write, so a panic elsewhere cannot leave a
        // half-applied change behind; the state stays usable after poisoning.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn list_products(&self) -> Vec<Product> {
        self.lock().products.values().cloned().collect()
    }

    pub(crate) fn get_order(&self, id: &str) -> Result<Order, StoreError> {
        let state = self.lock();
        let order = state.orders.get(id);
        order
            .cloned()
            .ok_or_else(|| StoreError::UnknownOrder(id.to_owned()))
    }

    pub(crate) fn create_order(
        &self,
        customer: &str,
        items: &[OrderItem],
    ) -> Result<Order, StoreError> {
        let customer = customer.trim();
        if customer.is_empty() || customer.chars().count() > MAX_CUSTOMER_CHARS {
            return Err(StoreError::BadCustomer);
        }
        if items.is_empty() {
            return Err(StoreError::NoItems);
        }
        let mut state = self.lock();
        // Sum per SKU first: two lines of the same SKU must not each pass the stock check alone.
        let mut wanted: BTreeMap<&str, u64> = BTreeMap::new();
        for item in items {
            if item.quantity == 0 {
                return Err(StoreError::ZeroQuantity(item.sku.clone()));
            }
            *wanted.entry(&item.sku).or_default() += u64::from(item.quantity);
        }
        for (sku, &requested) in &wanted {
            let product = state
                .products
                .get(*sku)
                .ok_or_else(|| StoreError::UnknownSku((*sku).to_owned()))?;
            if requested > u64::from(product.stock) {
                return Err(StoreError::InsufficientStock {
                    sku: (*sku).to_owned(),
                    requested,
                    available: product.stock,
                });
            }
        }
        let mut lines = Vec::with_capacity(items.len());
        for item in items {
            let product = state
                .products
                .get_mut(&item.sku)
                .expect("every sku was checked above under the same lock");
            product.stock -= item.quantity;
            lines.push(OrderLine {
                sku: item.sku.clone(),
                quantity: item.quantity,
                unit_price_cents: product.price_cents,
            });
        }
        let order = Order {
            id: format!("ord-{}", state.next_order_number),
            customer: customer.to_owned(),
            total_cents: lines
                .iter()
                .map(|l| u64::from(l.quantity) * l.unit_price_cents)
                .sum(),
            lines,
            status: OrderStatus::Placed,
        };
        state.next_order_number += 1;
        state.orders.insert(order.id.clone(), order.clone());
        Ok(order)
    }

    pub(crate) fn adjust_stock(&self, sku: &str, delta: i64) -> Result<Product, StoreError> {
        let mut state = self.lock();
        let product = state
            .products
            .get_mut(sku)
            .ok_or_else(|| StoreError::UnknownSku(sku.to_owned()))?;
        let would_be = i64::from(product.stock).saturating_add(delta);
        product.stock = u32::try_from(would_be).map_err(|_| StoreError::StockOutOfRange {
            sku: sku.to_owned(),
            would_be,
        })?;
        Ok(product.clone())
    }

    /// Cancels a placed order and puts its items back on the shelf.
    pub(crate) fn cancel_order(&self, id: &str) -> Result<Order, StoreError> {
        let mut state = self.lock();
        let Snapshot {
            products, orders, ..
        } = &mut *state;
        let order = orders
            .get_mut(id)
            .ok_or_else(|| StoreError::UnknownOrder(id.to_owned()))?;
        if order.status == OrderStatus::Cancelled {
            return Err(StoreError::AlreadyCancelled(id.to_owned()));
        }
        order.status = OrderStatus::Cancelled;
        for line in &order.lines {
            if let Some(product) = products.get_mut(&line.sku) {
                product.stock = product.stock.saturating_add(line.quantity);
            }
        }
        Ok(order.clone())
    }

    /// Overwrites every product's stock with [`RESTOCK_LEVEL`], whatever it was.
    pub(crate) fn restock_all(&self) -> Vec<Product> {
        let mut state = self.lock();
        for product in state.products.values_mut() {
            product.stock = RESTOCK_LEVEL;
        }
        state.products.values().cloned().collect()
    }
}
