//! GPU memory sizes as a manifest writes them (`gpu_memory = "12GiB"`), and as colloc
//! prints them back.

/// Bytes in a MiB.
pub const MIB: u64 = 1024 * 1024;

/// Parse a memory size: a number (decimals allowed) and a unit. `KiB`, `MiB`, `GiB`,
/// `TiB` and the bare `K`, `M`, `G`, `T` (as Slurm's `--mem`) are powers of 1024; `KB`,
/// `MB`, `GB`, `TB` powers of 1000; `B` bytes. Case does not matter. The result is in
/// bytes, at least 1 MiB and at most 1 PiB (a typo, not a GPU).
///
/// # Errors
/// What is wrong and what is valid, in one line.
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let valid = "a size such as \"12GiB\", \"800MiB\", \"1.5G\" or \"16GB\"";
    let value: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .ok_or_else(|| format!("gpu_memory {text:?} is not {valid}"))?;
    let scale: f64 = match unit.to_ascii_lowercase().as_str() {
        "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => MIB as f64,
        "g" | "gib" => (1u64 << 30) as f64,
        "t" | "tib" => (1u64 << 40) as f64,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "" => return Err(format!("gpu_memory {text:?} has no unit; write {valid}")),
        _ => {
            return Err(format!(
                "gpu_memory {text:?}: unknown unit {unit:?}; write {valid}"
            ))
        }
    };
    let bytes = value * scale;
    if bytes < MIB as f64 {
        return Err(format!("gpu_memory {text:?} is below 1 MiB; write {valid}"));
    }
    if bytes > (1u64 << 50) as f64 {
        return Err(format!(
            "gpu_memory {text:?} is more than any GPU has (1 PiB)"
        ));
    }
    Ok(bytes.round() as u64)
}

/// A size for people: `12.0 GiB`, `800 MiB`.
pub fn show(bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    if gib >= 1.0 {
        format!("{gib:.1} GiB")
    } else {
        format!("{} MiB", bytes.div_ceil(MIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("12GiB"), Ok(12 << 30));
        assert_eq!(parse("12G"), Ok(12 << 30));
        assert_eq!(parse("800MiB"), Ok(800 * MIB));
        assert_eq!(parse(" 800 mib "), Ok(800 * MIB));
        assert_eq!(parse("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse("16GB"), Ok(16_000_000_000));
        assert_eq!(parse("2048KiB"), Ok(2 * MIB));
        assert_eq!(parse("1T"), Ok(1 << 40));
    }

    #[test]
    fn refusals_say_what_is_valid() {
        for bad in [
            "",
            "12",
            "GiB",
            "-1GiB",
            "0GiB",
            "12 parsecs",
            "1e3GiB",
            "1.2.3G",
            "nanGiB",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("gpu_memory"), "{bad}: {e}");
            assert!(e.contains("12GiB") || e.contains("PiB"), "{bad}: {e}");
        }
        assert!(parse("100KiB").unwrap_err().contains("below 1 MiB"));
        assert!(parse("2000TiB").unwrap_err().contains("1 PiB"));
    }

    #[test]
    fn shown() {
        assert_eq!(show(12 << 30), "12.0 GiB");
        assert_eq!(show(800 * MIB), "800 MiB");
        assert_eq!(show(19968 * MIB), "19.5 GiB");
    }
}
