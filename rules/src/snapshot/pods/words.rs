//! The words the API and Spark write on a pod, as enums: its phase ([`PodPhase`]), its QoS class
//! ([`QosClass`]) and its Spark role ([`SparkRole`]).
//!
//! Each enum names the words this version knows and keeps any other as `Other(text)`: reading
//! never fails, and the text comes back unchanged in `as_str`, `Display`, JSON and `String`, so
//! the report, Events and notes print exactly what the API said. A value built with `From`
//! (or deserialized) never holds a known word in `Other`, so `==` and `match` agree.

/// Declares an open enum of the words one field holds (see the module's documentation).
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A word this version does not know, as written.
            Other(String),
        }

        impl $name {
            /// The word as the API (or Spark) writes it.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Other(text) => text,
                }
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                match text {
                    $($text => $name::$variant,)+
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                match text.as_str() {
                    $($text => $name::$variant,)+
                    _ => $name::Other(text),
                }
            }
        }

        impl From<$name> for String {
            fn from(word: $name) -> String {
                match word {
                    $name::Other(text) => text,
                    known => known.as_str().to_string(),
                }
            }
        }

        /// As a finding's evidence: the word as a JSON string.
        impl From<$name> for serde_json::Value {
            fn from(word: $name) -> serde_json::Value {
                serde_json::Value::String(word.into())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                String::deserialize(deserializer).map($name::from)
            }
        }
    };
}

open_enum! {
    /// `status.phase` of a pod (k8s.io/api `core/v1/types.go`, `PodPhase`). A pod object
    /// without one is `Pending`, as the API server defaults it (the `Default`).
    #[derive(Default)]
    PodPhase {
        /// Accepted, one or more containers not started yet (binding, image pulls included).
        #[default]
        Pending = "Pending",
        /// Bound to a node, all containers started, at least one running or restarting.
        Running = "Running",
        /// Every container ended with exit code 0 and will not restart.
        Succeeded = "Succeeded",
        /// Every container ended, at least one in failure (or the kubelet rejected the pod).
        Failed = "Failed",
        /// The state could not be obtained (deprecated upstream: not set since 2015).
        Unknown = "Unknown",
    }
}

impl PodPhase {
    /// Whether the pod has finished: `Succeeded` or `Failed` (its containers will not run again).
    pub fn is_terminal(&self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

open_enum! {
    /// `status.qosClass` of a pod (k8s.io/api `core/v1/types.go`, `PodQOSClass`).
    QosClass {
        /// Every container has CPU and memory limits equal to its requests.
        Guaranteed = "Guaranteed",
        /// Some request or limit is set, but the pod is not `Guaranteed`.
        Burstable = "Burstable",
        /// No container sets a CPU or memory request or limit.
        BestEffort = "BestEffort",
    }
}

open_enum! {
    /// The value of a pod's `spark-role` label (`crate::spark::ROLE`), as Spark sets it.
    SparkRole {
        /// `driver` (`crate::spark::DRIVER`).
        Driver = "driver",
        /// `executor` (`crate::spark::EXECUTOR`).
        Executor = "executor",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every known word parses to its variant and prints back unchanged; an unknown word,
    /// different case and the empty string survive as `Other` and print unchanged.
    #[test]
    fn known_words_round_trip_and_unknown_ones_survive_as_other() {
        let phases = [
            ("Pending", PodPhase::Pending),
            ("Running", PodPhase::Running),
            ("Succeeded", PodPhase::Succeeded),
            ("Failed", PodPhase::Failed),
            ("Unknown", PodPhase::Unknown),
            ("Evicted", PodPhase::Other("Evicted".into())),
            ("running", PodPhase::Other("running".into())),
            ("", PodPhase::Other(String::new())),
        ];
        for (text, want) in phases {
            assert_words(text, want);
        }
        let classes = [
            ("Guaranteed", QosClass::Guaranteed),
            ("Burstable", QosClass::Burstable),
            ("BestEffort", QosClass::BestEffort),
            ("Besteffort", QosClass::Other("Besteffort".into())),
        ];
        for (text, want) in classes {
            assert_words(text, want);
        }
        let roles = [
            ("driver", SparkRole::Driver),
            ("executor", SparkRole::Executor),
            ("Driver", SparkRole::Other("Driver".into())),
            ("shuffle-service", SparkRole::Other("shuffle-service".into())),
        ];
        for (text, want) in roles {
            assert_words(text, want);
        }
        assert_eq!(SparkRole::Driver.as_str(), crate::spark::DRIVER);
        assert_eq!(SparkRole::Executor.as_str(), crate::spark::EXECUTOR);
    }

    fn assert_words<T>(text: &str, want: T)
    where
        T: for<'a> From<&'a str> + From<String> + Into<String> + Into<serde_json::Value>,
        T: std::fmt::Display + std::fmt::Debug + PartialEq + Clone + serde::Serialize,
        T: serde::de::DeserializeOwned,
    {
        assert_eq!(T::from(text), want, "{text:?} from &str");
        assert_eq!(T::from(text.to_string()), want, "{text:?} from String");
        assert_eq!(want.to_string(), text, "{want:?} displayed");
        assert_eq!(Into::<String>::into(want.clone()), text, "{want:?} into String");
        let json = serde_json::to_string(&want).unwrap();
        assert_eq!(json, serde_json::to_string(text).unwrap(), "{want:?} as JSON");
        assert_eq!(serde_json::from_str::<T>(&json).unwrap(), want, "{json} from JSON");
        assert_eq!(
            Into::<serde_json::Value>::into(want.clone()),
            serde_json::json!(text),
            "{want:?} as evidence"
        );
    }

    #[test]
    fn terminal_phases_are_succeeded_and_failed_only() {
        let terminal: Vec<&str> = ["Pending", "Running", "Succeeded", "Failed", "Unknown", "Evicted", ""]
            .into_iter()
            .filter(|p| PodPhase::from(*p).is_terminal())
            .collect();
        assert_eq!(terminal, ["Succeeded", "Failed"]);
        assert_eq!(PodPhase::default(), PodPhase::Pending);
    }
}
