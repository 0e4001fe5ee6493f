//! The record a patched image carries at the registry: per patched platform manifest, an in-toto
//! Statement v1 with a SLSA provenance v1 predicate ([`statement`]), attached as an OCI 1.1
//! artifact whose `subject` is that manifest ([`artifact`]). Where the registry does not process
//! `subject` (no `OCI-Subject` answer, as distribution 2.8), the referrers tag schema
//! (`sha256-<hex>`, an OCI index of referrer descriptors) is kept instead, as the distribution
//! spec says. Also here: finding the source image's own signatures ([`signatures`], which cover
//! the original digest, never the patched one) and `verify`'s checks of a statement against the
//! image it describes ([`checks`]).

pub mod artifact;
pub mod checks;
pub mod error;
pub mod signatures;
pub mod statement;
#[cfg(test)]
mod tests;

pub use artifact::{attach, copy_attached, referrers};
pub use checks::{check, Checked};
pub use error::Error;
pub use signatures::{digest_pairs, signatures};
pub use statement::{
    build, builder_id, fill_record, record_of, referrers_tag, write_statements, Attached,
    Attachment, ARTIFACT_TYPE, BUILD_TYPE, EMPTY_DIGEST, EMPTY_MEDIA_TYPE, ORIGINAL_ANNOTATION,
    PREDICATE_ANNOTATION, PREDICATE_TYPE, STATEMENT_TYPE,
};
