//! The digest map: the record the release pipeline keeps of what each tag pointed to before and
//! after ([`schema`]: its field names are a contract), merged run after run ([`merge`]) and kept
//! current on disk while a run moves tags ([`recorder`]). A leaf: the planner, the pusher and
//! provenance fill its records; it depends on none of them.

pub mod error;
pub mod join;
pub mod merge;
pub mod recorder;
pub mod schema;
#[cfg(test)]
mod tests;
mod text;

pub use error::Error;
pub use join::{join, Joined};
pub use merge::merge;
pub use recorder::Recorder;
pub use schema::{
    split_tagged, AddedLayer, CompanionRecord, DigestMap, ImageRecord, PatchLayer, PatchRecord,
    PlatformRecord, ProvenanceRecord, SignatureRecord,
};
