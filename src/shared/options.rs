//! What every component's options share: each component keeps one `XxxOptions` (clap `Args`
//! and serde `Deserialize`, every field an `Option`) in its own room, and the config root
//! flattens them into the flags and the config file. This room holds the pieces they all use:
//! the error for a bad value, the value parsers (durations, lists, booleans, paths), the
//! field-wise merge (`flag or environment` over `file`), and the list of file keys a struct
//! accepts, so the root can refuse unknown keys without `deny_unknown_fields` (which serde's
//! `flatten` does not support).

use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};

use crate::shared::error::Error;
use crate::shared::suggest::did_you_mean;

/// Field-wise precedence: the first value set wins (flags and environment over the file).
pub trait Merge {
    fn or(self, file: Self) -> Self;
}

/// Implements [`Merge`] for an options struct from its field list. The struct literal lists
/// every field, so a field added to the struct and not here is a compile error.
#[macro_export]
#[doc(hidden)]
macro_rules! merge_options {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl $crate::shared::options::Merge for $ty {
            fn or(self, file: Self) -> Self {
                $ty { $($field: self.$field.or(file.$field)),* }
            }
        }
    };
}

/// A byte count (`16384`, or a quantity such as `16Ki`) from `min` to `max`, or `default`
/// when not given.
pub fn bytes(
    option: &'static str,
    v: Option<String>,
    default: usize,
    (min, max): (u64, u64),
) -> Result<usize, Error> {
    let Some(v) = v else {
        return Ok(default);
    };
    let n = crate::shared::quantity::parse_quantity(v.trim()).map_err(|e| {
        invalid(
            option,
            &v,
            format!("{e} (expected bytes, e.g. 16384 or 16Ki)"),
        )
    })?;
    if n.fract() != 0.0 || n < min as f64 || n > max as f64 {
        return Err(invalid(
            option,
            &v,
            format!("must be a whole number of bytes from {min} to {max}"),
        ));
    }
    usize::try_from(n as u64).map_err(|_| invalid(option, &v, "too large for this platform"))
}

/// The error for a bad value of `option`.
pub fn invalid(option: &'static str, value: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        option,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// A value that, when given, must not be blank; trimmed.
pub fn non_empty(option: &'static str, v: Option<String>) -> Result<Option<String>, Error> {
    match v {
        Some(s) if s.trim().is_empty() => Err(invalid(option, &s, "must not be empty")),
        other => Ok(other.map(|s| s.trim().to_string())),
    }
}

/// A path that, when given, must not be empty.
pub fn path(option: &'static str, p: Option<PathBuf>) -> Result<Option<PathBuf>, Error> {
    match p {
        Some(p) if p.as_os_str().is_empty() => Err(invalid(option, "", "empty path")),
        p => Ok(p),
    }
}

/// Parses a duration like `15s`, `1m30s`, `500ms`, bounded to `[min, max]`.
pub fn duration(
    option: &'static str,
    value: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, Error> {
    let d = humantime::parse_duration(value.trim())
        .map_err(|e| invalid(option, value, format!("{e} (expected e.g. 15s, 1m, 500ms)")))?;
    if d < min || d > max {
        return Err(invalid(
            option,
            value,
            format!(
                "must be between {} and {}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(d)
}

/// A comma-separated list, items trimmed, empty items dropped.
pub fn csv(s: &str) -> Vec<String> {
    s.split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

/// A namespace name: a DNS label (lower-case letters, digits, `-`; at most 63 characters).
pub fn is_namespace_name(n: &str) -> bool {
    n.len() <= 63
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `; did you mean `x`?` or nothing.
pub fn hint<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(word, known)
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_default()
}

/// A boolean as environment variables spell it: true/false, 1/0, yes/no, on/off.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        _ => Err(format!("expected true or false, got {s:?}")),
    }
}

/// A whole number in the config file (`shard: 2`), kept as the text a flag would give, so
/// that flag and file go through one parser and one error message. The file refuses anything
/// but a `u32`, with serde's own message.
pub fn u32_as_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<u32>::deserialize(d)?.map(|n| n.to_string()))
}

/// The keys a derived `Deserialize` struct accepts (serde's `FIELDS`, in declaration order;
/// skipped fields are not among them).
pub fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    /// A deserializer that only records the field list serde hands to `deserialize_struct`.
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("fields recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    fields
}

/// Refuses a top-level key not in `known` with serde's own `unknown field` message (the one
/// `deny_unknown_fields` gives, position included), as if the map were the struct `name`.
pub fn check_keys<'de, D: Deserializer<'de>>(
    d: D,
    name: &'static str,
    known: &'static [&'static str],
) -> Result<(), D::Error> {
    /// The map: every key through [`Key`], every value skipped.
    struct Keys(&'static str, &'static [&'static str]);
    impl<'de> Visitor<'de> for Keys {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "struct {}", self.0)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while map.next_key_seed(Key(self.1))?.is_some() {
                map.next_value::<de::IgnoredAny>()?;
            }
            Ok(())
        }
    }
    /// One key, refused while it is read (as serde's derive does), so the parser's error
    /// carries the key's position.
    #[derive(Clone, Copy)]
    struct Key(&'static [&'static str]);
    impl<'de> de::DeserializeSeed<'de> for Key {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_identifier(self)
        }
    }
    impl<'de> Visitor<'de> for Key {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("field identifier")
        }
        fn visit_str<E: de::Error>(self, key: &str) -> Result<(), E> {
            if self.0.contains(&key) {
                Ok(())
            } else {
                Err(E::unknown_field(key, self.0))
            }
        }
    }
    d.deserialize_struct(name, known, Keys(name, known))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Two {
        a: Option<u32>,
        #[serde(skip)]
        hidden: Option<u32>,
        b: Option<String>,
    }

    #[test]
    fn field_names_are_serde_fields_in_order() {
        assert_eq!(field_names::<Two>(), ["a", "b"]);
    }

    /// What `deny_unknown_fields` would say, for comparison.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Denying {
        a: Option<u32>,
        b: Option<String>,
    }

    #[test]
    fn unknown_keys_read_as_deny_unknown_fields_says() {
        for text in [
            "a: 1\nc: 2\n",
            "b: x\n1: 2\n",
            "a: 1\nb: y\nlisten: 3\n",
            "[1]",
            "7",
            "# only a comment\n",
            "~\n",
            "---\na: 1\n",
            "a: 1\n---\nb: x\n",
            "{a: 1, c: 2}",
        ] {
            let derived = serde_yaml_ng::from_str::<Denying>(text)
                .err()
                .map(|e| e.to_string());
            let de = serde_yaml_ng::Deserializer::from_str(text);
            let ours = check_keys(de, "Denying", &["a", "b"])
                .err()
                .map(|e| e.to_string());
            assert_eq!(ours, derived, "{text:?}");
        }
    }

    #[test]
    fn unknown_keys_get_serde_message() {
        const KNOWN: &[&str] = &["a", "b"];
        let de = serde_yaml_ng::Deserializer::from_str("a: 1\nc: 2\n");
        let e = check_keys(de, "Two", KNOWN).unwrap_err().to_string();
        assert!(
            e.starts_with("unknown field `c`, expected `a` or `b`"),
            "{e}"
        );
        let de = serde_yaml_ng::Deserializer::from_str("a: 1\nb: x\n");
        assert!(check_keys(de, "Two", KNOWN).is_ok());
        let de = serde_yaml_ng::Deserializer::from_str("[1]");
        let e = check_keys(de, "Two", KNOWN).unwrap_err().to_string();
        assert!(e.contains("expected struct Two"), "{e}");
    }

    #[test]
    fn booleans_as_environment_spells_them() {
        assert_eq!(parse_bool("TRUE"), Ok(true));
        assert_eq!(parse_bool("off"), Ok(false));
        assert!(parse_bool("maybe").is_err());
    }
}
