//! Pods the kubelet refused at admission, and what their messages say.

use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, PodInfo, PodPhase, PodSource};

/// Reasons only the kubelet's admission sets (besides `OutOf<resource>`): the predicate
/// admit handler's own reasons, the scheduler predicates it re-runs (current and pre-1.19
/// names), and the topology manager's.
const KUBELET_REASONS: &[&str] = &[
    "UnexpectedAdmissionError",
    "UnknownReason",
    "UnexpectedPredicateFailureType",
    "InvalidNodeInfo",
    "PodOSSelectorNodeLabelDoesNotMatch",
    "PodOSNotSupported",
    "InitContainerRestartPolicyForbidden",
    "SupplementalGroupsPolicyNotSupported",
    "NodeAffinity",
    "NodeName",
    "NodePorts",
    "TaintToleration",
    "MatchNodeSelector",
    "HostName",
    "PodFitsHostPorts",
    "TopologyAffinityError",
];

/// What `Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000`
/// says (the kubelet's `InsufficientResourceError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insufficient {
    /// `cpu`, `memory`, `pods`, `ephemeral-storage`, or an extended resource (`nvidia.com/gpu`).
    pub resource: String,
    /// What the pod asked for.
    pub requested: i64,
    /// What the pods the kubelet had admitted asked for.
    pub used: i64,
    /// The node's allocatable.
    pub capacity: i64,
}

impl Insufficient {
    /// The unit of the numbers: `millicores` (cpu), `bytes` (memory, ephemeral-storage,
    /// hugepages-*), `count` (pods and extended resources).
    pub fn unit(&self) -> &'static str {
        match self.resource.as_str() {
            "cpu" => "millicores",
            "memory" | "ephemeral-storage" => "bytes",
            r if r.starts_with("hugepages-") => "bytes",
            _ => "count",
        }
    }

    /// How much was missing: requested minus what was left.
    pub fn shortfall(&self) -> i64 {
        self.requested.saturating_sub(self.capacity.saturating_sub(self.used))
    }
}

/// Reads the kubelet's "not enough resource" message, in either form:
/// `Pod was rejected: Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000`
/// or the older `Pod Node didn't have enough resource: ...`.
pub fn parse_insufficient(message: &str) -> Option<Insufficient> {
    const MARK: &str = "Node didn't have enough resource: ";
    let (_, rest) = message.split_once(MARK)?;
    let mut parts = rest.splitn(4, ", ");
    let resource = parts.next()?.trim();
    let mut number = |name: &str| -> Option<i64> {
        let value = parts.next()?.trim().strip_prefix(name)?.trim_start();
        let end = value
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
            .map_or(value.len(), |(i, _)| i);
        value[..end].parse().ok()
    };
    let requested = number("requested:")?;
    let used = number("used:")?;
    let capacity = number("capacity:")?;
    (!resource.is_empty()).then(|| Insufficient {
        resource: resource.to_string(),
        requested,
        used,
        capacity,
    })
}

/// Whether `reason` is one the kubelet sets when it refuses a pod at admission.
pub fn is_rejection_reason(reason: &str) -> bool {
    (reason.len() > "OutOf".len() && reason.starts_with("OutOf")) || KUBELET_REASONS.contains(&reason)
}

/// A pod the kubelet refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection<'a> {
    pub pod: &'a PodInfo,
    /// `status.reason`.
    pub reason: &'a str,
    /// The numbers of an `OutOf*` message.
    pub insufficient: Option<Insufficient>,
}

/// Whether `pod` was refused by the kubelet: `Failed` with a kubelet admission reason, or
/// with any reason and a message starting `Pod was rejected: ` (other admit handlers).
pub fn rejected_reason(pod: &PodInfo) -> Option<&str> {
    if pod.phase != PodPhase::Failed {
        return None;
    }
    let reason = pod.reason.as_deref().filter(|r| !r.is_empty())?;
    let says_so = pod
        .message
        .as_deref()
        .is_some_and(|m| m.starts_with("Pod was rejected: "));
    (is_rejection_reason(reason) || says_so).then_some(reason)
}

/// A bounded label value for a rejection reason (`nodemedic_admission_rejections_total`): the
/// core `OutOf<resource>` reasons and the kubelet's own reasons as they are, any other
/// `OutOf<extended resource>` as `OutOfExtendedResource`, anything else as `Other`. A pod's
/// `status.reason` is free text its writer controls and must not become a label as is.
pub fn metric_reason(reason: &str) -> &str {
    match reason {
        "OutOfcpu" | "OutOfmemory" | "OutOfpods" | "OutOfephemeral-storage" => reason,
        r if r.starts_with("OutOf") => "OutOfExtendedResource",
        r if KUBELET_REASONS.contains(&r) => r,
        _ => "Other",
    }
}

/// Every rejected pod on this node, whatever its age, in pod list order.
pub fn rejections(snap: &NodeSnapshot) -> Vec<Rejection<'_>> {
    crate::facts::count("rejections");
    snap.pods
        .bound
        .iter()
        .filter_map(|pod| {
            let reason = rejected_reason(pod)?;
            Some(Rejection {
                pod,
                reason,
                insufficient: pod.message.as_deref().and_then(parse_insufficient),
            })
        })
        .collect()
}

/// Whether a rejection counts now: from the live API only pods created within
/// `rejection_window_seconds` (a pod with no creation time counts); from a file all.
pub(crate) fn is_recent(snap: &NodeSnapshot, settings: &Settings, r: &Rejection) -> bool {
    snap.pods.source != PodSource::Api
        || r.pod
            .created_at
            .is_none_or(|t| snap.taken_at - t <= settings.rejection_window_seconds)
}

/// Whether a pod failed because the CPU manager had no CPUs for it.
pub fn rejected_for_cpus(pod: &PodInfo) -> bool {
    let message = pod.message.as_deref().unwrap_or("").to_ascii_lowercase();
    if message.contains("not enough cpus available") {
        return true;
    }
    pod.phase == PodPhase::Failed
        && pod.reason.as_deref() == Some("UnexpectedAdmissionError")
        && message.contains("cpu")
}

/// Seconds until a rejection counted now (from the live API) leaves `rejection_window_seconds`:
/// the rules that count recent rejections (`admission-rejection`, `exclusive-cpu-shortage`,
/// `device-admission-failure`, `scheduler-conflict`) judge again then. `None` when none is
/// counted, or from a file (judged as captured).
pub fn rejection_window_turn(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    if snap.pods.source != PodSource::Api {
        return None;
    }
    snap.pods
        .bound
        .iter()
        .filter(|p| rejected_reason(p).is_some() || rejected_for_cpus(p))
        .filter_map(|p| p.created_at)
        // Counted while `taken_at - created <= window`: gone a second after.
        .map(|created| (created + settings.rejection_window_seconds - snap.taken_at) as f64 + 1.0)
        .filter(|left| *left > 0.0)
        .min_by(f64::total_cmp)
}
