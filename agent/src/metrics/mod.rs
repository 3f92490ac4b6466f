//! Prometheus metrics (docs/metrics.md): one registry owned by the daemon, no global
//! state. Gauges are set from the latest scan; counters count occurrences. No pod, container
//! or node names as labels: the scrape target identifies the node.

use std::collections::BTreeSet;

use nodemedic_rules::facts::{self, Facts};
use nodemedic_rules::finding::{Finding, Severity};
use nodemedic_rules::rules;
use nodemedic_rules::snapshot::NodeSnapshot;

use crate::collect::Records;
use crate::exposition::{
    Error, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

mod process;
pub mod storage;

/// Every metric the agent exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    pub build_info: IntGaugeVec,
    pub collector_success: IntGaugeVec,
    pub collector_duration_seconds: GaugeVec,
    pub last_scan_timestamp_seconds: Gauge,
    pub findings: IntGaugeVec,
    pub rule_firing: IntGaugeVec,
    /// `nodemedic_rule_judged{rule}`: 1 when the rule judged in the last scan, 0 when it could
    /// not (a source it needs failed, or was not looked at); no series for a disabled rule.
    pub rule_judged: IntGaugeVec,
    pub cpu_manager_exclusive_cpus: IntGauge,
    pub cpu_manager_default_cpus: IntGauge,
    pub cpu_manager_stale_cpus: IntGauge,
    pub exclusive_cpus: IntGaugeVec,
    pub memory_manager_bytes: IntGaugeVec,
    pub memory_manager_stale_bytes: IntGaugeVec,
    pub devices_checkpointed: IntGaugeVec,
    pub dra_prepared_claims: IntGaugeVec,
    pub node_resource_topology_writes_total: IntCounterVec,
    /// The gauges the rules declare ([`rules::RuleInfo::gauge`]: `nodemedic_orphaned_executors`,
    /// `nodemedic_half_submitted_drivers`, `nodemedic_orphaned_local_dir_bytes`, ...), each with
    /// its rule's id, set from that rule's findings.
    rule_gauges: Vec<(&'static str, rules::RuleGauge, IntGauge)>,
    pub events_emitted_total: IntCounterVec,
    pub admission_rejections_total: IntCounterVec,
    pub pod_watch_up: IntGauge,
    pub host_watches: IntGauge,
    pub prober: IntGauge,
    pub config_last_reload_successful: IntGauge,
    pub api_request_duration_seconds: HistogramVec,
    pub api_up: IntGauge,
    pub repair_actions_total: IntCounterVec,
    pub task_restarts_total: IntCounterVec,
    /// `nodemedic_scan_loop_turns_total{outcome}`: what each turn of the scan loop did.
    pub scan_loop_turns_total: IntCounterVec,
    pub api_write_failures_total: IntCounterVec,
    pub config_last_reload_success_timestamp_seconds: Gauge,
    pub fence_actions_total: IntCounterVec,
    pub fence_candidates: IntGauge,
    pub api_unreachable_seconds: Gauge,
    /// Spark's local storage by application, and evictions for it.
    pub storage: storage::StorageMetrics,
    /// Rejected pods already counted (by UID), so a pod is counted once however many scans see it.
    counted_rejections: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// The `kind` values of `nodemedic_api_write_failures_total`.
pub const WRITE_KINDS: [&str; 3] = ["event", "node_condition", "pod_deletion"];

/// Sets a timestamp gauge to the current unix time, in seconds.
/// The outcomes of a turn of the scan loop (`nodemedic_scan_loop_turns_total`).
pub const TURN_OUTCOMES: [&str; 4] = ["judged", "api", "current", "failed"];

fn set_to_now(gauge: &Gauge) {
    if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        gauge.set(now.as_secs_f64());
    }
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(format!("nodemedic_{name}"), help)
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Result<Self, Error> {
        let registry = Registry::new();
        let m = Metrics {
            build_info: IntGaugeVec::new(
                opts(
                    "build_info",
                    "Always 1; the labels say which nodemedic runs: its version and the git revision it was built from (unknown when built outside git).",
                ),
                &["version", "revision"],
            )?,
            collector_success: IntGaugeVec::new(
                opts(
                    "collector_success",
                    "1 when the collector read its input in the last scan (or the input is absent, which is normal), 0 when it failed.",
                ),
                &["collector"],
            )?,
            collector_duration_seconds: GaugeVec::new(
                opts(
                    "collector_duration_seconds",
                    "How long the collector took in the last scan, in seconds.",
                ),
                &["collector"],
            )?,
            last_scan_timestamp_seconds: Gauge::with_opts(opts(
                "last_scan_timestamp_seconds",
                "When the findings were last known current, unix seconds: a scan finished, or the agent checked that nothing a judgement reads had changed since the last one.",
            ))?,
            findings: IntGaugeVec::new(
                opts("findings", "Findings of the last scan by rule and severity."),
                &["rule", "severity"],
            )?,
            rule_firing: IntGaugeVec::new(
                opts(
                    "rule_firing",
                    "1 when the rule has at least one finding in the last scan.",
                ),
                &["rule"],
            )?,
            rule_judged: IntGaugeVec::new(
                opts(
                    "rule_judged",
                    "1 when the rule judged in the last scan, 0 when it could not (a source it needs could not be read).",
                ),
                &["rule"],
            )?,
            cpu_manager_exclusive_cpus: IntGauge::with_opts(opts(
                "cpu_manager_exclusive_cpus",
                "CPUs held by exclusive assignments in the CPU manager checkpoint.",
            ))?,
            cpu_manager_default_cpus: IntGauge::with_opts(opts(
                "cpu_manager_default_cpus",
                "CPUs in the checkpoint's default (shared) set.",
            ))?,
            cpu_manager_stale_cpus: IntGauge::with_opts(opts(
                "cpu_manager_stale_cpus",
                "CPUs held by checkpoint entries of containers that no longer run on this node.",
            ))?,
            exclusive_cpus: IntGaugeVec::new(
                opts(
                    "exclusive_cpus",
                    "Online CPUs by NUMA node and by what the static CPU manager policy does with them: free for \
                     the next Guaranteed container, held by live pods, held by stale entries, or reserved.",
                ),
                &["numa_node", "state"],
            )?,
            memory_manager_bytes: IntGaugeVec::new(
                opts(
                    "memory_manager_bytes",
                    "The memory manager's machine state (memory_manager_state, Static policy) by NUMA node and resource \
                     (memory, hugepages-<size>): allocatable, reserved for containers, and free, in bytes, as the file \
                     says.",
                ),
                &["numa_node", "resource", "state"],
            )?,
            memory_manager_stale_bytes: IntGaugeVec::new(
                opts(
                    "memory_manager_stale_bytes",
                    "Bytes the memory manager's checkpoint holds for containers that no longer run on this node, by \
                     the NUMA nodes of the block (one id, or several joined by commas for a block that spans them) \
                     and resource.",
                ),
                &["numa_nodes", "resource"],
            )?,
            devices_checkpointed: IntGaugeVec::new(
                opts(
                    "devices_checkpointed",
                    "Devices in the device manager's checkpoint (kubelet_internal_checkpoint) by resource and state: \
                     registered by the device plugin, allocated to containers, and stale (allocated to containers \
                     that no longer run on this node).",
                ),
                &["resource", "state"],
            )?,
            dra_prepared_claims: IntGaugeVec::new(
                opts(
                    "dra_prepared_claims",
                    "ResourceClaims prepared on this node by where they are recorded (kubelet: dra_manager_state; a \
                     driver format, e.g. nvidia-gpu: that driver's checkpoint) and state: live, or stale (every pod it \
                     was prepared for is gone).",
                ),
                &["source", "state"],
            )?,
            node_resource_topology_writes_total: IntCounterVec::new(
                opts(
                    "node_resource_topology_writes_total",
                    "Publications of this node's NodeResourceTopology by outcome: created, updated, unchanged \
                     (already so), conflict (another owner's object, left alone), failed.",
                ),
                &["outcome"],
            )?,
            rule_gauges: rules::ALL
                .iter()
                .filter_map(|r| Some((r.id.as_str(), r.gauge?)))
                .map(|(id, g)| Ok((id, g, IntGauge::with_opts(opts(g.name, g.help))?)))
                .collect::<Result<_, Error>>()?,
            events_emitted_total: IntCounterVec::new(
                opts(
                    "events_emitted_total",
                    "Kubernetes Events created or updated (series), by reason.",
                ),
                &["reason"],
            )?,
            pod_watch_up: IntGauge::with_opts(opts(
                "pod_watch_up",
                "1 while the watch of this node's pods is established (the API server accepted it and it has not failed since), 0 while it fails.",
            ))?,
            host_watches: IntGauge::with_opts(opts(
                "host_watches",
                "Directories the daemon watches with inotify (the kubelet directory and the pod cgroup tree); 0 where inotify is unavailable and every scan is a full one.",
            ))?,
            prober: IntGauge::with_opts(opts(
                "prober",
                "1 on the agent elected (Lease nodemedic-prober) to probe admission for the cluster, 0 on the others.",
            ))?,
            admission_rejections_total: IntCounterVec::new(
                opts(
                    "admission_rejections_total",
                    "Pods the kubelet on this node refused at admission, by reason (OutOfcpu, UnexpectedAdmissionError, ...), each pod counted once.",
                ),
                &["reason"],
            )?,
            config_last_reload_successful: IntGauge::with_opts(opts(
                "config_last_reload_successful",
                "1 when the configuration in force was read without error at start or at the last SIGHUP.",
            ))?,
            config_last_reload_success_timestamp_seconds: Gauge::with_opts(opts(
                "config_last_reload_success_timestamp_seconds",
                "When the configuration was last reloaded successfully (SIGHUP), unix seconds; 0 before any reload.",
            ))?,
            api_request_duration_seconds: HistogramVec::with_buckets(
                HistogramOpts::new(
                    "nodemedic_api_request_duration_seconds",
                    "Duration of the agent's API server probes (get: /version, list: this node's pods, create_dry_run: a dryRun=All pod create through the admission chain), seconds, failures included.",
                )
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0]),
                &["probe"],
            )?,
            api_up: IntGauge::with_opts(opts("api_up", "1 when the agent's last request got an answer from the API server (any HTTP status), 0 when it got none (refused, reset, timed out) or before the first answer."))?,
            repair_actions_total: IntCounterVec::new(
                opts("repair_actions_total", "Automatic repair actions of the daemon, by action (orphans, failed-pods, local-dirs) and result (applied, skipped, failed)."),
                &["action", "result"],
            )?,
            task_restarts_total: IntCounterVec::new(
                opts(
                    "task_restarts_total",
                    "Times one of the daemon's tasks (pod_watch, api_probes, fencing, kubelet_version) ended or panicked and was restarted, by task.",
                ),
                &["task"],
            )?,
            scan_loop_turns_total: IntCounterVec::new(
                opts(
                    "scan_loop_turns_total",
                    "Turns of the daemon's scan loop, by outcome: judged (the rules judged again: something they read changed, or a deadline came), api (only the API's observation changed, or one of its rules' deadlines came: the rules that judge the API judged again alone), current (nothing changed: the findings were confirmed current without a judgement), failed (the host could not be read).",
                ),
                &["outcome"],
            )?,
            api_write_failures_total: IntCounterVec::new(
                opts(
                    "api_write_failures_total",
                    "Writes to the API server that failed, by kind: event (an Event created or a series updated), node_condition (the status patch), pod_deletion (an automatic repair's DELETE).",
                ),
                &["kind"],
            )?,
            fence_actions_total: IntCounterVec::new(
                opts(
                    "fence_actions_total",
                    "Driver fencing actions on this node during API server outages, by mode (dry-run, on) and outcome (fenced, would_fence, failed).",
                ),
                &["mode", "outcome"],
            )?,
            fence_candidates: IntGauge::with_opts(opts(
                "fence_candidates",
                "Spark driver pods on this node that fencing would stop if the API server stayed away (opted in, replaced by a Job or a restarting SparkApplication); 0 when fencing is off.",
            ))?,
            api_unreachable_seconds: Gauge::with_opts(opts(
                "api_unreachable_seconds",
                "How long no request of this agent has been answered by the API server, counted from the first failed request after the last answer (the clock driver fencing acts on); 0 while it answers.",
            ))?,
            counted_rejections: Default::default(),
            storage: storage::StorageMetrics::new(&registry)?,
            registry,
        };
        m.registry.register(Box::new(m.build_info.clone()))?;
        m.registry.register(Box::new(m.collector_success.clone()))?;
        m.registry.register(Box::new(m.collector_duration_seconds.clone()))?;
        m.registry.register(Box::new(m.last_scan_timestamp_seconds.clone()))?;
        m.registry.register(Box::new(m.findings.clone()))?;
        m.registry.register(Box::new(m.rule_firing.clone()))?;
        m.registry.register(Box::new(m.rule_judged.clone()))?;
        m.registry.register(Box::new(m.cpu_manager_exclusive_cpus.clone()))?;
        m.registry.register(Box::new(m.cpu_manager_default_cpus.clone()))?;
        m.registry.register(Box::new(m.cpu_manager_stale_cpus.clone()))?;
        m.registry.register(Box::new(m.exclusive_cpus.clone()))?;
        m.registry.register(Box::new(m.memory_manager_bytes.clone()))?;
        m.registry.register(Box::new(m.memory_manager_stale_bytes.clone()))?;
        m.registry.register(Box::new(m.devices_checkpointed.clone()))?;
        m.registry.register(Box::new(m.dra_prepared_claims.clone()))?;
        m.registry
            .register(Box::new(m.node_resource_topology_writes_total.clone()))?;
        for (_, _, gauge) in &m.rule_gauges {
            m.registry.register(Box::new(gauge.clone()))?;
        }
        m.registry.register(Box::new(m.events_emitted_total.clone()))?;
        m.registry.register(Box::new(m.pod_watch_up.clone()))?;
        m.registry.register(Box::new(m.host_watches.clone()))?;
        m.registry.register(Box::new(m.prober.clone()))?;
        m.registry.register(Box::new(m.admission_rejections_total.clone()))?;
        m.registry.register(Box::new(m.config_last_reload_successful.clone()))?;
        m.registry.register(Box::new(m.api_request_duration_seconds.clone()))?;
        m.registry.register(Box::new(m.api_up.clone()))?;
        m.registry.register(Box::new(m.repair_actions_total.clone()))?;
        m.registry.register(Box::new(m.task_restarts_total.clone()))?;
        m.registry.register(Box::new(m.scan_loop_turns_total.clone()))?;
        m.registry.register(Box::new(m.api_write_failures_total.clone()))?;
        m.registry.register(Box::new(m.fence_actions_total.clone()))?;
        m.registry.register(Box::new(m.fence_candidates.clone()))?;
        m.registry.register(Box::new(m.api_unreachable_seconds.clone()))?;
        for mode in ["dry-run", "on"] {
            for outcome in ["fenced", "would_fence", "failed"] {
                if mode == "dry-run" && outcome == "fenced" {
                    continue;
                }
                m.fence_actions_total.with_label_values(&[mode, outcome]);
            }
        }
        for kind in WRITE_KINDS {
            m.api_write_failures_total.with_label_values(&[kind]);
        }
        for outcome in ["created", "updated", "unchanged", "conflict", "failed"] {
            m.node_resource_topology_writes_total.with_label_values(&[outcome]);
        }
        for outcome in TURN_OUTCOMES {
            m.scan_loop_turns_total.with_label_values(&[outcome]);
        }
        for task in ["pod_watch", "api_probes", "fencing", "kubelet_version"] {
            m.task_restarts_total.with_label_values(&[task]);
        }
        for action in ["orphans", "failed-pods", "local-dirs"] {
            for result in ["applied", "skipped", "failed"] {
                m.repair_actions_total.with_label_values(&[action, result]);
            }
        }
        for probe in ["get", "list", "create_dry_run"] {
            m.api_request_duration_seconds.with_label_values(&[probe]);
        }
        m.registry
            .register(Box::new(m.config_last_reload_success_timestamp_seconds.clone()))?;
        // The process's own RSS, CPU seconds and open fds (process_* families).
        m.registry.register(Box::new(process::ProcessMetrics::new()))?;
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), env!("NODEMEDIC_REVISION")])
            .set(1);
        // Every rule and severity present from the start, so absent means "not scraped".
        for reason in [
            "OutOfcpu",
            "OutOfmemory",
            "OutOfpods",
            "OutOfephemeral-storage",
            "OutOfExtendedResource",
            "UnexpectedAdmissionError",
            "Other",
        ] {
            m.admission_rejections_total.with_label_values(&[reason]);
        }
        for rule in rules::ALL {
            m.events_emitted_total.with_label_values(&[rule.event_reason]);
            m.rule_firing.with_label_values(&[rule.id.as_str()]).set(0);
            for sev in [Severity::Critical, Severity::Warning, Severity::Info] {
                m.findings.with_label_values(&[rule.id.as_str(), sev.as_str()]).set(0);
            }
        }
        Ok(m)
    }

    /// Sets `nodemedic_rule_judged` from a scan's coverage.
    pub fn observe_coverage(
        &self,
        coverage: &std::collections::BTreeMap<&'static str, nodemedic_rules::coverage::Coverage>,
    ) {
        for (rule, c) in coverage {
            if matches!(c, nodemedic_rules::coverage::Coverage::Disabled) {
                let _ = self.rule_judged.remove_label_values(&[rule]);
            } else {
                self.rule_judged.with_label_values(&[rule]).set(i64::from(c.judged()));
            }
        }
    }

    /// The findings of the last judgement are still current (nothing they were judged from
    /// has changed): `nodemedic_last_scan_timestamp_seconds` moves on.
    pub fn confirmed_current(&self) {
        set_to_now(&self.last_scan_timestamp_seconds);
        self.scan_loop_turn("current");
    }

    /// One turn of the scan loop, by outcome ([`TURN_OUTCOMES`]).
    pub fn scan_loop_turn(&self, outcome: &'static str) {
        self.scan_loop_turns_total.with_label_values(&[outcome]).inc();
    }

    /// The gauges made of findings alone: each rule's firing and findings by severity, and the
    /// gauges rules declare over their findings.
    pub fn observe_findings(&self, findings: &[Finding]) {
        let firing: BTreeSet<&str> = findings.iter().map(|f| f.rule.as_str()).collect();
        for rule in rules::ALL {
            self.rule_firing
                .with_label_values(&[rule.id.as_str()])
                .set(i64::from(firing.contains(rule.id.as_str())));
            for sev in [Severity::Critical, Severity::Warning, Severity::Info] {
                let n = findings
                    .iter()
                    .filter(|f| f.rule == rule.id && f.severity == sev)
                    .count();
                self.findings
                    .with_label_values(&[rule.id.as_str(), sev.as_str()])
                    .set(n as i64);
            }
        }
        for (rule, gauge, metric) in &self.rule_gauges {
            let its: Vec<&Finding> = findings.iter().filter(|f| f.rule.as_str() == *rule).collect();
            metric.set(i64::try_from((gauge.value)(&its)).unwrap_or(i64::MAX));
        }
    }

    /// Sets the gauges from a scan.
    pub fn observe_scan(&self, snap: &NodeSnapshot, facts: &Facts, findings: &[Finding], records: &Records) {
        for r in records.iter() {
            self.collector_duration_seconds
                .with_label_values(&[r.name])
                .set(r.duration.as_secs_f64());
            self.collector_success
                .with_label_values(&[r.name])
                .set(i64::from(!r.failed));
        }
        self.observe_findings(findings);
        self.storage.observe(snap, facts);
        let state = snap.host.checkpoint.ok().and_then(|f| f.state.as_ref().ok());
        if let Some(state) = state {
            let exclusive = state
                .assignments
                .iter()
                .fold(nodemedic_rules::CpuSet::new(), |acc, a| acc.union(&a.cpus));
            self.cpu_manager_exclusive_cpus.set(exclusive.len() as i64);
            self.cpu_manager_default_cpus.set(state.default_cpus.len() as i64);
            self.cpu_manager_stale_cpus.set(facts.stale_cpus.len() as i64);
        } else {
            self.cpu_manager_exclusive_cpus.set(0);
            self.cpu_manager_default_cpus.set(0);
            self.cpu_manager_stale_cpus.set(0);
        }
        // Series only for what the static policy is known to hold now.
        self.exclusive_cpus.reset();
        if let Some((nodes, _)) = &facts.numa {
            for ((node, state), n) in nodemedic_rules::facts::exclusive_cpu_counts(nodes) {
                self.exclusive_cpus
                    .with_label_values(&[node.to_string().as_str(), state])
                    .set(n as i64);
            }
        }
        self.observe_managers(snap, facts);
        if let Ok(mut seen) = self.counted_rejections.lock() {
            let here: std::collections::HashSet<&str> = snap.pods.bound.iter().map(|p| p.uid.as_str()).collect();
            for r in &facts.rejections {
                if seen.insert(r.pod.uid.clone()) {
                    let reason = facts::metric_reason(r.reason);
                    self.admission_rejections_total.with_label_values(&[reason]).inc();
                }
            }
            // Forget pods that are gone, so the set stays as small as the node.
            seen.retain(|uid| here.contains(uid.as_str()));
        }
        set_to_now(&self.last_scan_timestamp_seconds);
    }

    /// The memory, device and DRA managers' gauges: series only for what the files hold now.
    fn observe_managers(&self, snap: &NodeSnapshot, facts: &Facts) {
        let saturating = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.memory_manager_bytes.reset();
        self.memory_manager_stale_bytes.reset();
        if let Some(state) = snap.host.managers.memory.ok().and_then(|f| f.accepted_state()) {
            for numa in &state.numa_nodes {
                let id = numa.id.to_string();
                for t in &numa.resources {
                    for (what, v) in [
                        ("allocatable", t.allocatable),
                        ("reserved", t.reserved),
                        ("free", t.free),
                    ] {
                        self.memory_manager_bytes
                            .with_label_values(&[id.as_str(), t.resource.as_str(), what])
                            .set(saturating(v));
                    }
                }
            }
            for ((numa, resource), bytes) in nodemedic_rules::facts::stale_memory_bytes(&facts.stale_memory) {
                let nodes = numa.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                self.memory_manager_stale_bytes
                    .with_label_values(&[nodes.as_str(), resource.as_str()])
                    .set(saturating(bytes));
            }
        }
        self.devices_checkpointed.reset();
        if let Some(state) = snap.host.managers.devices.ok().and_then(|f| f.accepted_state()) {
            // Distinct device IDs: a device on two NUMA nodes is listed under each.
            let mut ids: std::collections::BTreeMap<(&str, &str), BTreeSet<&str>> = Default::default();
            for (resource, registered) in &state.registered {
                ids.entry((resource.as_str(), "registered"))
                    .or_default()
                    .extend(registered.iter().map(String::as_str));
            }
            for e in &state.entries {
                ids.entry((e.resource.as_str(), "allocated"))
                    .or_default()
                    .extend(e.devices.iter().map(|d| d.id.as_str()));
            }
            for (resource, devices) in nodemedic_rules::facts::stale_device_ids(&facts.stale_devices) {
                ids.entry((resource, "stale"))
                    .or_default()
                    .extend(devices.iter().map(|d| d.id.as_str()));
            }
            for ((resource, state), set) in ids {
                self.devices_checkpointed
                    .with_label_values(&[resource, state])
                    .set(set.len() as i64);
            }
        }
        self.dra_prepared_claims.reset();
        let stale = &facts.stale_claims;
        let stale_in = |source: &str| {
            stale
                .iter()
                .filter(|c| match c.source {
                    facts::ClaimSource::Kubelet => source == "kubelet",
                    facts::ClaimSource::Driver(format, _) => source == format.name(),
                })
                .count()
        };
        // Two files of one driver format (two installs) add up.
        let mut totals: std::collections::BTreeMap<&str, usize> = Default::default();
        if let Some(state) = snap.host.managers.dra.ok().and_then(|f| f.accepted_state()) {
            totals.insert("kubelet", state.claims.len());
        }
        for d in &snap.host.managers.drivers {
            if let Some(claims) = d.claims.ok() {
                *totals.entry(d.format.name()).or_default() += claims.len();
            }
        }
        for (source, total) in totals {
            let stale = stale_in(source);
            self.dra_prepared_claims
                .with_label_values(&[source, "live"])
                .set(total.saturating_sub(stale) as i64);
            self.dra_prepared_claims
                .with_label_values(&[source, "stale"])
                .set(stale as i64);
        }
    }

    /// The configuration in force was read without error just now (at start or on SIGHUP).
    pub fn configuration_loaded(&self) {
        self.config_last_reload_successful.set(1);
        set_to_now(&self.config_last_reload_success_timestamp_seconds);
    }

    /// Records one round of API probes: each probe's duration. (`api_up` is the record of
    /// every request's, `ApiContact::export_up`.)
    pub fn observe_probes(&self, round: &[nodemedic_rules::snapshot::ProbeSample]) {
        for s in round {
            self.api_request_duration_seconds
                .with_label_values(&[s.probe.as_str()])
                .observe(s.total_seconds);
        }
    }

    /// The exposition text of every metric.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_help_and_type() {
        let m = Metrics::new().unwrap();
        let snap = NodeSnapshot::empty("n", 0);
        let mut records = Records::default();
        records.observe("checkpoint", || snap.host.checkpoint.clone());
        m.observe_scan(
            &snap,
            &facts::derive(&snap, &nodemedic_rules::Settings::default()),
            &[],
            &records,
        );
        let text = m.render();
        for name in [
            "nodemedic_build_info",
            "nodemedic_collector_success",
            "nodemedic_last_scan_timestamp_seconds",
            "nodemedic_findings",
            "nodemedic_rule_firing",
            "nodemedic_cpu_manager_stale_cpus",
            "nodemedic_orphaned_executors",
            "nodemedic_half_submitted_drivers",
            "nodemedic_orphaned_local_dir_bytes",
            "nodemedic_pod_watch_up",
            "nodemedic_host_watches",
            "nodemedic_prober",
        ] {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}");
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        }
        assert!(text.contains("nodemedic_rule_firing{rule=\"stale-cpu-assignment\"} 0"));
    }
}
