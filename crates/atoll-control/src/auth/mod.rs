//! Who is calling, and may they do this.
//!
//! [`principal`] turns the bearer token (or the console's session cookie, see [`session`])
//! into a [`Principal`] (or a 401); [`policy`] holds
//! the one table that says, for every [`Action`], which principals may perform it, and
//! [`Access`] is the extractor every protected handler takes: by the time a handler runs,
//! its route's action has been authorized against the organization and group named in
//! its path.

pub mod login_tokens;
pub mod node;
pub mod policy;
pub mod principal;
pub mod secrets;
pub mod session;

pub use policy::{Access, Action, Rule, Target, TokenRule};
pub use principal::Principal;
