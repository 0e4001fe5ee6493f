//! An OCI image layout directory (image-spec: `oci-layout`, `index.json`, `blobs/sha256/<hex>`)
//! as a store, after skopeo's `oci:` transport: a layout's tags are the
//! `org.opencontainers.image.ref.name` annotations of `index.json`'s entries.
//!
//! Writes are ordered so that a killed run never leaves `index.json` naming a missing blob:
//! every blob goes to a temporary file in the layout, is checked against its digest and size,
//! fsynced and renamed into `blobs/sha256/`; `index.json` is replaced the same way (temporary
//! file, fsync, rename, directory fsync), and only after every blob the tagged document names,
//! down to the layers of each child manifest, is found in the layout. One run at a time writes
//! a layout: the first write takes an exclusive lock on its `oci-layout` file (a file no writer
//! replaces) for the rest of the run, and a second run is refused.
//!
//! `dir` knows the directories, `index` reads `index.json`, `read` serves manifests and blobs,
//! `write` stores files and takes the lock, `tag` names a manifest in `index.json`, and
//! `store` is the [`crate::registry::store::Store`] made of them.

mod dir;
mod index;
mod read;
mod store;
mod tag;
mod write;

#[cfg(test)]
mod tests;

pub(crate) use dir::Layout;
