//! The classic Prometheus text format (version 0.0.4), made from the OpenMetrics text that
//! `prometheus-client` writes (0.25 writes no other text). Tools of the classic format
//! (`promtool check metrics`, old scrapers) read a counter's OpenMetrics metadata wrong:
//! its `# HELP` and `# TYPE` name the family (`x`) while its sample is `x_total`, so the
//! sample "has no help text". [`from_openmetrics`] rewrites an exposition the way the
//! official clients write the classic format (Python's `generate_latest`, Go's `expfmt`):
//!
//! - a counter's HELP and TYPE name its `_total` sample; samples keep their names;
//! - an info metric is a gauge named `<name>_info`, a stateset a gauge, a gaugehistogram
//!   a histogram (its `_gsum` and `_gcount` gauges of their own), unknown is untyped;
//! - no `# UNIT` lines, no `# EOF`, no `_created` samples, no exemplars; a timestamp (in
//!   seconds) is written in milliseconds;
//! - HELP text is escaped as the classic format wants (`\\` and `\n`; a quote is itself),
//!   label values as both formats want (`\\`, `\"`, `\n`).
//!
//! Why a converter rather than a second encoder: the crate's encoders can only be driven by
//! the crate itself (its registry cannot be walked from outside), so encoding the classic
//! format directly would mean a second list of every metric, its type and its samples,
//! which would drift from the registry. Converting the one text the crate writes keeps a
//! single list: a metric registered once appears in both formats.

use std::fmt::Write as _;

/// The exposition `om` (OpenMetrics text) in the classic text format.
pub fn from_openmetrics(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    for family in parse(om) {
        render(&mut out, &family);
    }
    out
}

/// One metric family of the OpenMetrics text.
#[derive(Debug)]
struct Family<'a> {
    name: &'a str,
    /// The OpenMetrics type (`unknown` without a `# TYPE` line).
    kind: &'a str,
    /// Unescaped.
    help: Option<String>,
    samples: Vec<Sample<'a>>,
}

/// Label names and their unescaped values.
type Labels<'a> = Vec<(&'a str, String)>;

#[derive(Debug)]
struct Sample<'a> {
    name: &'a str,
    labels: Labels<'a>,
    value: &'a str,
    /// Seconds.
    timestamp: Option<&'a str>,
}

impl<'a> Family<'a> {
    fn new(name: &'a str) -> Self {
        Self {
            name,
            kind: "unknown",
            help: None,
            samples: Vec::new(),
        }
    }

    /// Whether a sample named `sample` is one of this family's (OpenMetrics' suffixes).
    fn holds(&self, sample: &str) -> bool {
        let Some(suffix) = sample.strip_prefix(self.name) else {
            return false;
        };
        let suffixes: &[&str] = match self.kind {
            "counter" => &["_total", "_created"],
            "info" => &["_info"],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            "gaugehistogram" => &["_bucket", "_gsum", "_gcount"],
            "summary" => &["", "_sum", "_count", "_created"],
            _ => &[""],
        };
        suffixes.contains(&suffix)
    }
}

fn parse(om: &str) -> Vec<Family<'_>> {
    let mut families: Vec<Family<'_>> = Vec::new();
    for line in om.lines() {
        if line == "# EOF" {
            break;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let (keyword, rest) = meta.split_once(' ').unwrap_or((meta, ""));
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            if name.is_empty() || !matches!(keyword, "HELP" | "TYPE" | "UNIT") {
                continue;
            }
            let at = match families.last() {
                Some(f) if f.name == name => families.len() - 1,
                _ => {
                    families.push(Family::new(name));
                    families.len() - 1
                }
            };
            let family = &mut families[at];
            match keyword {
                "HELP" => family.help = Some(unescape(text)),
                "TYPE" => family.kind = text.trim(),
                _ => {} // UNIT: the classic format has none.
            }
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(sample) = sample(line) else {
            tracing::debug!("metrics: an OpenMetrics line the classic format drops: {line:?}");
            continue;
        };
        match families.last_mut() {
            Some(f) if f.holds(sample.name) => f.samples.push(sample),
            // A sample outside its family's block (not valid OpenMetrics): untyped.
            _ => {
                let mut f = Family::new(sample.name);
                f.samples.push(sample);
                families.push(f);
            }
        }
    }
    families
}

/// `name{labels} value [timestamp] [# exemplar]`.
fn sample(line: &str) -> Option<Sample<'_>> {
    let end = line.find(['{', ' '])?;
    let name = &line[..end];
    let (labels, rest) = match line[end..].strip_prefix('{') {
        Some(after) => labels(after)?,
        None => (Vec::new(), &line[end..]),
    };
    // An exemplar follows ` # `; the classic format has none.
    let rest = rest.split(" # ").next().unwrap_or_default();
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next()?;
    let timestamp = fields.next();
    if name.is_empty() || fields.next().is_some() {
        return None;
    }
    Some(Sample {
        name,
        labels,
        value,
        timestamp,
    })
}

/// The label set after its `{`, unescaped, and what follows its `}`.
fn labels(mut rest: &str) -> Option<(Labels<'_>, &str)> {
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (name, after) = rest.split_once('=')?;
        let after = after.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut close = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    close = Some(i);
                    break;
                }
                '\\' => match chars.next()? {
                    (_, 'n') => value.push('\n'),
                    (_, c @ ('\\' | '"')) => value.push(c),
                    (_, c) => {
                        value.push('\\');
                        value.push(c);
                    }
                },
                c => value.push(c),
            }
        }
        labels.push((name.trim(), value));
        rest = after[close? + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// OpenMetrics' escapes (`\\`, `\"`, `\n`) undone; any other backslash is kept.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(c @ ('\\' | '"')) => out.push(c),
            Some(c) => {
                out.push('\\');
                out.push(c);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// HELP text in the classic format: `\\` and `\n` (a quote is itself there).
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A label value in the classic format: `\\`, `\"` and `\n`.
fn escape_label_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn render(out: &mut String, f: &Family<'_>) {
    let (name, kind) = match f.kind {
        "counter" => (format!("{}_total", f.name), "counter"),
        "info" => (format!("{}_info", f.name), "gauge"),
        "stateset" => (f.name.to_string(), "gauge"),
        "gaugehistogram" => (f.name.to_string(), "histogram"),
        "gauge" | "histogram" | "summary" => (f.name.to_string(), f.kind),
        _ => (f.name.to_string(), "untyped"),
    };
    header(out, &name, f.help.as_deref(), kind);
    // A gaugehistogram's `_gcount` and `_gsum` follow as gauges of their own (as Python's
    // client writes them).
    let mut apart: Vec<(&str, Vec<&Sample<'_>>)> = vec![("_gcount", Vec::new()), ("_gsum", Vec::new())];
    for s in &f.samples {
        let suffix = s.name.strip_prefix(f.name).unwrap_or_default();
        if suffix == "_created" {
            continue;
        }
        match apart
            .iter_mut()
            .find(|(x, _)| f.kind == "gaugehistogram" && *x == suffix)
        {
            Some((_, samples)) => samples.push(s),
            None => line(out, s),
        }
    }
    for (suffix, samples) in apart {
        if samples.is_empty() {
            continue;
        }
        header(out, &format!("{}{suffix}", f.name), f.help.as_deref(), "gauge");
        for s in samples {
            line(out, s);
        }
    }
}

fn header(out: &mut String, name: &str, help: Option<&str>, kind: &str) {
    if let Some(help) = help {
        let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    }
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn line(out: &mut String, s: &Sample<'_>) {
    out.push_str(s.name);
    if !s.labels.is_empty() {
        out.push('{');
        for (i, (name, value)) in s.labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{name}=\"{}\"", escape_label_value(value));
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(s.value);
    // OpenMetrics' timestamps are seconds, the classic format's milliseconds.
    if let Some(ms) = s
        .timestamp
        .and_then(|t| t.parse::<f64>().ok())
        .map(|t| (t * 1000.0).round())
        .filter(|ms| ms.is_finite())
    {
        let _ = write!(out, " {}", ms as i64);
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_name_their_total_sample() {
        let om = "# HELP hyperplan_placements Tasks placed on nodes\n\
                  # TYPE hyperplan_placements counter\n\
                  hyperplan_placements_total 3\n\
                  hyperplan_placements_created 1700000000.5\n\
                  # EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP hyperplan_placements_total Tasks placed on nodes\n\
             # TYPE hyperplan_placements_total counter\n\
             hyperplan_placements_total 3\n"
        );
    }

    #[test]
    fn gauges_histograms_and_units() {
        let om = "# HELP hyperplan_leader 1 on the leader\n\
                  # TYPE hyperplan_leader gauge\n\
                  hyperplan_leader 1\n\
                  # HELP hyperplan_hypernode_memory_bytes Memory\n\
                  # TYPE hyperplan_hypernode_memory_bytes gauge\n\
                  # UNIT hyperplan_hypernode_memory_bytes bytes\n\
                  hyperplan_hypernode_memory_bytes{hypernode=\"leaf-1\",tier=\"1\"} 2000000000.0\n\
                  # HELP hyperplan_tick_duration_seconds Time (system=\"tick\": the whole tick)\n\
                  # TYPE hyperplan_tick_duration_seconds histogram\n\
                  # UNIT hyperplan_tick_duration_seconds seconds\n\
                  hyperplan_tick_duration_seconds_sum{system=\"tick\"} 0.001\n\
                  hyperplan_tick_duration_seconds_count{system=\"tick\"} 1\n\
                  hyperplan_tick_duration_seconds_bucket{le=\"2e-5\",system=\"tick\"} 0\n\
                  hyperplan_tick_duration_seconds_bucket{le=\"+Inf\",system=\"tick\"} 1\n\
                  hyperplan_tick_duration_seconds_created{system=\"tick\"} 1700000000.0\n\
                  # EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP hyperplan_leader 1 on the leader\n\
             # TYPE hyperplan_leader gauge\n\
             hyperplan_leader 1\n\
             # HELP hyperplan_hypernode_memory_bytes Memory\n\
             # TYPE hyperplan_hypernode_memory_bytes gauge\n\
             hyperplan_hypernode_memory_bytes{hypernode=\"leaf-1\",tier=\"1\"} 2000000000.0\n\
             # HELP hyperplan_tick_duration_seconds Time (system=\"tick\": the whole tick)\n\
             # TYPE hyperplan_tick_duration_seconds histogram\n\
             hyperplan_tick_duration_seconds_sum{system=\"tick\"} 0.001\n\
             hyperplan_tick_duration_seconds_count{system=\"tick\"} 1\n\
             hyperplan_tick_duration_seconds_bucket{le=\"2e-5\",system=\"tick\"} 0\n\
             hyperplan_tick_duration_seconds_bucket{le=\"+Inf\",system=\"tick\"} 1\n"
        );
    }

    #[test]
    fn info_stateset_gaugehistogram_summary_and_unknown_as_the_official_clients_map_them() {
        let om = "# HELP build Build\n\
                  # TYPE build info\n\
                  build_info{version=\"1.2\"} 1\n\
                  # HELP mode Mode\n\
                  # TYPE mode stateset\n\
                  mode{mode=\"a\"} 1\n\
                  mode{mode=\"b\"} 0\n\
                  # HELP queue Queue\n\
                  # TYPE queue gaugehistogram\n\
                  queue_bucket{le=\"1.0\"} 2\n\
                  queue_bucket{le=\"+Inf\"} 3\n\
                  queue_gcount 3\n\
                  queue_gsum 4.5\n\
                  # HELP rpc RPC\n\
                  # TYPE rpc summary\n\
                  rpc{quantile=\"0.5\"} 0.2\n\
                  rpc_sum 1.0\n\
                  rpc_count 5\n\
                  rpc_created 1.0\n\
                  # HELP odd Odd\n\
                  # TYPE odd unknown\n\
                  odd 7\n\
                  loose 8\n\
                  # EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP build_info Build\n\
             # TYPE build_info gauge\n\
             build_info{version=\"1.2\"} 1\n\
             # HELP mode Mode\n\
             # TYPE mode gauge\n\
             mode{mode=\"a\"} 1\n\
             mode{mode=\"b\"} 0\n\
             # HELP queue Queue\n\
             # TYPE queue histogram\n\
             queue_bucket{le=\"1.0\"} 2\n\
             queue_bucket{le=\"+Inf\"} 3\n\
             # HELP queue_gcount Queue\n\
             # TYPE queue_gcount gauge\n\
             queue_gcount 3\n\
             # HELP queue_gsum Queue\n\
             # TYPE queue_gsum gauge\n\
             queue_gsum 4.5\n\
             # HELP rpc RPC\n\
             # TYPE rpc summary\n\
             rpc{quantile=\"0.5\"} 0.2\n\
             rpc_sum 1.0\n\
             rpc_count 5\n\
             # HELP odd Odd\n\
             # TYPE odd untyped\n\
             odd 7\n\
             # TYPE loose untyped\n\
             loose 8\n"
        );
    }

    #[test]
    fn help_and_label_values_are_escaped_for_the_classic_format() {
        // OpenMetrics escapes a quote in HELP; the classic format must not (promtool refuses
        // `\"` there), and writes backslashes and new lines as `\\` and `\n`.
        let om = "# HELP a A \\\"quoted\\\" back\\\\slash and\\nline, \"raw\" too\n\
                  # TYPE a gauge\n\
                  a{path=\"C:\\\\x\",say=\"\\\"hi\\\"\",multi=\"1\\n2\",comma=\"x,y}\",eq=\"a=b\"} 1\n\
                  # EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP a A \"quoted\" back\\\\slash and\\nline, \"raw\" too\n\
             # TYPE a gauge\n\
             a{path=\"C:\\\\x\",say=\"\\\"hi\\\"\",multi=\"1\\n2\",comma=\"x,y}\",eq=\"a=b\"} 1\n"
        );
    }

    #[test]
    fn exemplars_dropped_and_timestamps_in_milliseconds() {
        let om = "# HELP c C\n\
                  # TYPE c counter\n\
                  c_total{user=\"x # y\"} 2 # {trace_id=\"abc\"} 1.0 1700000000.0\n\
                  # HELP g G\n\
                  # TYPE g gauge\n\
                  g 1.5 1700000000.25\n\
                  g{x=\"1\"} NaN\n\
                  g{x=\"2\"} -Inf\n\
                  # EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP c_total C\n\
             # TYPE c_total counter\n\
             c_total{user=\"x # y\"} 2\n\
             # HELP g G\n\
             # TYPE g gauge\n\
             g 1.5 1700000000250\n\
             g{x=\"1\"} NaN\n\
             g{x=\"2\"} -Inf\n"
        );
    }

    #[test]
    fn empty_families_keep_their_metadata_and_nothing_follows_eof() {
        let om = "# HELP hyperplan_jobs Live jobs\n\
                  # TYPE hyperplan_jobs gauge\n\
                  # HELP hyperplan_refused_connections Refused\n\
                  # TYPE hyperplan_refused_connections counter\n\
                  # EOF\n\
                  after 1\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP hyperplan_jobs Live jobs\n\
             # TYPE hyperplan_jobs gauge\n\
             # HELP hyperplan_refused_connections_total Refused\n\
             # TYPE hyperplan_refused_connections_total counter\n"
        );
        assert_eq!(from_openmetrics(""), "");
        assert_eq!(from_openmetrics("# EOF\n"), "");
    }

    #[test]
    fn malformed_samples_are_dropped_not_passed_on() {
        let om = "# TYPE g gauge\ng{x=\"unterminated} 1\ng{x=\"1\"}\ng 1 2 3\ng 4\n# EOF\n";
        assert_eq!(from_openmetrics(om), "# TYPE g gauge\ng 4\n");
    }
}
