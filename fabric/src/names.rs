//! Reading names out of NodeDescriptions: host names from CA descriptions, switch names
//! from switch descriptions, and HyperNode names that Kubernetes accepts.
//!
//! NodeDescriptions are free text. Hosts set theirs to `<hostname> <device>` (`gpu017
//! mlx5_0`, `c412-603 HCA-1`); NVIDIA switches to `MF0;<hostname>:<model>/U1` (director
//! ASICs: `MF0;<hostname>:<model>/L01/U1`); Voltaire to `Voltaire 4036 # <hostname>`.
//! Firmware defaults (`MT4123 ConnectX6 Mellanox Technologies`, `SwitchIB Mellanox
//! Technologies`) name nothing and are ignored.

/// A single token that can be a host name: letters, digits, `-`, `_`, `.`, at least one letter.
pub(crate) fn hostlike(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().any(|b| b.is_ascii_alphabetic())
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "localhost" | "switch" | "null" | "none" | "unknown"
        )
}

/// Descriptions firmware sets by default, which name a device model, not a machine.
fn generic(desc: &str) -> bool {
    let lower = desc.to_ascii_lowercase();
    let first = lower.split_whitespace().next().unwrap_or("");
    let model_number = first
        .strip_prefix("mt")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    model_number
        || lower.contains("mellanox technologies")
        || lower.contains("nvidia technologies")
        || lower.contains("aggregation node")
        || lower.contains("connectx")
        || lower.contains("infinihost")
}

/// The host a CA's description names (`"gpu017 mlx5_0"` → `gpu017`), if any.
pub fn host_from_description(desc: &str) -> Option<String> {
    let desc = desc.trim();
    if generic(desc) {
        return None;
    }
    let first = desc.split_whitespace().next()?;
    hostlike(first).then(|| first.to_string())
}

/// The switch (or chassis) a switch's description names, if any:
/// `MF0;A09-P1-IBLEAF-04-04:MQM9701/U1` → `A09-P1-IBLEAF-04-04`,
/// `Voltaire 4036 # hoibp0013` → `hoibp0013`, `ib-i1l1s01` → itself.
pub fn switch_from_description(desc: &str) -> Option<String> {
    let desc = desc.trim();
    if let Some(rest) = desc.strip_prefix("MF0;")
        && let Some((host, _model)) = rest.split_once(':')
        && hostlike(host.trim())
    {
        return Some(host.trim().to_string());
    }
    if let Some((_, after)) = desc.rsplit_once('#') {
        let after = after.trim();
        if hostlike(after) {
            return Some(after.to_string());
        }
    }
    (hostlike(desc) && !generic(desc)).then(|| desc.to_string())
}

/// The chassis an ASIC of a director switch belongs to, from `MF0;<chassis>:<model>/<slot>/U1`
/// (a slot such as `L01` or `S03` between the model and the unit).
pub fn director_chassis(desc: &str) -> Option<String> {
    let rest = desc.trim().strip_prefix("MF0;")?;
    let (host, model) = rest.split_once(':')?;
    (model.matches('/').count() >= 2 && hostlike(host.trim())).then(|| host.trim().to_string())
}

/// A Kubernetes object name (RFC 1123 subdomain) from free text: lower case, anything but
/// letters, digits, `-` and `.` becomes `-`, no leading or trailing `-`/`.`.
pub fn k8s_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while out.ends_with(['-', '.']) {
        out.pop();
    }
    let start = out.len() - out.trim_start_matches(['-', '.']).len();
    out.drain(..start);
    out.truncate(253);
    out
}

/// The name of tier `tier` (1-based): `leaf`, `spine`, `core`, then `tier4`, `tier5`, ….
pub fn tier_name(tier: u32) -> String {
    match tier {
        1 => "leaf".to_string(),
        2 => "spine".to_string(),
        3 => "core".to_string(),
        t => format!("tier{t}"),
    }
}

/// Sort key that orders `gpu2` before `gpu10`: (prefix, number, whole name).
pub fn natural_key(name: &str) -> (&str, u64, &str) {
    let prefix_len = name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let digits = &name[prefix_len..];
    let number = if digits.len() <= 18 {
        digits.parse().unwrap_or(0)
    } else {
        u64::MAX
    };
    (&name[..prefix_len], number, name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn hosts_from_descriptions() {
        assert_eq!(host_from_description("gpu017 mlx5_0").as_deref(), Some("gpu017"));
        assert_eq!(host_from_description("c412-603 HCA-1").as_deref(), Some("c412-603"));
        assert_eq!(host_from_description("  r-ufm96 HCA-1 ").as_deref(), Some("r-ufm96"));
        assert_eq!(host_from_description("MT4123 ConnectX6 Mellanox Technologies"), None);
        assert_eq!(host_from_description("MT4129 ConnectX7   Mellanox Technologies"), None);
        assert_eq!(host_from_description("Mellanox Technologies Aggregation Node"), None);
        assert_eq!(host_from_description(""), None);
        assert_eq!(host_from_description("localhost HCA-1"), None);
    }

    #[test]
    fn switches_from_descriptions() {
        let s = |d: &str| switch_from_description(d);
        assert_eq!(
            s("MF0;A09-P1-IBLEAF-04-04:MQM9701/U1").as_deref(),
            Some("A09-P1-IBLEAF-04-04")
        );
        assert_eq!(s("MF0;ib-core:SX6536/L01/U1").as_deref(), Some("ib-core"));
        assert_eq!(s("Voltaire 4036 # hoibp0013").as_deref(), Some("hoibp0013"));
        assert_eq!(s("Voltaire 4036 # 4036-8C5C").as_deref(), Some("4036-8C5C"));
        assert_eq!(s(" 5FB0406-spine-IB02 ").as_deref(), Some("5FB0406-spine-IB02"));
        assert_eq!(s("Voltaire 4036 - 36 QDR ports switch"), None);
        assert_eq!(s("Infiniscale-IV Mellanox Technologies"), None);
        assert_eq!(s("Sun DCS 36 QDR switch localhost"), None);
        assert_eq!(s("ISR9024 Voltaire"), None);
    }

    #[test]
    fn director_chassis_needs_a_slot() {
        assert_eq!(
            director_chassis("MF0;ib-core:SX6536/L01/U1").as_deref(),
            Some("ib-core")
        );
        assert_eq!(director_chassis("MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"), None);
    }

    #[test]
    fn k8s_names() {
        assert_eq!(k8s_name("leaf-A09-P1-IBLEAF-04"), "leaf-a09-p1-ibleaf-04");
        assert_eq!(k8s_name("spine-ib_core#1-"), "spine-ib-core-1");
        assert_eq!(k8s_name("--x--"), "x");
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["n10", "n2", "m1", "n1"];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(v, ["m1", "n1", "n2", "n10"]);
    }
}
