//! The layout store through the interface the router calls.

use serde_json::json;

use super::Layout;
use crate::digest::sha256;
use crate::media::Document;
use crate::registry::repo::Repo;
use crate::registry::store::Store;

#[tokio::test]
async fn a_tag_is_never_written_before_every_blob_it_names() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("new");
    let repo = Repo::parse(&format!("oci:{}", path.display())).expect("repo");
    let store = Layout::default();
    let config = b"{}".to_vec();
    let layer = b"not really a layer".to_vec();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": crate::media::OCI_MANIFEST,
        "config": {"mediaType": crate::media::OCI_CONFIG, "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": crate::media::OCI_LAYER_GZIP, "digest": sha256(&layer), "size": layer.len()}],
    });
    let doc = Document::from_value(manifest, crate::media::OCI_MANIFEST);
    store
        .blob_put(&repo, &sha256(&config), config)
        .await
        .expect("config");
    // The layout was created, empty; the layer is missing, so the tag is refused.
    let e = store
        .manifest_put(&repo.at_tag("t"), &doc)
        .await
        .expect_err("missing layer");
    assert!(e.to_string().contains(&sha256(&layer)), "{e}");
    assert!(store.tags_list(&repo).await.expect("tags").is_empty());
    // A blob whose bytes are not its digest is not stored.
    let wrong = store
        .blob_put(&repo, &sha256(b"other"), layer.clone())
        .await;
    assert!(wrong.is_err());
    store
        .blob_put(&repo, &sha256(&layer), layer)
        .await
        .expect("layer");
    store
        .manifest_put(&repo.at_tag("t"), &doc)
        .await
        .expect("tag");
    assert_eq!(
        store.tags_list(&repo).await.expect("tags"),
        vec!["t".to_owned()]
    );
    let back = store.manifest_get(&repo.at_tag("t")).await.expect("get");
    assert_eq!(
        (back.digest, back.media_type),
        (doc.digest.clone(), doc.media_type.clone())
    );
    // Nothing temporary is left, and only blobs that hash to their names are there.
    for e in std::fs::read_dir(&path).expect("dir").flatten() {
        assert!(!e.file_name().to_string_lossy().ends_with(".tmp"));
    }
    for e in std::fs::read_dir(path.join("blobs/sha256"))
        .expect("blobs")
        .flatten()
    {
        let bytes = std::fs::read(e.path()).expect("blob");
        assert_eq!(
            sha256(&bytes),
            format!("sha256:{}", e.file_name().to_string_lossy())
        );
    }
}
