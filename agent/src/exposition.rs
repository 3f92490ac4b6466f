//! The agent's metric types and their Prometheus text exposition (format 0.0.4).
//!
//! A scrape writes every sample straight from the values into one buffer: no intermediate
//! metric families, no copy of a label per sample, no sort of series at scrape time (a vector
//! keeps its series in order as they are created). The `prometheus` crate this replaces built
//! a `MetricFamily` of owned strings for every scrape and sorted it, which was most of a
//! scrape's 1 ms of CPU (docs/performance.md, "A scrape without the prometheus crate").
//!
//! The text is what Prometheus's own client libraries write: families sorted by name, each
//! with `# HELP` and `# TYPE`; series within a family in the order of their label values, the
//! labels of a series sorted by name; a family with no series is left out; values in Rust's
//! shortest round-trip form (`1`, `0.25`; `+Inf`, `-Inf`, `NaN`), whole-number metrics as
//! integers; histograms as cumulative `_bucket{le=...}` series ending in `le="+Inf"`, then
//! `_sum` and `_count`. Help text escapes `\` and newlines, label values also `"`.
//!
//! The handles ([`IntGauge`], [`GaugeVec`], ...) are cheap clones of one shared value, so a
//! task keeps its own clone and the registry another.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Why a metric could not be made or registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("metric name {0:?} is not valid (letters, digits, '_' and ':', not starting with a digit)")]
    Name(String),
    #[error(
        "label name {label:?} of metric {metric} is not valid (letters, digits and '_', not starting with a digit or \"__\")"
    )]
    Label { metric: String, label: String },
    #[error("metric {0} has no help text")]
    NoHelp(String),
    #[error("metric {0} is registered twice")]
    Duplicate(String),
    #[error("metric {metric} has {expected} labels, {got} values were given")]
    Cardinality {
        metric: String,
        expected: usize,
        got: usize,
    },
    #[error("metric {0} is one series of a vector and cannot be registered on its own")]
    Unnamed(String),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A metric's name and help text.
#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    pub name: String,
    pub help: String,
}

impl Opts {
    pub fn new(name: impl Into<String>, help: impl Into<String>) -> Self {
        Opts {
            name: name.into(),
            help: help.into(),
        }
    }
}

/// A histogram's name, help text and bucket upper bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramOpts {
    pub opts: Opts,
    pub buckets: Vec<f64>,
}

impl HistogramOpts {
    /// With Prometheus's default buckets (5 ms to 10 s).
    pub fn new(name: impl Into<String>, help: impl Into<String>) -> Self {
        HistogramOpts {
            opts: Opts::new(name, help),
            buckets: vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0],
        }
    }

    pub fn buckets(mut self, buckets: Vec<f64>) -> Self {
        self.buckets = buckets;
        self
    }
}

/// A family's type, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label(name: &str) -> bool {
    let mut chars = name.chars();
    !name.starts_with("__")
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What a family is: name, help, type, and (for a vector) its label names.
#[derive(Debug)]
struct Desc {
    name: String,
    help: String,
    kind: Kind,
    /// Label names sorted, as they are written.
    labels: Vec<String>,
    /// For each sorted label, the position of its value in a `with_label_values` call.
    given_at: Vec<usize>,
}

impl Desc {
    fn new(opts: Opts, kind: Kind, labels: &[&str]) -> Result<Self, Error> {
        if !valid_name(&opts.name) {
            return Err(Error::Name(opts.name));
        }
        if opts.help.is_empty() {
            return Err(Error::NoHelp(opts.name));
        }
        if let Some(bad) = labels
            .iter()
            .find(|l| !valid_label(l) || (kind == Kind::Histogram && **l == "le"))
        {
            return Err(Error::Label {
                metric: opts.name,
                label: (*bad).to_string(),
            });
        }
        let mut given_at: Vec<usize> = (0..labels.len()).collect();
        given_at.sort_by_key(|&i| labels[i]);
        if let Some(twice) = given_at.windows(2).find(|w| labels[w[0]] == labels[w[1]]) {
            return Err(Error::Label {
                metric: opts.name,
                label: format!("{} (named twice)", labels[twice[0]]),
            });
        }
        Ok(Desc {
            name: opts.name,
            help: opts.help,
            kind,
            labels: given_at.iter().map(|&i| labels[i].to_string()).collect(),
            given_at,
        })
    }

    fn header(&self, out: &mut String) {
        header(out, &self.name, &self.help, self.kind);
    }
}

/// A family's `# HELP` and `# TYPE` lines.
fn header(out: &mut String, name: &str, help: &str, kind: Kind) {
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    escape_into(out, help, false);
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind.as_str());
    out.push('\n');
}

fn escape_into(out: &mut String, text: &str, quote: bool) {
    let needs = |c: char| c == '\\' || c == '\n' || (quote && c == '"');
    if !text.contains(needs) {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// A float as the text format spells it: `+Inf`, `-Inf`, `NaN`, else Rust's shortest
/// round-trip form.
struct Float(f64);

impl std::fmt::Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            v if v.is_nan() => f.write_str("NaN"),
            v if v == f64::INFINITY => f.write_str("+Inf"),
            v if v == f64::NEG_INFINITY => f.write_str("-Inf"),
            v => write!(f, "{v}"),
        }
    }
}

/// One sample line: `name[suffix]{labels[,extra]} value`. Whole-number metrics write their
/// integer (exact past 2^53, where a float would round), the others Rust's shortest form of
/// the float.
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(&str, &str)],
    extra: Option<(&str, &str)>,
    value: impl std::fmt::Display,
) {
    out.push_str(name);
    out.push_str(suffix);
    let mut sep = '{';
    for (k, v) in labels.iter().copied().chain(extra) {
        out.push(sep);
        out.push_str(k);
        out.push_str("=\"");
        escape_into(out, v, true);
        out.push('"');
        sep = ',';
    }
    if sep == ',' {
        out.push('}');
    }
    // Writing to a String cannot fail.
    let _ = writeln!(out, " {value}");
}

// ---------------------------------------------------------------- values

/// A value one series holds, written under its family's name.
pub trait Value: Clone + Send + Sync + 'static {
    /// The family type a vector of these is.
    const KIND: Kind;
    /// A fresh series of this kind (`buckets` for a histogram).
    fn fresh(buckets: &[f64]) -> Self;
    /// Writes this series' sample lines.
    fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]);
}

/// A counter or gauge with a value that may be fractional.
#[derive(Debug, Clone, Default)]
struct F64(Arc<AtomicU64>);

impl F64 {
    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }
    fn add(&self, v: f64) {
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
            Some((f64::from_bits(b) + v).to_bits())
        });
    }
}

/// A counter or gauge type: `$cell` holds its value, `$shown` turns what `get` returns into
/// the text's number.
macro_rules! single {
    ($(#[$doc:meta])* $name:ident, $cell:ty, $kind:expr, $shown:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            value: $cell,
            /// The family, for a metric of its own; `None` for one series of a vector.
            desc: Option<Arc<Desc>>,
        }

        impl $name {
            /// A metric of its own, to register.
            pub fn with_opts(opts: Opts) -> Result<Self, Error> {
                Ok($name {
                    value: Default::default(),
                    desc: Some(Arc::new(Desc::new(opts, $kind, &[])?)),
                })
            }

            pub fn new(name: impl Into<String>, help: impl Into<String>) -> Result<Self, Error> {
                Self::with_opts(Opts::new(name, help))
            }
        }

        impl Collect for $name {
            fn collect<'a>(&'a self, out: &mut Families<'a>) -> Result<(), Error> {
                let desc = self.desc.as_ref().ok_or_else(|| Error::Unnamed(stringify!($name).into()))?;
                out.family(&desc.name, |text| {
                    desc.header(text);
                    self.write(text, &desc.name, &[]);
                });
                Ok(())
            }

            fn names(&self) -> Vec<String> {
                self.desc.iter().map(|d| d.name.clone()).collect()
            }
        }

        impl Value for $name {
            const KIND: Kind = $kind;
            fn fresh(_: &[f64]) -> Self {
                $name {
                    value: Default::default(),
                    desc: None,
                }
            }
            fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
                sample(out, name, "", labels, None, $shown(self.get()));
            }
        }
    };
}

single!(
    /// A gauge of whole numbers.
    IntGauge,
    Arc<AtomicI64>,
    Kind::Gauge,
    std::convert::identity
);
impl IntGauge {
    pub fn set(&self, v: i64) {
        self.value.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }
    pub fn inc(&self) {
        self.value.fetch_add(1, Ordering::Relaxed);
    }
    pub fn dec(&self) {
        self.value.fetch_sub(1, Ordering::Relaxed);
    }
}

single!(
    /// A gauge.
    Gauge,
    F64,
    Kind::Gauge,
    Float
);
impl Gauge {
    pub fn set(&self, v: f64) {
        self.value.set(v);
    }
    pub fn get(&self) -> f64 {
        self.value.get()
    }
    pub fn add(&self, v: f64) {
        self.value.add(v);
    }
}

single!(
    /// A counter of whole occurrences.
    IntCounter,
    Arc<AtomicU64>,
    Kind::Counter,
    std::convert::identity
);
impl IntCounter {
    pub fn inc(&self) {
        self.inc_by(1);
    }
    pub fn inc_by(&self, v: u64) {
        self.value.fetch_add(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// One histogram's counts: per bucket (not cumulative), the sum and the count, under one lock
/// so a scrape never sees a count that disagrees with its buckets.
#[derive(Debug, Default)]
struct Counts {
    upper: Vec<f64>,
    per_bucket: Vec<u64>,
    sum: f64,
    count: u64,
}

/// A histogram, one series of a [`HistogramVec`].
#[derive(Debug, Clone)]
pub struct Histogram(Arc<Mutex<Counts>>);

impl Histogram {
    pub fn observe(&self, v: f64) {
        let mut c = lock(&self.0);
        if let Some(i) = c.upper.iter().position(|ub| v <= *ub) {
            c.per_bucket[i] += 1;
        }
        c.sum += v;
        c.count += 1;
    }

    /// How many values were observed.
    pub fn sample_count(&self) -> u64 {
        lock(&self.0).count
    }
}

impl Value for Histogram {
    const KIND: Kind = Kind::Histogram;
    fn fresh(buckets: &[f64]) -> Self {
        Histogram(Arc::new(Mutex::new(Counts {
            upper: buckets.to_vec(),
            per_bucket: vec![0; buckets.len()],
            sum: 0.0,
            count: 0,
        })))
    }

    fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        let c = lock(&self.0);
        let mut cumulative = 0;
        let mut bound = String::new();
        for (ub, n) in c.upper.iter().zip(&c.per_bucket) {
            cumulative += n;
            bound.clear();
            let _ = write!(bound, "{ub}");
            sample(out, name, "_bucket", labels, Some(("le", &bound)), cumulative);
        }
        sample(out, name, "_bucket", labels, Some(("le", "+Inf")), c.count);
        sample(out, name, "_sum", labels, None, Float(c.sum));
        sample(out, name, "_count", labels, None, c.count);
    }
}

// ---------------------------------------------------------------- vectors

/// A family of series told apart by label values.
#[derive(Debug)]
pub struct MetricVec<V: Value> {
    core: Arc<VecCore<V>>,
}

impl<V: Value> Clone for MetricVec<V> {
    fn clone(&self) -> Self {
        MetricVec {
            core: self.core.clone(),
        }
    }
}

#[derive(Debug)]
struct VecCore<V> {
    desc: Desc,
    buckets: Vec<f64>,
    /// By label values in the order of the sorted label names: the order they are written.
    series: Mutex<BTreeMap<Vec<String>, V>>,
}

pub type IntGaugeVec = MetricVec<IntGauge>;
pub type GaugeVec = MetricVec<Gauge>;
pub type IntCounterVec = MetricVec<IntCounter>;
pub type HistogramVec = MetricVec<Histogram>;

impl<V: Value> MetricVec<V> {
    /// A vector with these label names (a histogram's with no bucket but `+Inf`: see
    /// [`HistogramVec::with_buckets`]).
    pub fn new(opts: Opts, labels: &[&str]) -> Result<Self, Error> {
        Self::build(opts, labels, vec![])
    }

    fn build(opts: Opts, labels: &[&str], buckets: Vec<f64>) -> Result<Self, Error> {
        Ok(MetricVec {
            core: Arc::new(VecCore {
                desc: Desc::new(opts, V::KIND, labels)?,
                buckets,
                series: Mutex::default(),
            }),
        })
    }

    fn key(&self, values: &[&str]) -> Result<Vec<String>, Error> {
        let desc = &self.core.desc;
        if values.len() != desc.labels.len() {
            return Err(Error::Cardinality {
                metric: desc.name.clone(),
                expected: desc.labels.len(),
                got: values.len(),
            });
        }
        Ok(desc.given_at.iter().map(|&i| values[i].to_string()).collect())
    }

    /// The series with these label values (in the order the labels were declared), created at
    /// zero if it is new. Values of the wrong number are a bug of the caller: logged, and the
    /// series returned is not exported.
    pub fn with_label_values(&self, values: &[&str]) -> V {
        match self.key(values) {
            Ok(key) => lock(&self.core.series)
                .entry(key)
                .or_insert_with(|| V::fresh(&self.core.buckets))
                .clone(),
            Err(e) => {
                tracing::error!(error = %e, "metric series not exported");
                V::fresh(&self.core.buckets)
            }
        }
    }

    /// Removes the series with these label values.
    pub fn remove_label_values(&self, values: &[&str]) -> Result<(), Error> {
        let key = self.key(values)?;
        lock(&self.core.series).remove(&key);
        Ok(())
    }

    /// Removes every series.
    pub fn reset(&self) {
        lock(&self.core.series).clear();
    }
}

impl HistogramVec {
    /// Histograms with these bucket upper bounds (sorted; `+Inf` is always the last bucket).
    pub fn with_buckets(opts: HistogramOpts, labels: &[&str]) -> Result<Self, Error> {
        let mut buckets = opts.buckets;
        buckets.retain(|b| !(b.is_infinite() && b.is_sign_positive()));
        buckets.sort_by(f64::total_cmp);
        buckets.dedup();
        Self::build(opts.opts, labels, buckets)
    }
}

impl<V: Value> Collect for MetricVec<V> {
    fn collect<'a>(&'a self, out: &mut Families<'a>) -> Result<(), Error> {
        let desc = &self.core.desc;
        let series = lock(&self.core.series);
        if series.is_empty() {
            return Ok(());
        }
        out.family(&desc.name, |text| {
            desc.header(text);
            let mut labels: Vec<(&str, &str)> = Vec::with_capacity(desc.labels.len());
            for (values, value) in series.iter() {
                labels.clear();
                labels.extend(
                    desc.labels
                        .iter()
                        .map(String::as_str)
                        .zip(values.iter().map(String::as_str)),
                );
                value.write(text, &desc.name, &labels);
            }
        });
        Ok(())
    }

    fn names(&self) -> Vec<String> {
        vec![self.core.desc.name.clone()]
    }
}

// ---------------------------------------------------------------- the registry

/// The text of the families one scrape writes, each kept apart until they are put in order.
#[derive(Debug)]
pub struct Families<'a> {
    text: String,
    parts: Vec<(&'a str, Range<usize>)>,
}

impl<'a> Families<'a> {
    /// Writes family `name` of one series without labels, for a collector that reads its
    /// values at the scrape. `name` is not checked here: the collector's are constants, and the
    /// end-to-end tests run `promtool check metrics` on the daemon's scrapes.
    pub fn single(&mut self, name: &'a str, help: &str, kind: Kind, value: f64) {
        self.family(name, |text| {
            header(text, name, help, kind);
            sample(text, name, "", &[], None, Float(value));
        });
    }

    /// Writes family `name` with `write` (its `# HELP`, `# TYPE` and samples).
    pub fn family(&mut self, name: &'a str, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        self.parts.push((name, start..self.text.len()));
    }
}

/// Something that writes families at each scrape: a metric, a vector, or a collector that
/// reads its values then (the process's own).
pub trait Collect: Send + Sync {
    fn collect<'a>(&'a self, out: &mut Families<'a>) -> Result<(), Error>;

    /// The families this writes, so that a second registration of one is refused.
    fn names(&self) -> Vec<String>;
}

/// Every registered family; cheap to clone (one shared list).
#[derive(Clone, Default)]
pub struct Registry {
    collectors: Arc<Mutex<Vec<Box<dyn Collect>>>>,
    names: Arc<Mutex<std::collections::BTreeSet<String>>>,
    /// The length of the last scrape's text, to size the next one's buffer.
    last_len: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registry({} collectors)", lock(&self.collectors).len())
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a collector; a family name registered before is refused.
    pub fn register(&self, c: Box<dyn Collect>) -> Result<(), Error> {
        let names = c.names();
        let mut known = lock(&self.names);
        if let Some(dup) = names.iter().find(|n| known.contains(*n)) {
            return Err(Error::Duplicate(dup.clone()));
        }
        known.extend(names);
        lock(&self.collectors).push(c);
        Ok(())
    }

    /// The exposition text of every family, sorted by name. A collector that fails is left
    /// out and named in a comment (the others are still served).
    pub fn render(&self) -> String {
        let collectors = lock(&self.collectors);
        let hint = self.last_len.load(Ordering::Relaxed);
        let mut families = Families {
            text: String::with_capacity(hint + hint / 8),
            parts: Vec::with_capacity(collectors.len() + 16),
        };
        let mut failures = vec![];
        for c in collectors.iter() {
            if let Err(e) = c.collect(&mut families) {
                failures.push(e.to_string());
            }
        }
        families.parts.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = String::with_capacity(families.text.len() + 64);
        for f in &failures {
            let _ = writeln!(out, "# collecting failed: {f}");
        }
        for (_, range) in &families.parts {
            out.push_str(&families.text[range.clone()]);
        }
        self.last_len.store(out.len(), Ordering::Relaxed);
        out
    }
}

#[cfg(test)]
mod tests;
