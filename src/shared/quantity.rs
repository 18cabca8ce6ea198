//! Kubernetes resource quantities (`250m`, `16Gi`, `1e3`) as plain numbers in base units.

/// Parses a Kubernetes quantity (`487558164n`, `250m`, `2`, `732212Ki`, `16Gi`, `1e3`, `1.5`)
/// into base units: cores for CPU, bytes for memory.
///
/// Accepts an optional sign, a decimal number (`1`, `1.5`, `.5`, `1.`) and one suffix: decimal SI
/// (`n u m k M G T P E`), binary SI (`Ki Mi Gi Ti Pi Ei`) or a decimal exponent (`e3`, `E-2`).
/// Decimal forms are parsed as one correctly rounded decimal, so `487558164n` is exactly the
/// `f64` nearest 0.487558164.
pub fn parse_quantity(s: &str) -> Result<f64, String> {
    let bad = |why: &str| format!("invalid quantity {s:?}: {why}");
    let split = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(s.len(), |(i, _)| i);
    let (number, suffix) = s.split_at(split);
    let unsigned = number.strip_prefix(['+', '-']).unwrap_or(number);
    let digits = unsigned.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(bad("no digits"));
    }
    if digits + 1 < unsigned.len() {
        return Err(bad("more than one decimal point"));
    }
    let binary_power = match suffix {
        "Ki" => Some(1),
        "Mi" => Some(2),
        "Gi" => Some(3),
        "Ti" => Some(4),
        "Pi" => Some(5),
        "Ei" => Some(6),
        _ => None,
    };
    let value = if let Some(p) = binary_power {
        let mantissa: f64 = number.parse().map_err(|_| bad("not a number"))?;
        mantissa * 2f64.powi(10 * p)
    } else {
        let exp10: i64 = match suffix {
            "n" => -9,
            "u" => -6,
            "m" => -3,
            "" => 0,
            "k" => 3,
            "M" => 6,
            "G" => 9,
            "T" => 12,
            "P" => 15,
            "E" => 18,
            other => {
                let exp = other
                    .strip_prefix(['e', 'E'])
                    .filter(|e| {
                        let d = e.strip_prefix(['+', '-']).unwrap_or(e);
                        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
                    })
                    .ok_or_else(|| bad(&format!("unknown suffix {other:?}")))?;
                exp.parse().map_err(|_| bad("exponent out of range"))?
            }
        };
        format!("{number}e{exp10}")
            .parse::<f64>()
            .map_err(|_| bad("not a number"))?
    };
    if !value.is_finite() || value.abs() > MAX_MAGNITUDE {
        return Err(bad(
            "out of range (Kubernetes quantities are at most 2^63-1)",
        ));
    }
    Ok(value)
}

/// Kubernetes: "no quantity may represent a number greater than 2^63-1 in magnitude" (an API
/// server caps larger ones), so a larger one is not from an API server we trust; refusing it
/// also keeps sums over many objects finite. (2^63 itself, the nearest `f64`, is let through.)
pub const MAX_MAGNITUDE: f64 = 9_223_372_036_854_775_808.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_every_form() {
        let cases: &[(&str, f64)] = &[
            ("487558164n", 0.487558164),
            ("250m", 0.25),
            ("2", 2.0),
            ("1500u", 0.0015),
            ("732212Ki", 732_212.0 * 1024.0),
            ("16Gi", 16.0 * 1024.0 * 1024.0 * 1024.0),
            ("1Mi", 1_048_576.0),
            ("1Ti", 1_099_511_627_776.0),
            ("1Pi", 1_125_899_906_842_624.0),
            ("1Ei", 1_152_921_504_606_846_976.0),
            ("0.5Gi", 536_870_912.0),
            ("1e3", 1000.0),
            ("1E3", 1000.0),
            ("1e-3", 0.001),
            ("15e+2", 1500.0),
            ("1.5", 1.5),
            (".5", 0.5),
            ("5.", 5.0),
            ("+2", 2.0),
            ("-2", -2.0),
            ("0", 0.0),
            ("100k", 100_000.0),
            ("129M", 129e6),
            ("8G", 8e9),
            ("2T", 2e12),
            ("3P", 3e15),
            ("1E", 1e18),
            ("0.1", 0.1),
            ("0004Ki", 4096.0),
        ];
        for &(s, want) in cases {
            assert_eq!(parse_quantity(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn decimal_forms_are_rounded_once() {
        // Scaling by an inexact power of ten would round twice: 9 * 1e-3 is 0.009000000000000001.
        assert_ne!(9.0 * 1e-3, 0.009);
        assert_eq!(parse_quantity("9m"), Ok(0.009));
        assert_eq!(parse_quantity("15n"), Ok(1.5e-8));
        assert_eq!(parse_quantity("100000000n"), Ok(0.1));
        assert_eq!(parse_quantity("100m"), Ok(0.1));
        assert_eq!(parse_quantity("1e-1"), Ok(0.1));
    }

    #[test]
    fn malformed_quantities_are_errors() {
        for s in [
            "",
            "m",
            "Ki",
            "abc",
            "1.2.3",
            "1x",
            "1 Ki",
            " 1",
            "1 ",
            "1ki",
            "1KI",
            "1e",
            "1e+",
            "1e1.5",
            "1ee3",
            "--1",
            "+",
            "1-",
            "1Kib",
            "1mm",
            "1e99999999999",
            "1e400",
            "1e308",
            "16Ei",
            "-10E",
            "NaN",
            "inf",
            "0x10",
        ] {
            let r = parse_quantity(s);
            assert!(r.is_err(), "{s:?} parsed as {r:?}");
        }
        assert!(parse_quantity("1x").unwrap_err().contains("\"1x\""));
    }
}
