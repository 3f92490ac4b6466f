//! A core `v1` Event as nodemedic reads it from the API: [`EventObject`], only the fields the
//! rules use (with the API's names), and [`pod_event`], which turns it into the rules'
//! [`PodEvent`].
//!
//! Events written through `events.k8s.io/v1` read back in core `v1` with `count` and the last
//! time in `series` and no `firstTimestamp`/`lastTimestamp`, and with `reportingComponent`
//! instead of `source` (kubernetes `pkg/apis/core/v1` conversion of Events): both forms are read.
//! Times are read leniently: one a client wrote badly costs its field, not the list.

use nodemedic_rules::snapshot::PodEvent;

/// A core `v1` `EventList`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct EventList {
    #[serde(default)]
    pub items: Vec<EventObject>,
}

/// A core `v1` `Event`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventObject {
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub source: Option<EventSource>,
    #[serde(default)]
    pub reporting_component: Option<String>,
    #[serde(default)]
    pub count: Option<i64>,
    #[serde(default)]
    pub series: Option<EventSeries>,
    #[serde(default)]
    pub first_timestamp: Option<String>,
    #[serde(default)]
    pub last_timestamp: Option<String>,
    #[serde(default)]
    pub event_time: Option<String>,
}

/// `v1 EventSource`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct EventSource {
    #[serde(default)]
    pub component: Option<String>,
}

/// `v1 EventSeries`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventSeries {
    #[serde(default)]
    pub count: Option<i64>,
    #[serde(default)]
    pub last_observed_time: Option<String>,
}

/// An RFC 3339 time as unix seconds; `None` when absent or unreadable.
fn unix(text: Option<&str>) -> Option<i64> {
    text?.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// The rules' view of an Event: its type, reason, message, who reported it, how often and when.
pub fn pod_event(e: &EventObject) -> PodEvent {
    let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    let series = e.series.as_ref();
    let count = e
        .count
        .filter(|c| *c > 0)
        .or_else(|| series.and_then(|s| s.count))
        .unwrap_or(1);
    PodEvent {
        type_: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.message.clone().unwrap_or_default(),
        source: e
            .source
            .as_ref()
            .and_then(|s| non_empty(&s.component))
            .or_else(|| non_empty(&e.reporting_component)),
        count: u32::try_from(count.max(1)).unwrap_or(u32::MAX),
        first_at: unix(e.first_timestamp.as_deref()).or_else(|| unix(e.event_time.as_deref())),
        last_at: unix(e.last_timestamp.as_deref())
            .or_else(|| unix(series.and_then(|s| s.last_observed_time.as_deref())))
            .or_else(|| unix(e.event_time.as_deref())),
    }
}

/// The Events of a core `v1` `EventList` answer.
pub fn parse_event_list(text: &[u8]) -> Result<Vec<PodEvent>, serde_json::Error> {
    let list: EventList = serde_json::from_slice(text)?;
    Ok(list.items.iter().map(pod_event).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_event_apis_read_alike() {
        let list = br#"{"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "812"},
          "items": [
            {"metadata": {"name": "etl-driver-b.17a", "namespace": "spark-jobs"},
             "involvedObject": {"kind": "Pod", "namespace": "spark-jobs", "name": "etl-driver-b", "uid": "2f7c"},
             "reason": "FailedAttachVolume",
             "message": "Multi-Attach error for volume \"pvc-7f3a\" Volume is already exclusively attached to one node and can't be attached to another",
             "source": {"component": "attachdetach-controller"},
             "firstTimestamp": "2026-03-02T10:00:00Z", "lastTimestamp": "2026-03-02T10:00:00Z",
             "count": 1, "type": "Warning", "eventTime": null, "reportingComponent": ""},
            {"metadata": {"name": "etl-driver-b.17b", "namespace": "spark-jobs"},
             "involvedObject": {"kind": "Pod", "uid": "2f7c"},
             "reason": "FailedMount", "message": "Unable to attach or mount volumes: x",
             "source": {}, "firstTimestamp": null, "lastTimestamp": null,
             "eventTime": "2026-03-02T10:01:00.000000Z",
             "series": {"count": 4, "lastObservedTime": "2026-03-02T10:07:00.123456Z"},
             "type": "Warning", "reportingComponent": "kubelet"},
            {"reason": "Scheduled", "type": "Normal", "lastTimestamp": "not a time"}
          ]}"#;
        let events = parse_event_list(list).unwrap();
        assert_eq!(events.len(), 3);
        let t = |s: &str| s.parse::<jiff::Timestamp>().unwrap().as_second();
        assert_eq!(
            events[0],
            PodEvent {
                type_: "Warning".into(),
                reason: "FailedAttachVolume".into(),
                message: "Multi-Attach error for volume \"pvc-7f3a\" Volume is already exclusively attached to one \
                          node and can't be attached to another"
                    .into(),
                source: Some("attachdetach-controller".into()),
                count: 1,
                first_at: Some(t("2026-03-02T10:00:00Z")),
                last_at: Some(t("2026-03-02T10:00:00Z")),
            }
        );
        assert_eq!(events[1].source.as_deref(), Some("kubelet"));
        assert_eq!(events[1].count, 4);
        assert_eq!(events[1].first_at, Some(t("2026-03-02T10:01:00Z")));
        assert_eq!(events[1].last_at, Some(t("2026-03-02T10:07:00Z")));
        assert_eq!(
            (events[2].count, events[2].last_at, events[2].source.clone()),
            (1, None, None)
        );
        assert!(parse_event_list(b"{\"items\": 3}").is_err());
    }
}
