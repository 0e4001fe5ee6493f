//! The registry client: the distribution API calls this tool makes and an OCI layout store,
//! behind one router ([`Registry`]) with noun-verb methods.
//!
//! Layers, each using only those below it:
//! - `error`, `settings`: what a failure says and its [`ErrorKind`]; the run's bounds.
//! - `repo` (with `reference`): repositories and references as users name them.
//! - `body`: bounded reads of an answer's body (idle timeout, deadline, cap).
//! - `auth`: credentials, challenges and tokens, reading token answers through `body`.
//! - `transport`: one request, authorized through `auth`, then retried.
//! - `store`: the interface of a place that holds images; `http` (over `transport`) and
//!   `layout` implement it, each operation once.
//! - `router`: [`Registry`], which picks the store for a repository and joins two stores.

mod auth;
mod body;
mod error;
mod http;
mod layout;
mod reference;
mod repo;
mod router;
mod settings;
mod store;
#[cfg(test)]
mod tests;
mod transport;

pub use error::{Error, ErrorKind, RegistryError};
pub use reference::NameError;
pub use repo::Repo;
pub use router::Registry;
pub use settings::{Limits, Ranges, Retry, Settings};
