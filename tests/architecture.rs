//! ARCHITECTURE.md names every folder of `src/`, so the picture a newcomer reads cannot fall
//! behind the tree: a folder added, moved or renamed without the document fails here.

use std::path::{Path, PathBuf};

fn folders(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read a src folder") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            out.push(p.clone());
            folders(&p, out);
        }
    }
}

#[test]
fn every_src_folder_is_in_architecture_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let mut all = Vec::new();
    folders(&root.join("src"), &mut all);
    let missing: Vec<String> = all
        .iter()
        .map(|p| format!("{}/", p.strip_prefix(root).unwrap_or(p).display()))
        .filter(|name| !doc.contains(name.as_str()))
        .collect();
    assert!(
        !all.is_empty() && missing.is_empty(),
        "ARCHITECTURE.md does not name these folders of src/: {missing:?}"
    );
}
