//! A typed, read-only view of a manifest or an index, parsed once from a [`Document`]'s JSON:
//! a manifest's config and layer descriptors, an index's children with their platform and
//! whether each is an attestation. Edits never go through it: they are JSON-value edits of the
//! document (`rewrite.rs`), so every field this view does not name keeps its bytes' meaning.

use serde_json::Value;

use crate::media::{self, Descriptor, Document, Error, Family, Kind};

/// An image manifest's config and layers, in order.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub family: Family,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

impl Manifest {
    /// Reads an image manifest; `what` names it in errors (`REPO@DIGEST`).
    pub fn parse(doc: &Document, what: &str) -> Result<Self, Error> {
        let family = match doc.kind() {
            Some(Kind::Manifest(f)) => f,
            _ => {
                return Err(Error::invalid(format!(
                    "{what} is {:?}, not an image manifest",
                    doc.media_type
                )))
            }
        };
        let config = Descriptor::from_json(
            doc.json.get("config").unwrap_or(&Value::Null),
            &format!("manifest {what} config"),
        )?;
        let layers = doc
            .json
            .get("layers")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::invalid(format!("manifest {what} has no layers list")))?
            .iter()
            .enumerate()
            .map(|(i, l)| Descriptor::from_json(l, &format!("manifest {what} layers[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(Manifest {
            family,
            config,
            layers,
        })
    }

    /// The config and every layer: what must exist beside the manifest.
    pub fn blobs(&self) -> impl Iterator<Item = &Descriptor> {
        std::iter::once(&self.config).chain(&self.layers)
    }
}

/// One child of an index.
#[derive(Debug, Clone)]
pub struct Child {
    pub descriptor: Descriptor,
    /// `os/arch[/variant]`, or `manifests[i]` for a child with no platform.
    pub platform: String,
    /// A buildx provenance/SBOM manifest, which describes the unpatched image.
    pub attestation: bool,
}

/// An index's children, in order.
#[derive(Debug, Clone)]
pub struct Index {
    pub family: Family,
    pub children: Vec<Child>,
}

impl Index {
    /// Reads an index, refusing more children than any multi-arch image has (before any of
    /// them is fetched) and a child without a valid descriptor.
    pub fn parse(doc: &Document, what: &str) -> Result<Self, Error> {
        let family = match doc.kind() {
            Some(Kind::Index(f)) => f,
            _ => {
                return Err(Error::invalid(format!(
                    "{what} is {:?}, not an index",
                    doc.media_type
                )))
            }
        };
        media::check_index_children(doc, what)?;
        let children = doc
            .json
            .get("manifests")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, entry)| {
                Ok(Child {
                    descriptor: Descriptor::from_json(
                        entry,
                        &format!("index {what} manifests[{i}]"),
                    )?,
                    platform: media::platform_of(entry)
                        .unwrap_or_else(|| format!("manifests[{i}]")),
                    attestation: media::is_attestation(entry),
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(Index { family, children })
    }

    /// The children that are platforms (attestations left out).
    pub fn platforms(&self) -> impl Iterator<Item = &Child> {
        self.children.iter().filter(|c| !c.attestation)
    }
}

/// What a document at a tag is.
#[derive(Debug, Clone)]
pub enum Top {
    Index(Index),
    Manifest(Manifest),
}

impl Top {
    /// Reads either kind; anything else is an error naming its media type.
    pub fn parse(doc: &Document, what: &str) -> Result<Self, Error> {
        match doc.kind() {
            Some(Kind::Index(_)) => Index::parse(doc, what).map(Top::Index),
            Some(Kind::Manifest(_)) => Manifest::parse(doc, what).map(Top::Manifest),
            None => Err(Error::invalid(format!(
                "{what} has media type {:?}, which is neither a manifest nor an index",
                doc.media_type
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(json: &str) -> Document {
        Document::parse(json.as_bytes().to_vec(), "test").expect("parses")
    }

    #[test]
    fn manifest_and_index_views() {
        let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let m = doc(&format!(
            r#"{{"schemaVersion":2,"mediaType":"{}","config":{{"mediaType":"c","digest":"{}","size":2}},"layers":[{{"mediaType":"{}","digest":"{}","size":3}}],"x-extra":1}}"#,
            media::OCI_MANIFEST,
            d('a'),
            media::OCI_LAYER_GZIP,
            d('b')
        ));
        let v = Manifest::parse(&m, "m").expect("manifest");
        assert_eq!(v.family, Family::Oci);
        assert_eq!(v.blobs().count(), 2);
        assert_eq!(v.layers[0].digest, d('b'));
        let i = doc(&format!(
            r#"{{"schemaVersion":2,"mediaType":"{}","manifests":[{{"mediaType":"{}","digest":"{}","size":1,"platform":{{"os":"linux","architecture":"arm64","variant":"v8"}}}},{{"mediaType":"{}","digest":"{}","size":1,"platform":{{"os":"unknown","architecture":"unknown"}}}}]}}"#,
            media::OCI_INDEX,
            media::OCI_MANIFEST,
            d('c'),
            media::OCI_MANIFEST,
            d('e')
        ));
        let v = Index::parse(&i, "i").expect("index");
        assert_eq!(v.children.len(), 2);
        let p: Vec<&str> = v.platforms().map(|c| c.platform.as_str()).collect();
        assert_eq!(p, ["linux/arm64/v8"]);
        assert!(matches!(Top::parse(&i, "i"), Ok(Top::Index(_))));
        assert!(Manifest::parse(&i, "i").is_err());
    }
}
