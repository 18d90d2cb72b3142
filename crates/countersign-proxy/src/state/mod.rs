//! State shared by every request of a listener, without I/O: the active policy, the pinned
//! tool catalog and the sessions the gateway has seen. Layers read and update it; nothing here
//! talks to an upstream or a store, so it is tested directly.

mod catalog;
mod catalog_bound;
mod policy;
mod sessions;

pub use catalog::CatalogState;
pub use policy::PolicyHandle;
pub use sessions::{SessionBook, SessionInfo, declares_form_elicitation, declares_url_elicitation};
