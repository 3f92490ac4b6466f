use super::*;

fn registry_of(items: Vec<Box<dyn Collect>>) -> Registry {
    let r = Registry::new();
    for i in items {
        r.register(i).unwrap();
    }
    r
}

#[test]
fn families_are_sorted_by_name_and_series_by_label_value_with_labels_sorted_by_name() {
    let v = IntGaugeVec::new(Opts::new("b_things", "Things."), &["state", "node"]).unwrap();
    v.with_label_values(&["free", "1"]).set(3);
    v.with_label_values(&["held", "0"]).set(2);
    v.with_label_values(&["free", "0"]).set(1);
    let g = Gauge::with_opts(Opts::new("a_seconds", "Seconds.")).unwrap();
    g.set(0.25);
    let r = registry_of(vec![Box::new(v.clone()), Box::new(g)]);
    assert_eq!(
        r.render(),
        "# HELP a_seconds Seconds.\n# TYPE a_seconds gauge\na_seconds 0.25\n\
         # HELP b_things Things.\n# TYPE b_things gauge\n\
         b_things{node=\"0\",state=\"free\"} 1\n\
         b_things{node=\"0\",state=\"held\"} 2\n\
         b_things{node=\"1\",state=\"free\"} 3\n"
    );
    // Reset leaves the family out altogether.
    v.reset();
    assert!(!r.render().contains("b_things"));
}

#[test]
fn counters_gauges_and_histograms_write_as_prometheus_expects() {
    let c = IntCounterVec::new(Opts::new("x_total", "X."), &["reason"]).unwrap();
    c.with_label_values(&["a"]).inc();
    c.with_label_values(&["a"]).inc_by(2);
    let h = HistogramVec::with_buckets(
        HistogramOpts::new("d_seconds", "Durations.").buckets(vec![0.5, 0.1, 1.0]),
        &["probe"],
    )
    .unwrap();
    h.with_label_values(&["get"]).observe(0.05);
    h.with_label_values(&["get"]).observe(0.7);
    h.with_label_values(&["get"]).observe(3.0);
    let inf = Gauge::new("limit_bytes", "A limit.").unwrap();
    inf.set(f64::INFINITY);
    let big = IntGauge::new("big", "Big.").unwrap();
    big.set(i64::MAX);
    let r = registry_of(vec![Box::new(c), Box::new(h.clone()), Box::new(inf), Box::new(big)]);
    let text = r.render();
    assert_eq!(
        text,
        "# HELP big Big.\n# TYPE big gauge\nbig 9223372036854775807\n\
         # HELP d_seconds Durations.\n# TYPE d_seconds histogram\n\
         d_seconds_bucket{probe=\"get\",le=\"0.1\"} 1\n\
         d_seconds_bucket{probe=\"get\",le=\"0.5\"} 1\n\
         d_seconds_bucket{probe=\"get\",le=\"1\"} 2\n\
         d_seconds_bucket{probe=\"get\",le=\"+Inf\"} 3\n\
         d_seconds_sum{probe=\"get\"} 3.75\n\
         d_seconds_count{probe=\"get\"} 3\n\
         # HELP limit_bytes A limit.\n# TYPE limit_bytes gauge\nlimit_bytes +Inf\n\
         # HELP x_total X.\n# TYPE x_total counter\nx_total{reason=\"a\"} 3\n"
    );
    assert_eq!(h.with_label_values(&["get"]).sample_count(), 3);
}

#[test]
fn help_and_label_values_are_escaped() {
    let v = IntGaugeVec::new(Opts::new("e", "back\\slash\nnew \"quoted\""), &["v"]).unwrap();
    v.with_label_values(&["a\"b\\c\nd"]).set(1);
    let text = registry_of(vec![Box::new(v)]).render();
    assert_eq!(
        text,
        "# HELP e back\\\\slash\\nnew \"quoted\"\n# TYPE e gauge\ne{v=\"a\\\"b\\\\c\\nd\"} 1\n"
    );
}

#[test]
fn bad_names_labels_help_duplicates_and_cardinality_are_errors_not_panics() {
    assert_eq!(IntGauge::new("1x", "h").unwrap_err(), Error::Name("1x".into()));
    assert_eq!(IntGauge::new("x", "").unwrap_err(), Error::NoHelp("x".into()));
    assert!(matches!(
        IntGaugeVec::new(Opts::new("x", "h"), &["__x"]),
        Err(Error::Label { .. })
    ));
    assert_eq!(
        IntGaugeVec::new(Opts::new("x", "h"), &["a", "b", "a"]).unwrap_err(),
        Error::Label {
            metric: "x".into(),
            label: "a (named twice)".into()
        }
    );
    assert!(matches!(
        HistogramVec::with_buckets(HistogramOpts::new("x", "h"), &["le"]),
        Err(Error::Label { .. })
    ));
    let r = Registry::new();
    r.register(Box::new(IntGauge::new("x", "h").unwrap())).unwrap();
    assert_eq!(
        r.register(Box::new(IntGauge::new("x", "h2").unwrap())).unwrap_err(),
        Error::Duplicate("x".into())
    );
    let v = IntGaugeVec::new(Opts::new("v", "h"), &["a", "b"]).unwrap();
    r.register(Box::new(v.clone())).unwrap();
    v.with_label_values(&["only one"]).set(5);
    assert_eq!(
        v.remove_label_values(&["x"]).unwrap_err(),
        Error::Cardinality {
            metric: "v".into(),
            expected: 2,
            got: 1
        }
    );
    // The series of the wrong call is not exported, and the family has no series.
    assert!(!r.render().contains("# TYPE v "));
    // A vector's own series cannot be registered as a family.
    let child = v.with_label_values(&["1", "2"]);
    r.register(Box::new(child)).unwrap();
    assert!(
        r.render()
            .starts_with("# collecting failed: metric IntGauge is one series")
    );
}

#[test]
fn the_handles_share_one_value_and_a_removed_series_starts_again_at_zero() {
    let v = IntCounterVec::new(Opts::new("c_total", "h"), &["k"]).unwrap();
    let kept = v.with_label_values(&["a"]);
    v.clone().with_label_values(&["a"]).inc();
    assert_eq!(kept.get(), 1);
    v.remove_label_values(&["a"]).unwrap();
    assert_eq!(v.with_label_values(&["a"]).get(), 0);
    let g = Gauge::new("g", "h").unwrap();
    g.clone().add(1.5);
    g.add(1.0);
    assert_eq!(g.get(), 2.5);
}
