//! The end-to-end tests: the real `nodemedic` binary against fixture host trees, the in-repo
//! API server double, the fake kubelet and real cgroup v1 hierarchies. One file per area, each
//! a module of this one test binary (tests/README.md says what each covers).

mod admission;
mod apiserver;
mod bad_input;
mod budget;
mod cgroup_v1;
mod daemon;
mod dashboard;
mod detection;
mod events_restart;
mod example;
mod faults;
mod fencing;
mod fleet;
mod floor;
mod fuzz;
mod golden;
mod half_submitted;
mod helm;
mod kubelet_config;
mod local_storage;
mod manifests;
mod node_resource_topology;
mod one_pipeline;
mod outage;
mod partition_rule;
mod plugin;
mod podresources;
mod privacy;
mod probes;
mod release;
mod repair_cli;
mod repair_cpu_state;
mod repair_local_dirs;
mod repair_pods;
mod repair_safety;
mod resource_managers;
mod ship;
mod slow_api;
mod spark_client;
mod storage_bench;
mod unknown_verdict;
mod watch_health;
