//! Just enough of the Prometheus text exposition format to read the API server's admission
//! webhook latencies from its `/metrics`.
//!
//! The API server exports `apiserver_admission_webhook_admission_duration_seconds`, a histogram
//! with labels `name` (the webhook), `type` (`admit` or `validate`), `operation` and `rejected`
//! (`k8s.io/apiserver/pkg/admission/metrics/metrics.go`). Its buckets stopped at 2.5 s in older
//! releases (10 and 25 were added later), so a 30-second webhook lands in `+Inf` there; the mean
//! over an interval, the change in `_sum` over the change in `_count`, is exact whatever the
//! buckets. The agent reads `/metrics` twice, [`webhook_admission_totals`] reduces each reading
//! to per-webhook totals of pod-relevant `CREATE` calls, and [`mean_latency`] takes the
//! difference.
//!
//! The parser takes one line at a time and skips what it cannot read: comments, `# HELP` and
//! `# TYPE`, blank lines, malformed samples. It handles escaped label values (`\\`, `\"`, `\n`),
//! trailing commas, timestamps and OpenMetrics exemplars after the value, and never panics.

use std::collections::BTreeMap;

/// The histogram of admission webhook latency, seconds.
pub const WEBHOOK_DURATION: &str = "apiserver_admission_webhook_admission_duration_seconds";

/// One sample line: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A cursor over one line.
struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.rest.chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.rest = &self.rest[c.len_utf8()..];
        Some(c)
    }

    fn skip_blanks(&mut self) {
        self.rest = self.rest.trim_start_matches([' ', '\t']);
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*` (metric names) or, without `:`, label names.
    fn name(&mut self, colons: bool) -> Option<&'a str> {
        let ok_first = |c: char| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':');
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':');
        if !self.peek().is_some_and(ok_first) {
            return None;
        }
        let end = self.rest.find(|c: char| !ok(c)).unwrap_or(self.rest.len());
        let (name, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(name)
    }

    /// A double-quoted label value with `\\`, `\"` and `\n` escapes.
    fn quoted(&mut self) -> Option<String> {
        if !self.eat('"') {
            return None;
        }
        let mut out = String::new();
        loop {
            match self.bump()? {
                '"' => return Some(out),
                '\\' => match self.bump()? {
                    'n' => out.push('\n'),
                    c => out.push(c), // `\\`, `\"`; anything else keeps the character
                },
                c => out.push(c),
            }
        }
    }

    /// `{name="value",...}`, trailing comma allowed.
    fn labels(&mut self) -> Option<BTreeMap<String, String>> {
        let mut labels = BTreeMap::new();
        if !self.eat('{') {
            return Some(labels);
        }
        loop {
            self.skip_blanks();
            if self.eat('}') {
                return Some(labels);
            }
            let name = self.name(false)?;
            self.skip_blanks();
            if !self.eat('=') {
                return None;
            }
            self.skip_blanks();
            let value = self.quoted()?;
            labels.insert(name.to_string(), value);
            self.skip_blanks();
            if !self.eat(',') {
                self.skip_blanks();
                return self.eat('}').then_some(labels);
            }
        }
    }

    /// The next blank-separated token.
    fn token(&mut self) -> &'a str {
        self.skip_blanks();
        let end = self.rest.find([' ', '\t']).unwrap_or(self.rest.len());
        let (token, rest) = self.rest.split_at(end);
        self.rest = rest;
        token
    }
}

/// A sample value: a float, `+Inf`, `-Inf` or `NaN`.
fn parse_value(token: &str) -> Option<f64> {
    match token {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        t => t.parse::<f64>().ok(),
    }
}

/// Parses one line; `None` for comments, blank lines and anything malformed. Whatever follows
/// the value (a timestamp, an exemplar) is ignored.
pub fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim_end_matches(['\r', '\n']);
    let mut c = Cursor { rest: line };
    c.skip_blanks();
    if c.peek() == Some('#') {
        return None;
    }
    let name = c.name(true)?;
    c.skip_blanks();
    let labels = c.labels()?;
    let value = parse_value(c.token())?;
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Per webhook name: the summed `_sum` (seconds) and `_count` of
/// `apiserver_admission_webhook_admission_duration_seconds` over its samples with
/// `operation="CREATE"` (both `type`s, rejected or not). Samples without a `name` label or with
/// a value that is not a finite number are skipped.
pub fn webhook_admission_totals(text: &str) -> BTreeMap<String, (f64, f64)> {
    let sum_name = format!("{WEBHOOK_DURATION}_sum");
    let count_name = format!("{WEBHOOK_DURATION}_count");
    let mut totals: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for sample in text.lines().filter_map(parse_line) {
        let is_sum = sample.name == sum_name;
        if !(is_sum || sample.name == count_name)
            || sample.labels.get("operation").map(String::as_str) != Some("CREATE")
            || !sample.value.is_finite()
        {
            continue;
        }
        let Some(webhook) = sample.labels.get("name") else {
            continue;
        };
        let entry = totals.entry(webhook.clone()).or_insert((0.0, 0.0));
        if is_sum {
            entry.0 += sample.value;
        } else {
            entry.1 += sample.value;
        }
    }
    totals
}

/// Mean latency per webhook between two readings, seconds: Δsum / Δcount for the webhooks
/// called in between (Δcount > 0). A webhook missing from `before` counts from zero (its
/// series appears with its first call). A counter that went down (the API server restarted,
/// or the two readings came from different API server instances behind a load balancer) gives
/// no value.
pub fn mean_latency(
    before: &BTreeMap<String, (f64, f64)>,
    after: &BTreeMap<String, (f64, f64)>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(name, (sum, count))| {
            let (sum0, count0) = before.get(name).copied().unwrap_or((0.0, 0.0));
            let (d_sum, d_count) = (sum - sum0, count - count0);
            (d_count > 0.0 && d_sum >= 0.0 && d_sum.is_finite()).then(|| (name.clone(), d_sum / d_count))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = r#"# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="slow-injector.example.com",operation="CREATE",rejected="false",type="admit",le="0.005"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="slow-injector.example.com",operation="CREATE",rejected="false",type="admit",le="2.5"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="slow-injector.example.com",operation="CREATE",rejected="false",type="admit",le="+Inf"} 12
apiserver_admission_webhook_admission_duration_seconds_sum{name="slow-injector.example.com",operation="CREATE",rejected="false",type="admit"} 354.2
apiserver_admission_webhook_admission_duration_seconds_count{name="slow-injector.example.com",operation="CREATE",rejected="false",type="admit"} 12
apiserver_admission_webhook_admission_duration_seconds_sum{name="slow-injector.example.com",operation="CREATE",rejected="true",type="admit"} 30.0
apiserver_admission_webhook_admission_duration_seconds_count{name="slow-injector.example.com",operation="CREATE",rejected="true",type="admit"} 1
apiserver_admission_webhook_admission_duration_seconds_sum{name="slow-injector.example.com",operation="UPDATE",rejected="false",type="admit"} 900
apiserver_admission_webhook_admission_duration_seconds_count{name="slow-injector.example.com",operation="UPDATE",rejected="false",type="admit"} 3
apiserver_admission_webhook_admission_duration_seconds_sum{name="policy.example.com",operation="CREATE",rejected="false",type="validate"} 0.5
apiserver_admission_webhook_admission_duration_seconds_count{name="policy.example.com",operation="CREATE",rejected="false",type="validate"} 20
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",verb="POST",resource="pods",dry_run="All"} 5
"#;

    #[test]
    fn totals_of_create_calls_per_webhook() {
        let t = webhook_admission_totals(SCRAPE);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t["slow-injector.example.com"],
            (384.2, 13.0),
            "both rejected values, no UPDATE"
        );
        assert_eq!(t["policy.example.com"], (0.5, 20.0));
    }

    #[test]
    fn escapes_exemplars_timestamps_and_odd_spacing() {
        let text = concat!(
            "apiserver_admission_webhook_admission_duration_seconds_sum{name=\"a\\\"b\\\\c\\nd\",operation=\"CREATE\",} 2.5 1700000000000\n",
            "apiserver_admission_webhook_admission_duration_seconds_count{ name = \"a\\\"b\\\\c\\nd\" , operation = \"CREATE\" } 5 # {trace_id=\"x\"} 1.0 1700000000.1\n",
            "  apiserver_admission_webhook_admission_duration_seconds_sum{name=\"ü-hook\",operation=\"CREATE\"}\t1e0\r\n",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"ü-hook\",operation=\"CREATE\"} 4\n",
        );
        let t = webhook_admission_totals(text);
        assert_eq!(t["a\"b\\c\nd"], (2.5, 5.0));
        assert_eq!(t["ü-hook"], (1.0, 4.0));
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let good = "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\",operation=\"CREATE\"} 7";
        let bad = [
            "",
            "#",
            "# just a comment with {braces} 3",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\",operation=\"CREATE\"}",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\",operation=\"CREATE\" 7",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w,operation=\"CREATE\"} 7",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=w,operation=\"CREATE\"} 7",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\"operation=\"CREATE\"} 7",
            "apiserver_admission_webhook_admission_duration_seconds_count{=\"w\"} 7",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\",operation=\"CREATE\"} seven",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\",operation=\"CREATE\"} NaN",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\",operation=\"CREATE\"} +Inf",
            "apiserver_admission_webhook_admission_duration_seconds_count{operation=\"CREATE\"} 7",
            "9metric{name=\"w\",operation=\"CREATE\"} 7",
            "{name=\"w\",operation=\"CREATE\"} 7",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\",operation=\"CREATE\"} 7\\",
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"w\\",
        ];
        let text = std::iter::once(good).chain(bad).collect::<Vec<_>>().join("\n");
        let t = webhook_admission_totals(&text);
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t["w"], (0.0, 7.0));
        assert_eq!(parse_line("# TYPE x counter"), None);
        assert_eq!(
            parse_line("up 1").map(|s| (s.name, s.labels.len(), s.value)),
            Some(("up".to_string(), 0, 1.0))
        );
        assert!(parse_line("x{} -Inf").is_some_and(|s| s.value == f64::NEG_INFINITY));
    }

    #[test]
    fn mean_latency_between_readings() {
        let before = webhook_admission_totals(SCRAPE);
        let mut after = before.clone();
        after.insert("slow-injector.example.com".into(), (384.2 + 60.0, 15.0)); // two calls, 30 s each
        after.insert("new.example.com".into(), (0.2, 2.0)); // first calls since `before`
        after.insert("idle.example.com".into(), (1.0, 1.0));
        let mut before = before;
        before.insert("idle.example.com".into(), (1.0, 1.0));
        before.insert("reset.example.com".into(), (50.0, 100.0));
        after.insert("reset.example.com".into(), (1.0, 2.0)); // the API server restarted
        let m = mean_latency(&before, &after);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!((m["slow-injector.example.com"] - 30.0).abs() < 1e-9);
        assert!((m["new.example.com"] - 0.1).abs() < 1e-9);
        assert!(mean_latency(&after, &after).is_empty(), "no calls in between");
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_any_text(text in "\\PC*") {
            let _ = webhook_admission_totals(&text);
        }

        #[test]
        fn never_panics_on_metric_like_text(
            text in "(apiserver_admission_webhook_admission_duration_seconds_(sum|count)?[{}=\",a-z\\\\ ]{0,40}[ 0-9.eE+-]{0,12}( # .{0,10})?\n){0,8}"
        ) {
            let totals = webhook_admission_totals(&text);
            let _ = mean_latency(&totals, &totals);
        }
    }
}
