//! The durable record of a pack: an append-only event log ([`events`], [`store`]), the
//! report rebuilt from it ([`fold`], [`model`]), and the files of a report directory
//! written atomically ([`store`]); a GPU's energy shared out among runs measured on
//! other nodes ([`energy`]).

pub mod energy;
pub mod events;
pub mod fold;
pub mod model;
pub mod store;
