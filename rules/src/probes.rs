//! The agent's timed API probes, read for the API rules: which samples count, their statistics
//! and where a request's time went.
//!
//! The agent times each request like `curl -w` does (DNS, connect, TLS, first byte, total):
//! the read probes `get` (`/version`) and `list` (this node's pods, `limit=1`), and the dry-run
//! pod create [`DRY_RUN_PROBE`]. The rules take the samples of the last
//! `api_latency_window_seconds` (`recent`), their median ([`stats`]) and the phase that took
//! longest (`dominant_phase`).

use serde_json::{Value, json};

use crate::settings::Settings;
use crate::snapshot::{ApiObservation, NodeSnapshot, Observed, ProbeSample, WebhookInfo};
use crate::text::ms;

/// The read probes.
pub const READ_PROBES: [&str; 2] = ["get", "list"];

/// The dry-run create probe.
pub const DRY_RUN_PROBE: &str = "create_dry_run";

/// The API observation, when the API was probed.
pub(crate) fn api(snap: &NodeSnapshot) -> Option<&ApiObservation> {
    match &snap.api.server {
        Observed::Ok(api) => Some(api),
        _ => None,
    }
}

/// The samples taken within the window before the snapshot (or after it: `probe api` takes the
/// snapshot's time first).
pub(crate) fn recent<'a>(
    api: &'a ApiObservation,
    snap: &NodeSnapshot,
    settings: &Settings,
) -> impl Iterator<Item = &'a ProbeSample> {
    let since = snap.taken_at.saturating_sub(settings.api_latency_window_seconds);
    api.samples.iter().filter(move |s| s.at >= since)
}

/// Median, minimum and maximum of the finite values (`None` when there are none).
pub fn stats(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((median, v[0], v[n - 1]))
}

/// Median, minimum and maximum total time of `samples` and the slowest of them, over those
/// with a finite time (`None` when there are none).
pub(crate) fn spread<'a>(samples: &[&'a ProbeSample]) -> Option<(f64, f64, f64, &'a ProbeSample)> {
    let (median, min, max) = stats(samples.iter().map(|s| s.total_seconds))?;
    let slowest = samples
        .iter()
        .copied()
        .filter(|s| s.total_seconds.is_finite())
        .max_by(|a, b| a.total_seconds.total_cmp(&b.total_seconds))?;
    Some((median, min, max, slowest))
}

/// A phase of a request, in the order they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Dns,
    Connect,
    Tls,
    FirstByte,
    Transfer,
}

impl Phase {
    /// The evidence word.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Dns => "dns",
            Phase::Connect => "connect",
            Phase::Tls => "tls",
            Phase::FirstByte => "first_byte",
            Phase::Transfer => "transfer",
        }
    }
}

/// How long each phase of `s` took, seconds, from its cumulative end times. A phase that did not
/// happen (a reused connection, a name that is an IP) takes 0. For a sample that got no answer,
/// the time after the last phase it reached goes to the phase it was stuck in (connect, TLS, or
/// waiting for the first byte), not to the transfer.
pub(crate) fn phase_durations(s: &ProbeSample) -> [(Phase, f64); 5] {
    let pos = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    let total = pos(s.total_seconds);
    // The end of each phase; one not reached ends where the one before did.
    let dns = pos(s.dns_seconds).min(total);
    let connect = pos(s.connect_seconds).clamp(dns, total);
    let tls = pos(s.tls_seconds).clamp(connect, total);
    let first_byte = pos(s.first_byte_seconds).clamp(tls, total);
    let mut d = [dns, connect - dns, tls - connect, first_byte - tls, total - first_byte];
    if !s.ok && s.first_byte_seconds <= 0.0 {
        let stuck = if s.tls_seconds > 0.0 {
            3
        } else if s.connect_seconds > 0.0 {
            2
        } else {
            1
        };
        d[stuck] += d[4];
        d[4] = 0.0;
    }
    [
        (Phase::Dns, d[0]),
        (Phase::Connect, d[1]),
        (Phase::Tls, d[2]),
        (Phase::FirstByte, d[3]),
        (Phase::Transfer, d[4]),
    ]
}

/// The phase that took longest in `s`, and how long.
pub(crate) fn dominant_phase(s: &ProbeSample) -> (Phase, f64) {
    phase_durations(s)
        .into_iter()
        .fold((Phase::FirstByte, -1.0), |best, p| if p.1 > best.1 { p } else { best })
}

/// A sample's timing as evidence: the cumulative end times as `curl -w` reports them.
pub(crate) fn sample_json(s: &ProbeSample) -> Value {
    let mut v = json!({
        "probe": s.probe,
        "at": s.at,
        "dns_seconds": ms(s.dns_seconds),
        "connect_seconds": ms(s.connect_seconds),
        "tls_seconds": ms(s.tls_seconds),
        "first_byte_seconds": ms(s.first_byte_seconds),
        "total_seconds": ms(s.total_seconds),
    });
    if let (Some(map), Some(status)) = (v.as_object_mut(), s.status) {
        map.insert("status".into(), status.into());
    }
    if let (Some(map), Some(error)) = (v.as_object_mut(), &s.error) {
        map.insert("error".into(), error.clone().into());
    }
    v
}

/// Whether a probe failed because a matching webhook does not support dry run (the API
/// server's `admission webhook "<name>" does not support dry run`, HTTP 400).
pub fn is_dry_run_unsupported(s: &ProbeSample) -> bool {
    !s.ok
        && s.status == Some(400)
        && s.error
            .as_deref()
            .is_some_and(|e| e.contains("does not support dry run"))
}

/// A webhook as evidence.
pub(crate) fn webhook_json(w: &WebhookInfo) -> Value {
    let mut v = json!({
        "name": w.name,
        "configuration": w.configuration,
        "kind": w.kind,
        "timeout_seconds": w.timeout_seconds,
        "failure_policy": w.failure_policy,
        "side_effects": w.side_effects,
        "matches_probe": w.matches_probe,
    });
    if let Some(map) = v.as_object_mut() {
        if !w.matches_namespaces.is_empty() {
            map.insert("namespaces".into(), json!(w.matches_namespaces));
        }
        if let Some(mean) = w.mean_latency_seconds {
            map.insert("mean_latency_seconds".into(), ms(mean).into());
        }
    }
    v
}

/// Seconds until a probe sample in the window now leaves it (`api_latency_window_seconds`
/// after it was taken): the rules that judge the window (`slow-api`, `slow-pod-admission`,
/// `webhook-blocks-dry-run`) judge again then. Each probe round, which brings new samples, is
/// a judgement of its own.
pub fn window_turn(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    let api = api(snap)?;
    recent(api, snap, settings)
        // In the window while `at >= taken_at - window`: gone a second after.
        .map(|s| (s.at + settings.api_latency_window_seconds - snap.taken_at) as f64 + 1.0)
        .filter(|left| *left > 0.0)
        .min_by(f64::total_cmp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::probe_failed;

    #[test]
    fn a_sample_without_an_answer_blames_what_it_waited_for() {
        // A sample that got no answer: the time goes to what it was waiting for.
        let waited = probe_failed("create_dry_run", 0, None, "timeout", 10.0);
        let connected = ProbeSample {
            connect_seconds: 0.01,
            tls_seconds: 0.02,
            ..waited.clone()
        };
        assert_eq!(dominant_phase(&connected).0, Phase::FirstByte);
        assert_eq!(dominant_phase(&waited).0, Phase::Connect);
        let resolved = ProbeSample {
            dns_seconds: 0.0001,
            ..waited.clone()
        };
        assert_eq!(
            dominant_phase(&resolved).0,
            Phase::Connect,
            "the probe sets dns even for an IP"
        );
        let handshaking = ProbeSample {
            dns_seconds: 0.0001,
            connect_seconds: 0.002,
            ..waited.clone()
        };
        assert_eq!(dominant_phase(&handshaking).0, Phase::Tls);
        let total: f64 = phase_durations(&connected).iter().map(|p| p.1).sum();
        assert!((total - 10.0).abs() < 1e-9);
    }

    #[test]
    fn stats_of_odd_and_even_counts() {
        assert_eq!(stats([3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(stats([4.0, 1.0, 2.0, 3.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(stats([f64::NAN]), None);
        assert_eq!(stats([]), None);
    }
}
