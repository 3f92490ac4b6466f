//! Errors as the API server writes them: a `metav1.Status` body whose `code` is the HTTP
//! status and whose `reason` is the machine-readable cause clients branch on
//! (apimachinery `pkg/api/errors`).

use serde_json::{Value, json};

use super::resources::ResourceType;

/// One failed request, rendered by [`ApiError::to_status`].
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Boxed to keep `Result<_, ApiError>` small.
    pub details: Option<Box<Value>>,
    /// Seconds for the `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after: Option<u32>,
}

/// The `reason` the API server uses for an HTTP status code (`StatusReason*`).
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// `details` naming an object: `{"name": .., "group": .., "kind": <plural>}` as in
/// `errors.NewNotFound(qualifiedResource, name)`.
fn object_details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({ "name": name });
    if !rt.group.is_empty() {
        d["group"] = rt.group.into();
    }
    d["kind"] = rt.plural.into();
    d
}

impl ApiError {
    pub fn new(code: u16, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason_for(code),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// `pods "x" not found`
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Some(Box::new(object_details(rt, name))),
            ..Self::new(404, format!("{} \"{name}\" not found", rt.qualified()))
        }
    }

    /// The answer to a path no handler serves.
    pub fn no_route() -> Self {
        ApiError {
            details: Some(Box::new(json!({}))),
            ..Self::new(404, "the server could not find the requested resource")
        }
    }

    pub fn method_not_allowed() -> Self {
        ApiError {
            details: Some(Box::new(json!({}))),
            ..Self::new(405, "the server does not allow this method on the requested resource")
        }
    }

    /// `pods "x" already exists`
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            reason: "AlreadyExists",
            details: Some(Box::new(object_details(rt, name))),
            ..Self::new(409, format!("{} \"{name}\" already exists", rt.qualified()))
        }
    }

    /// `Operation cannot be fulfilled on pods "x": <why>`
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        ApiError {
            details: Some(Box::new(object_details(rt, name))),
            ..Self::new(
                409,
                format!("Operation cannot be fulfilled on {} \"{name}\": {why}", rt.qualified()),
            )
        }
    }

    /// The optimistic-concurrency conflict of a write carrying a stale `resourceVersion`.
    pub fn stale(rt: &ResourceType, name: &str) -> Self {
        Self::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with field causes: `Pod "x" is invalid: spec.containers: Required value`.
    /// Each cause is `(field, cause reason, detail)`, e.g. `("spec.containers", "FieldValueRequired", "Required value")`.
    pub fn invalid(rt: &ResourceType, name: &str, causes: &[(&str, &str, String)]) -> Self {
        let summary: Vec<String> = causes.iter().map(|(f, _, m)| format!("{f}: {m}")).collect();
        let message = match summary.len() {
            1 => format!("{} \"{name}\" is invalid: {}", rt.kind, summary[0]),
            _ => format!("{} \"{name}\" is invalid: [{}]", rt.kind, summary.join(", ")),
        };
        let mut details = json!({ "name": name });
        if !rt.group.is_empty() {
            details["group"] = rt.group.into();
        }
        details["kind"] = rt.kind.into();
        details["causes"] = causes
            .iter()
            .map(|(f, r, m)| json!({ "reason": r, "message": m, "field": f }))
            .collect();
        ApiError {
            details: Some(Box::new(details)),
            ..Self::new(422, message)
        }
    }

    /// 422 for a PUT without `metadata.resourceVersion` of a type that does not allow
    /// unconditional updates (custom resources), as the generic registry's `Store.Update`
    /// words it: `sparkapplications.sparkoperator.k8s.io "x" is invalid:
    /// metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`.
    pub fn unconditional_update(rt: &ResourceType, name: &str) -> Self {
        let field = "metadata.resourceVersion";
        let detail = "Invalid value: 0x0: must be specified for an update";
        let mut details = object_details(rt, name);
        details["causes"] = json!([{ "reason": "FieldValueInvalid", "message": detail, "field": field }]);
        ApiError {
            details: Some(Box::new(details)),
            ..Self::new(
                422,
                format!("{} \"{name}\" is invalid: {field}: {detail}", rt.qualified()),
            )
        }
    }

    /// 410 for a resource version the history no longer holds.
    pub fn too_old(requested: u64, oldest: u64) -> Self {
        Self::new(410, format!("too old resource version: {requested} ({oldest})"))
    }

    /// 504 for a resource version newer than any the server has written.
    pub fn too_large(requested: u64, current: u64) -> Self {
        ApiError {
            details: Some(Box::new(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            }))),
            retry_after: Some(1),
            ..Self::new(
                504,
                format!("Timeout: Too large resource version: {requested}, current: {current}"),
            )
        }
    }

    /// A failure injected by [`super::Faults::fail`], worded like the API server's own.
    pub fn injected(code: u16, verb: &str, rt: Option<&ResourceType>, namespace: Option<&str>) -> Self {
        let resource = rt.map(|r| r.plural).unwrap_or("");
        let group = rt.map(|r| r.group).unwrap_or("");
        let message = match code {
            401 => "Unauthorized".to_string(),
            403 => {
                let scope = match namespace {
                    Some(ns) => format!("in the namespace \"{ns}\""),
                    None => "at the cluster scope".to_string(),
                };
                format!(
                    "{resource} is forbidden: User \"system:serviceaccount:nodemedic:nodemedic\" cannot {verb} \
                     resource \"{resource}\" in API group \"{group}\" {scope}"
                )
            }
            429 => "Too many requests, please try again later.".to_string(),
            500 => "Internal error occurred: injected fault".to_string(),
            503 => "the server is currently unable to handle the request (injected fault)".to_string(),
            504 => "Timeout: request did not complete within requested timeout - context deadline exceeded".to_string(),
            _ => format!("injected fault ({code})"),
        };
        let mut err = Self::new(code, message);
        if code == 401 {
            // The authentication filter's `NewUnauthorized("Unauthorized")` has no details.
            return err;
        }
        err.details = Some(Box::new(match code {
            500 => json!({ "causes": [{ "message": "injected fault" }] }),
            403 => {
                let mut d = json!({});
                if !group.is_empty() {
                    d["group"] = group.into();
                }
                d["kind"] = resource.into();
                d
            }
            _ => json!({}),
        }));
        err
    }

    pub fn with_retry_after(mut self, secs: Option<u32>) -> Self {
        if let Some(s) = secs {
            self.retry_after = Some(s);
            let d = self.details.get_or_insert_with(|| Box::new(json!({})));
            if let Some(obj) = d.as_object_mut() {
                obj.insert("retryAfterSeconds".into(), s.into());
            }
        }
        self
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        });
        if !self.reason.is_empty() {
            s["reason"] = self.reason.into();
        }
        if let Some(d) = &self.details {
            s["details"] = (**d).clone();
        }
        s["code"] = self.code.into();
        s
    }
}

/// The `Status` a successful delete answers with for resources that do not return the deleted
/// object (everything but pods here).
pub(crate) fn delete_success(rt: &ResourceType, name: &str, uid: &str) -> Value {
    let mut details = object_details(rt, name);
    details["uid"] = uid.into();
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources;

    #[test]
    fn not_found_status_has_real_shape() {
        let pods = resources::resolve("pods").unwrap();
        let s = ApiError::not_found(pods, "p1").to_status();
        assert_eq!(
            s,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"pods \"p1\" not found","reason":"NotFound",
                   "details":{"name":"p1","kind":"pods"},"code":404})
        );
        let ev = resources::resolve("events.events.k8s.io").unwrap();
        let s = ApiError::not_found(ev, "e").to_status();
        assert_eq!(s["message"], "events.events.k8s.io \"e\" not found");
        assert_eq!(s["details"]["group"], "events.k8s.io");
    }

    #[test]
    fn retry_after_lands_in_details() {
        let e = ApiError::injected(429, "list", None, None).with_retry_after(Some(3));
        let s = e.to_status();
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(s["details"]["retryAfterSeconds"], 3);
        assert_eq!(e.retry_after, Some(3));
    }

    #[test]
    fn invalid_lists_causes() {
        let pods = resources::resolve("pods").unwrap();
        let s = ApiError::invalid(
            pods,
            "p",
            &[("spec.containers", "FieldValueRequired", "Required value".into())],
        )
        .to_status();
        assert_eq!(s["message"], "Pod \"p\" is invalid: spec.containers: Required value");
        assert_eq!(s["details"]["causes"][0]["field"], "spec.containers");
        assert_eq!(s["code"], 422);
    }
}
