//! The repository's own rules: the architecture's layers and import rules, the docs against the
//! code (flags, families, links, the compatibility matrix, the migration tables). Index:
//! tests/README.md.

mod architecture;
mod compatibility;
mod doc_links;
mod docs;
mod migrating;
