//! The durable record of a pack: an append-only event log ([`events`], [`store`]), the
//! report rebuilt from it ([`fold`], [`model`]), and the files of a report directory
//! written atomically ([`store`]). A GPU's energy shared out among runs measured on other
//! nodes follows the one energy rule of [`crate::energy`].

mod best;
pub mod events;
pub mod fold;
pub mod model;
pub mod pairs;
mod state;
pub mod store;

pub use best::Best;
pub use state::State;
