//! Property tests: every parser of outside input and the HTTP surface under arbitrary requests
//! (proptest), and the corpus of real-world inputs. Index: tests/README.md.

mod corpus;
mod http;
mod parsers;
