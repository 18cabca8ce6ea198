//! Property tests: every parser of outside input and the HTTP surface under arbitrary requests
//! (proptest). Index: tests/README.md.

mod http;
mod parsers;
