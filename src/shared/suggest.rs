//! "Did you mean" hints for misspelt names (flags, config keys, enum values).

/// The known name closest to `word` by edit distance (transpositions count once, case and
/// `-`/`_` ignored), when it is close enough to be a typo: at most a third of the word's
/// length, at least 1, at most 3 edits.
pub fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let norm = |s: &str| s.trim().to_ascii_lowercase().replace('-', "_");
    let w = norm(word);
    if w.is_empty() {
        return None;
    }
    let limit = (w.chars().count() / 3).clamp(1, 3);
    known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(&w, &norm(k)), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}
