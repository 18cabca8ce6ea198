//! Property tests: every parser of outside input and the HTTP surface under arbitrary requests
//! (proptest), the corpus of real-world inputs, and the benches' SVG charts. Index:
//! tests/README.md.

mod corpus;
mod http;
mod parsers;
mod plots;
