//! The gauges of Spark's local storage by application, and the count of executors evicted for
//! it. Applications are named by `spark-app-selector` (`none` for pods without one); a node
//! with more than [`MAX_APPS`] applications measured keeps the largest and sums the rest under
//! `other`, so the series stay bounded.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::exposition::{Error, GaugeVec, IntCounterVec, IntGauge, Registry};
use nodemedic_rules::facts::Facts;
use nodemedic_rules::snapshot::{DirBacking, NodeSnapshot, Observed};

use super::opts;

/// At most this many applications get series of their own.
pub const MAX_APPS: usize = 50;

/// The `reason` values of `nodemedic_spark_executor_evictions_total`.
pub const EVICTION_REASONS: [&str; 4] = ["pod_limit", "container_limit", "emptydir_limit", "node_pressure"];

#[derive(Debug, Clone)]
pub struct StorageMetrics {
    bytes: GaugeVec,
    growth: GaugeVec,
    forecast: GaugeVec,
    evictions_total: IntCounterVec,
    kubelet_stats_readable: IntGauge,
    /// Evicted executors already counted (by UID).
    counted: Arc<Mutex<HashSet<String>>>,
}

impl StorageMetrics {
    pub fn new(registry: &Registry) -> Result<Self, Error> {
        let m = StorageMetrics {
            bytes: GaugeVec::new(
                opts(
                    "local_storage_bytes",
                    "Bytes the running Spark pods' disk-backed local dirs hold on this node, by application (spark-app-selector), as last measured.",
                ),
                &["app"],
            )?,
            growth: GaugeVec::new(
                opts(
                    "local_storage_growth_bytes_per_second",
                    "How fast those local dirs grew over local_storage_window_seconds, by application.",
                ),
                &["app"],
            )?,
            forecast: GaugeVec::new(
                opts(
                    "local_storage_forecast_seconds",
                    "Seconds until the first of an application's growing pods reaches an eviction limit (its ephemeral-storage limit, an emptyDir sizeLimit, the kubelet's nodefs.available threshold, or a full file system) at the growth measured; no series while nothing grows.",
                ),
                &["app"],
            )?,
            evictions_total: IntCounterVec::new(
                opts(
                    "spark_executor_evictions_total",
                    "Spark executors on this node the kubelet evicted for local storage, by reason (pod_limit, container_limit, emptydir_limit, node_pressure), each counted once.",
                ),
                &["reason"],
            )?,
            kubelet_stats_readable: IntGauge::with_opts(opts(
                "kubelet_stats_readable",
                "1 when the last measurement of Spark's local storage read the kubelet's /stats/summary (kubelet_stats_url), 0 when it did not (unset, or the kubelet could not be read: the log says why).",
            ))?,
            counted: Default::default(),
        };
        registry.register(Box::new(m.bytes.clone()))?;
        registry.register(Box::new(m.growth.clone()))?;
        registry.register(Box::new(m.forecast.clone()))?;
        registry.register(Box::new(m.evictions_total.clone()))?;
        registry.register(Box::new(m.kubelet_stats_readable.clone()))?;
        for reason in EVICTION_REASONS {
            m.evictions_total.with_label_values(&[reason]);
        }
        Ok(m)
    }

    /// Whether the last measurement read the kubelet's `/stats/summary`.
    pub fn kubelet_stats_read(&self, read: bool) {
        self.kubelet_stats_readable.set(i64::from(read));
    }

    /// Sets the gauges from a judgement and counts the evictions not counted before.
    pub fn observe(&self, snap: &NodeSnapshot, facts: &Facts) {
        self.bytes.reset();
        self.growth.reset();
        self.forecast.reset();
        let app_of = |uid: &str| {
            snap.pods
                .bound
                .iter()
                .find(|p| p.uid == uid)
                .and_then(|p| p.spark_app())
                .unwrap_or("none")
                .to_string()
        };
        if let Observed::Ok(storage) = &snap.host.local_storage {
            // (bytes, growth) by application.
            let mut apps: BTreeMap<String, (f64, f64)> = BTreeMap::new();
            for p in &storage.pods {
                let e = apps.entry(app_of(&p.pod_uid)).or_default();
                for d in p.dirs.iter().filter(|d| d.backing != DirBacking::Memory) {
                    e.0 += d.bytes as f64;
                    e.1 += d.growth_bytes_per_second.unwrap_or(0.0);
                }
            }
            let mut forecasts: BTreeMap<String, f64> = BTreeMap::new();
            for r in &facts.storage {
                if let Some(f) = r.nearest() {
                    let app = r.pod.spark_app().unwrap_or("none").to_string();
                    let e = forecasts.entry(app).or_insert(f64::INFINITY);
                    *e = e.min(f.seconds);
                }
            }
            let mut by_size: Vec<(String, (f64, f64))> = apps.into_iter().collect();
            by_size.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
            let mut other: Option<(f64, f64, f64)> = None;
            for (i, (app, (bytes, growth))) in by_size.into_iter().enumerate() {
                let forecast = forecasts.get(&app).copied();
                if i < MAX_APPS {
                    self.bytes.with_label_values(&[&app]).set(bytes);
                    self.growth.with_label_values(&[&app]).set(growth);
                    if let Some(f) = forecast {
                        self.forecast.with_label_values(&[&app]).set(f);
                    }
                } else {
                    let o = other.get_or_insert((0.0, 0.0, f64::INFINITY));
                    o.0 += bytes;
                    o.1 += growth;
                    o.2 = o.2.min(forecast.unwrap_or(f64::INFINITY));
                }
            }
            if let Some((bytes, growth, forecast)) = other {
                self.bytes.with_label_values(&["other"]).set(bytes);
                self.growth.with_label_values(&["other"]).set(growth);
                if forecast.is_finite() {
                    self.forecast.with_label_values(&["other"]).set(forecast);
                }
            }
        }
        if let Ok(mut seen) = self.counted.lock() {
            let evicted = nodemedic_rules::rules::spark_executor_evicted::evicted(snap);
            for (pod, why) in &evicted {
                if seen.insert(pod.uid.clone()) {
                    self.evictions_total.with_label_values(&[why.as_str()]).inc();
                }
            }
            let here: HashSet<&str> = snap.pods.bound.iter().map(|p| p.uid.as_str()).collect();
            seen.retain(|uid| here.contains(uid.as_str()));
        }
    }
}
