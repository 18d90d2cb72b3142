//! The in-flight body budget: one byte count shared by every request of a listener, so that
//! many bodies at once cannot take more memory than the operator allowed, whatever each one's
//! own size limit.
//!
//! A body's bytes are counted as they are read, so a client that declares a large body and
//! sends nothing holds nothing. A body whose declared `Content-Length` does not fit in what is
//! left is refused before a byte of it is read, so the refusal comes while the client can still
//! read it. What was counted then travels with the parsed request in its context: the parsed
//! value is the body's bytes in another form, and it lives as long as the request does —
//! through classification, while a held call waits for a person, until the forwarder has sent
//! it. Refusing is immediate, never a wait: a queue of bodies waiting for memory is itself
//! memory.

use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget of one listener.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: usize,
    /// Bytes counted right now, for `/metrics`.
    in_use: Gauge,
}

/// A body that does not fit in what is left of the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverBudget {
    /// The whole budget, for the refusal's message.
    pub(crate) budget: usize,
}

impl BodyBudget {
    pub(crate) fn new(total: usize, in_use: Gauge) -> Self {
        // tokio caps a semaphore at `usize::MAX >> 3` permits; no machine has that much memory.
        let total = total.min(Semaphore::MAX_PERMITS);
        Self {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            in_use,
        }
    }

    /// An empty reservation for a body declared `declared` bytes long, or a refusal when that
    /// many are not free right now.
    pub(crate) fn admit(&self, declared: usize) -> Result<BodyReservation, OverBudget> {
        if self.bytes.available_permits() < declared {
            return Err(OverBudget { budget: self.total });
        }
        Ok(BodyReservation {
            permit: None,
            in_use: self.in_use.clone(),
            bytes: 0,
        })
    }

    /// Counts `bytes` more of a body in `reservation`, or refuses when they do not fit.
    pub(crate) fn grow(
        &self,
        reservation: &mut BodyReservation,
        bytes: usize,
    ) -> Result<(), OverBudget> {
        let more = self.take(bytes)?;
        match reservation.permit.as_mut() {
            Some(permit) => permit.merge(more),
            None => reservation.permit = Some(more),
        }
        reservation.count(bytes);
        Ok(())
    }

    fn take(&self, bytes: usize) -> Result<OwnedSemaphorePermit, OverBudget> {
        let over = OverBudget { budget: self.total };
        // One acquisition takes at most u32::MAX permits; a body that large is over any budget
        // a gateway would be given.
        let bytes = u32::try_from(bytes).map_err(|_| over)?;
        self.bytes
            .clone()
            .try_acquire_many_owned(bytes)
            .map_err(|_| over)
    }
}

/// The bytes one request body holds of the budget, given back when the last copy is dropped.
/// Cloned into request extensions (which must be `Clone`); clones share one reservation.
#[derive(Debug, Clone)]
pub struct HeldBody {
    _reservation: Arc<BodyReservation>,
}

impl HeldBody {
    pub(crate) fn new(reservation: BodyReservation) -> Self {
        Self {
            _reservation: Arc::new(reservation),
        }
    }
}

/// A reservation of body bytes.
#[derive(Debug)]
pub(crate) struct BodyReservation {
    permit: Option<OwnedSemaphorePermit>,
    in_use: Gauge,
    bytes: usize,
}

impl BodyReservation {
    fn count(&mut self, bytes: usize) {
        self.bytes += bytes;
        self.in_use.inc_by(gauge_value(bytes));
    }

    /// Bytes reserved.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for BodyReservation {
    fn drop(&mut self) {
        self.in_use.dec_by(gauge_value(self.bytes));
    }
}

fn gauge_value(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(budget: &BodyBudget, bytes: usize) -> BodyReservation {
        let mut reservation = budget.admit(bytes).expect("admitted");
        budget.grow(&mut reservation, bytes).expect("fits");
        reservation
    }

    #[test]
    fn bodies_share_the_budget_and_give_it_back_when_dropped() {
        let in_use = Gauge::default();
        let budget = BodyBudget::new(100, in_use.clone());
        let first = holding(&budget, 60);
        assert_eq!(budget.admit(41).err(), Some(OverBudget { budget: 100 }));
        let second = holding(&budget, 40);
        assert_eq!(in_use.get(), 100);
        assert!(budget.admit(1).is_err(), "the budget is full");
        drop(first);
        assert_eq!(in_use.get(), 40);
        assert!(
            budget.admit(60).is_ok(),
            "dropping a body returns its bytes"
        );
        drop(second);
        assert_eq!(in_use.get(), 0);
    }

    #[test]
    fn a_declared_body_holds_nothing_until_its_bytes_arrive() {
        let budget = BodyBudget::new(100, Gauge::default());
        let declared = budget.admit(100).expect("room for it");
        let other = budget.admit(100).expect("nothing is held by a declaration");
        drop((declared, other));
    }

    #[test]
    fn a_body_grows_only_within_the_budget() {
        let budget = BodyBudget::new(100, Gauge::default());
        let mut reservation = budget.admit(0).expect("an empty body fits");
        budget.grow(&mut reservation, 70).expect("fits");
        assert_eq!(reservation.bytes(), 70);
        assert_eq!(
            budget.grow(&mut reservation, 31),
            Err(OverBudget { budget: 100 })
        );
        assert_eq!(reservation.bytes(), 70, "a refused growth takes nothing");
        drop(reservation);
        assert!(budget.admit(100).is_ok());
    }

    #[test]
    fn held_body_clones_share_one_reservation() {
        let in_use = Gauge::default();
        let budget = BodyBudget::new(10, in_use.clone());
        let held = HeldBody::new(holding(&budget, 10));
        let copy = held.clone();
        drop(held);
        assert!(budget.admit(1).is_err(), "a copy still holds the bytes");
        drop(copy);
        assert_eq!(in_use.get(), 0);
        assert!(budget.admit(10).is_ok());
    }
}
