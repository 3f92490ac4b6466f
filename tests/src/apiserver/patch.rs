//! The three patch formats the API server accepts for built-in types:
//!
//! - JSON merge patch (`application/merge-patch+json`, RFC 7386): objects merge, `null`
//!   deletes, everything else (lists included) replaces.
//! - Strategic merge patch (`application/strategic-merge-patch+json`, apimachinery
//!   `pkg/util/strategicpatch`): like merge patch, but lists the Kubernetes types mark with
//!   `patchStrategy=merge` merge element by element on their `patchMergeKey` (conditions by
//!   `type`, containers by `name`, owner references by `uid`, ...), primitive merge lists
//!   (finalizers) take the union, and the `$patch`, `$setElementOrder/`,
//!   `$deleteFromPrimitiveList/` and `$retainKeys` directives kubectl sends are honoured.
//!   The double has no schemas: [`list_strategy`] names the merge lists of the types it serves.
//! - JSON patch (`application/json-patch+json`, RFC 6902): `add`, `remove`, `replace`,
//!   `move`, `copy`, `test` with JSON pointers.

use serde_json::{Map, Value};

/// How a strategic merge treats a list field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ListStrategy {
    /// The patch's list replaces the object's (`listType=atomic`, no patch strategy).
    Replace,
    /// Elements are objects merged by this key.
    MergeByKey(&'static str),
    /// Elements are scalars; the result is the union (`finalizers`, `podCIDRs`).
    MergePrimitive,
}

/// The patch strategy of the list at `path` (field names from the object's root, list
/// positions left out), taken from the `patchStrategy`/`patchMergeKey` tags of
/// `k8s.io/api` for pods, nodes, namespaces, events and webhook configurations.
pub(crate) fn list_strategy(path: &[String]) -> ListStrategy {
    use ListStrategy::*;
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["metadata", "ownerReferences"] => MergeByKey("uid"),
        ["metadata", "finalizers"] => MergePrimitive,
        [
            "spec",
            "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "imagePullSecrets",
        ] => MergeByKey("name"),
        ["spec", "resourceClaims" | "schedulingGates"] => MergeByKey("name"),
        ["spec", "hostAliases"] => MergeByKey("ip"),
        ["spec", "podCIDRs"] => MergePrimitive,
        ["spec", "containers" | "initContainers" | "ephemeralContainers", field] => match *field {
            "env" => MergeByKey("name"),
            "ports" => MergeByKey("containerPort"),
            "volumeMounts" => MergeByKey("mountPath"),
            "volumeDevices" => MergeByKey("devicePath"),
            "resizePolicy" => MergeByKey("resourceName"),
            _ => Replace,
        },
        ["status", "conditions" | "addresses"] => MergeByKey("type"),
        ["status", "podIPs" | "hostIPs"] => MergeByKey("ip"),
        ["status", "resourceClaimStatuses"] => MergeByKey("name"),
        ["webhooks"] => MergeByKey("name"),
        _ => Replace,
    }
}

/// Applies an RFC 7386 merge patch in place.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in patch_map {
            if v.is_null() {
                t.shift_remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch in place. `Err` for a patch that is not an object or whose
/// merge-list elements lack their merge key (a 400 from the API server too).
pub(crate) fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(p) = patch else {
        return Err("strategic merge patch must be a JSON object".into());
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let mut path = Vec::new();
    if let Value::Object(t) = target {
        merge_map(t, p, &mut path)?;
    }
    Ok(())
}

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

/// A patch value applied to nothing: directives stripped, nulls dropped.
fn fresh(patch: &Value, path: &mut Vec<String>) -> Result<Value, String> {
    match patch {
        Value::Object(p) => {
            let mut m = Map::new();
            merge_map(&mut m, p, path)?;
            Ok(Value::Object(m))
        }
        Value::Array(items) => {
            let mut out = Vec::new();
            merge_list(&mut out, items, path)?;
            Ok(Value::Array(out))
        }
        other => Ok(other.clone()),
    }
}

fn merge_map(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<(), String> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut stripped = patch.clone();
            stripped.remove("$patch");
            target.clear();
            return merge_map(target, &stripped, path);
        }
        Some("delete") => {
            target.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch type: {other}")),
    }
    for (k, pv) in patch {
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            target.shift_remove(k);
            continue;
        }
        path.push(k.clone());
        let result = merge_field(target, k, pv, path);
        path.pop();
        result?;
    }
    // Directives that refer to sibling fields, after the fields themselves have merged.
    for (k, pv) in patch {
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVE) {
            let remove = pv.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = target.get_mut(field) {
                list.retain(|x| !remove.contains(x));
            }
        }
    }
    for (k, pv) in patch {
        if let Some(field) = k.strip_prefix(SET_ORDER) {
            path.push(field.to_string());
            let strategy = list_strategy(path);
            path.pop();
            if let (Some(Value::Array(list)), Some(order)) = (target.get_mut(field), pv.as_array()) {
                reorder(list, order, strategy);
            }
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        target.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_field(target: &mut Map<String, Value>, key: &str, pv: &Value, path: &mut Vec<String>) -> Result<(), String> {
    match pv {
        Value::Object(pm) => {
            if directive(pv) == Some("delete") {
                target.shift_remove(key);
                return Ok(());
            }
            match target.get_mut(key) {
                Some(Value::Object(tm)) => merge_map(tm, pm, path),
                _ => {
                    let v = fresh(pv, path)?;
                    target.insert(key.to_string(), v);
                    Ok(())
                }
            }
        }
        Value::Array(items) => {
            let strategy = list_strategy(path);
            match (target.get_mut(key), strategy) {
                (Some(Value::Array(list)), ListStrategy::MergeByKey(_) | ListStrategy::MergePrimitive) => {
                    merge_list(list, items, path)
                }
                _ => {
                    let v = fresh(pv, path)?;
                    target.insert(key.to_string(), v);
                    Ok(())
                }
            }
        }
        other => {
            target.insert(key.to_string(), other.clone());
            Ok(())
        }
    }
}

/// Merges patch list `items` into `list` according to the strategy of `path`.
fn merge_list(list: &mut Vec<Value>, items: &[Value], path: &mut Vec<String>) -> Result<(), String> {
    let strategy = list_strategy(path);
    // `[{"$patch": "replace"}, ...]` replaces a merge list outright.
    if items
        .iter()
        .any(|i| directive(i) == Some("replace") && i.as_object().is_some_and(|m| m.len() == 1))
    {
        list.clear();
        for i in items.iter().filter(|i| directive(i) != Some("replace")) {
            list.push(fresh(i, path)?);
        }
        return Ok(());
    }
    match strategy {
        ListStrategy::Replace => {
            list.clear();
            for i in items {
                list.push(fresh(i, path)?);
            }
        }
        ListStrategy::MergePrimitive => {
            for i in items {
                if !list.contains(i) {
                    list.push(i.clone());
                }
            }
        }
        ListStrategy::MergeByKey(merge_key) => {
            for item in items {
                let Some(obj) = item.as_object() else {
                    return Err(format!("list {} holds a non-object element", path.join(".")));
                };
                let Some(kv) = obj.get(merge_key) else {
                    return Err(format!(
                        "map: {} does not contain declared merge key: {merge_key}",
                        Value::Object(obj.clone())
                    ));
                };
                let pos = list.iter().position(|e| e.get(merge_key) == Some(kv));
                if directive(item) == Some("delete") {
                    list.retain(|e| e.get(merge_key) != Some(kv));
                    continue;
                }
                match pos {
                    Some(i) => {
                        if let Value::Object(existing) = &mut list[i] {
                            merge_map(existing, obj, path)?;
                        } else {
                            list[i] = fresh(item, path)?;
                        }
                    }
                    None => list.push(fresh(item, path)?),
                }
            }
        }
    }
    Ok(())
}

/// `$setElementOrder`: elements named in `order` come first in that order, the rest keep
/// their relative order after them.
fn reorder(list: &mut Vec<Value>, order: &[Value], strategy: ListStrategy) {
    let key_of = |v: &Value| -> Value {
        match strategy {
            ListStrategy::MergeByKey(k) => v.get(k).cloned().unwrap_or(Value::Null),
            _ => v.clone(),
        }
    };
    let wanted: Vec<Value> = order.iter().map(&key_of).collect();
    let mut rest = std::mem::take(list);
    for w in &wanted {
        if let Some(i) = rest.iter().position(|e| &key_of(e) == w) {
            list.push(rest.remove(i));
        }
    }
    list.extend(rest);
}

/// Why a JSON patch failed: malformed (400) or not applicable to this object (422).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JsonPatchError {
    Malformed(String),
    Failed(String),
}

fn parse_pointer(p: &str) -> Result<Vec<String>, JsonPatchError> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(JsonPatchError::Malformed(format!(
            "JSON pointer must start with '/': {p:?}"
        )));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn get_at<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for t in path {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn parent_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, JsonPatchError> {
    let mut cur = doc;
    for t in path {
        let missing = || JsonPatchError::Failed(format!("missing path element {t:?}"));
        cur = match cur {
            Value::Object(m) => m.get_mut(t).ok_or_else(missing)?,
            Value::Array(a) => {
                let i = t.parse::<usize>().map_err(|_| missing())?;
                a.get_mut(i).ok_or_else(missing)?
            }
            _ => return Err(missing()),
        };
    }
    Ok(cur)
}

fn add_at(doc: &mut Value, path: &[String], value: Value) -> Result<(), JsonPatchError> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| JsonPatchError::Failed(format!("add operation index out of bounds: {last}")))?
            };
            a.insert(i, value);
            Ok(())
        }
        _ => Err(JsonPatchError::Failed(format!("cannot add {last:?} to a scalar"))),
    }
}

fn remove_at(doc: &mut Value, path: &[String]) -> Result<Value, JsonPatchError> {
    let Some((last, parent)) = path.split_last() else {
        return Err(JsonPatchError::Failed("cannot remove the whole document".into()));
    };
    let missing = || {
        JsonPatchError::Failed(format!(
            "remove operation does not apply: doc is missing path: {last:?}"
        ))
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => m.shift_remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < a.len())
                .ok_or_else(missing)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// Applies an RFC 6902 JSON patch in place (all or nothing).
pub(crate) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), JsonPatchError> {
    let Some(ops) = ops.as_array() else {
        return Err(JsonPatchError::Malformed(
            "a JSON patch must be an array of operations".into(),
        ));
    };
    let mut work = doc.clone();
    for op in ops {
        let name = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| JsonPatchError::Malformed(format!("operation without \"op\": {op}")))?;
        let path_str = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| JsonPatchError::Malformed(format!("operation without \"path\": {op}")))?;
        let path = parse_pointer(path_str)?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| JsonPatchError::Malformed(format!("{name} operation without \"value\": {op}")))
        };
        let from = || -> Result<Vec<String>, JsonPatchError> {
            let f = op
                .get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| JsonPatchError::Malformed(format!("{name} operation without \"from\": {op}")))?;
            parse_pointer(f)
        };
        match name {
            "add" => add_at(&mut work, &path, value()?)?,
            "remove" => {
                remove_at(&mut work, &path)?;
            }
            "replace" => {
                if path.is_empty() {
                    work = value()?;
                } else {
                    remove_at(&mut work, &path)?;
                    add_at(&mut work, &path, value()?)?;
                }
            }
            "move" => {
                let from = from()?;
                if path.len() > from.len() && path[..from.len()] == from[..] {
                    return Err(JsonPatchError::Failed("cannot move a value into itself".into()));
                }
                let v = remove_at(&mut work, &from)?;
                add_at(&mut work, &path, v)?;
            }
            "copy" => {
                let from = from()?;
                let v = get_at(&work, &from)
                    .cloned()
                    .ok_or_else(|| JsonPatchError::Failed(format!("copy from missing path {from:?}")))?;
                add_at(&mut work, &path, v)?;
            }
            "test" => {
                let want = value()?;
                if get_at(&work, &path) != Some(&want) {
                    return Err(JsonPatchError::Failed(format!("testing value {path_str} failed")));
                }
            }
            other => return Err(JsonPatchError::Malformed(format!("unexpected operation {other:?}"))),
        }
    }
    *doc = work;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386_examples() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
        let mut t = json!({"a": "b"});
        merge_patch(&mut t, &json!({"a": {"b": null, "c": 1}}));
        assert_eq!(t, json!({"a": {"c": 1}}));
    }

    #[test]
    fn node_conditions_merge_by_type() {
        let mut node = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "MemoryPressure", "status": "False"}
        ]}});
        let patch = json!({"status": {"conditions": [
            {"type": "CPUManagerStateStale", "status": "True", "reason": "StaleEntries"},
            {"type": "MemoryPressure", "status": "True"}
        ]}});
        strategic_merge_patch(&mut node, &patch).unwrap();
        assert_eq!(
            node["status"]["conditions"],
            json!([
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "MemoryPressure", "status": "True"},
                {"type": "CPUManagerStateStale", "status": "True", "reason": "StaleEntries"}
            ])
        );
        // The same patch as a JSON merge patch replaces the whole list.
        let mut node2 = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        merge_patch(&mut node2, &patch);
        assert_eq!(node2["status"]["conditions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn containers_env_and_owner_references_merge() {
        let mut pod = json!({
            "metadata": {"ownerReferences": [{"uid": "u1", "name": "d1"}], "finalizers": ["a"]},
            "spec": {"containers": [
                {"name": "app", "image": "x:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "y:1"}
            ], "tolerations": [{"key": "k1"}]}
        });
        let patch = json!({
            "metadata": {"ownerReferences": [{"uid": "u2", "name": "d2"}], "finalizers": ["b", "a"]},
            "spec": {"containers": [
                {"name": "app", "image": "x:2", "env": [{"name": "B", "value": "2"}]}
            ], "tolerations": [{"key": "k2"}]}
        });
        strategic_merge_patch(&mut pod, &patch).unwrap();
        assert_eq!(pod["metadata"]["ownerReferences"].as_array().unwrap().len(), 2);
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(pod["spec"]["containers"][0]["image"], "x:2");
        assert_eq!(
            pod["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(pod["spec"]["containers"][1]["name"], "side");
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([{"key": "k2"}]),
            "tolerations are atomic"
        );
    }

    #[test]
    fn directives() {
        let mut node = json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}, {"type": "C"}]},
                              "metadata": {"finalizers": ["x", "y"], "labels": {"a": "1", "b": "2"}}});
        let patch = json!({
            "status": {
                "$setElementOrder/conditions": [{"type": "C"}, {"type": "A"}],
                "conditions": [{"type": "B", "$patch": "delete"}, {"type": "C", "status": "True"}]
            },
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["x"], "labels": {"$patch": "replace", "c": "3"}}
        });
        strategic_merge_patch(&mut node, &patch).unwrap();
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "C", "status": "True"}, {"type": "A"}])
        );
        assert_eq!(node["metadata"]["finalizers"], json!(["y"]));
        assert_eq!(node["metadata"]["labels"], json!({"c": "3"}));

        let mut n = json!({"status": {"conditions": [{"type": "A"}]}});
        strategic_merge_patch(
            &mut n,
            &json!({"status": {"conditions": [{"$patch": "replace"}, {"type": "Z"}]}}),
        )
        .unwrap();
        assert_eq!(n["status"]["conditions"], json!([{"type": "Z"}]));

        let mut n = json!({"spec": {"x": {"y": 1}}, "keep": 1});
        strategic_merge_patch(
            &mut n,
            &json!({"spec": {"x": {"$patch": "delete"}}, "$retainKeys": ["spec"]}),
        )
        .unwrap();
        assert_eq!(n, json!({"spec": {}}));
    }

    #[test]
    fn strategic_errors_instead_of_panics() {
        let mut n = json!({"status": {"conditions": []}});
        assert!(strategic_merge_patch(&mut n, &json!({"status": {"conditions": [{"status": "True"}]}})).is_err());
        assert!(strategic_merge_patch(&mut n, &json!({"status": {"conditions": ["x"]}})).is_err());
        assert!(strategic_merge_patch(&mut n, &json!([1])).is_err());
        assert!(strategic_merge_patch(&mut n, &json!({"a": {"$patch": "explode"}})).is_err());
    }

    #[test]
    fn json_patch_ops() {
        let mut d = json!({"metadata": {"labels": {"a": "1"}}, "list": [1, 2]});
        json_patch(
            &mut d,
            &json!([
                {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
                {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
                {"op": "add", "path": "/list/-", "value": 3},
                {"op": "add", "path": "/list/0", "value": 0},
                {"op": "remove", "path": "/list/1"},
                {"op": "copy", "from": "/list", "path": "/copy"},
                {"op": "move", "from": "/copy", "path": "/moved"},
                {"op": "test", "path": "/moved/0", "value": 0}
            ]),
        )
        .unwrap();
        assert_eq!(
            d,
            json!({"metadata": {"labels": {"a": "9", "b/c": "2"}}, "list": [0, 2, 3], "moved": [0, 2, 3]})
        );
        let before = d.clone();
        let err = json_patch(
            &mut d,
            &json!([{"op": "remove", "path": "/list/0"}, {"op": "test", "path": "/list/0", "value": 0}]),
        )
        .unwrap_err();
        assert!(matches!(err, JsonPatchError::Failed(_)));
        assert_eq!(d, before, "a failed patch changes nothing");
        assert!(matches!(
            json_patch(&mut d, &json!({"op": "add"})),
            Err(JsonPatchError::Malformed(_))
        ));
        assert!(matches!(
            json_patch(&mut d, &json!([{"op": "remove", "path": "/nope"}])),
            Err(JsonPatchError::Failed(_))
        ));
        assert!(matches!(
            json_patch(&mut d, &json!([{"op": "add", "path": "x", "value": 1}])),
            Err(JsonPatchError::Malformed(_))
        ));
    }
}
