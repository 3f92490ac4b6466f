//! Label and field selectors as the API server parses and applies them
//! (apimachinery `pkg/labels/selector.go` and `pkg/fields/selector.go`).
//!
//! Label selectors: comma-separated requirements, all of which must hold: `k=v`, `k==v`,
//! `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not exist), `k>n`, `k<n`.
//! `!=` and `notin` also match objects without the label, as upstream.
//!
//! Field selectors: comma-separated `field=value`, `field==value`, `field!=value`; `\,`, `\=`
//! and `\\` escape those characters in values. Which fields exist is per resource
//! ([`super::resources::ResourceType::field_value`]).

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<LabelRequirement>,
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

/// A label name part or value: at most 63 characters, alphanumeric at both ends,
/// `-`, `_`, `.` inside. Values may also be empty.
fn valid_name_part(s: &str, allow_empty: bool) -> bool {
    if s.is_empty() {
        return allow_empty;
    }
    let b = s.as_bytes();
    s.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && super::util::validate_subdomain(p).is_err()
    {
        return Err(format!(
            "invalid label key \"{key}\": prefix part must be a DNS subdomain"
        ));
    }
    if !valid_name_part(name, false) {
        return Err(format!(
            "invalid label key \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

fn validate_value(v: &str) -> Result<(), String> {
    if valid_name_part(v, true) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value: \"{v}\": a valid label must be an empty string or consist of alphanumeric \
             characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unable to parse requirement: unbalanced ')' in \"{s}\""));
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unable to parse requirement: unbalanced '(' in \"{s}\""));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn parse_set(rest: &str, op: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{rest}', expected: '(' after '{op}'"))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if values.len() == 1 && values[0].is_empty() {
        return Err(format!("for '{op}' operator, values set can't be empty"));
    }
    for v in &values {
        validate_value(v)?;
    }
    Ok(values)
}

fn parse_requirement(p: &str) -> Result<LabelRequirement, String> {
    let p = p.trim();
    if p.is_empty() {
        return Err("found '', expected: !, identifier, or 'end of string'".into());
    }
    if let Some(rest) = p.strip_prefix('!') {
        let key = rest.trim();
        validate_key(key)?;
        return Ok(LabelRequirement {
            key: key.to_string(),
            op: LabelOp::NotExists,
        });
    }
    let key_end = p.find(|c: char| !is_key_char(c)).unwrap_or(p.len());
    let key = &p[..key_end];
    if key.is_empty() {
        return Err(format!("found '{p}', expected: identifier"));
    }
    validate_key(key)?;
    let rest = p[key_end..].trim_start();
    let single_value = |v: &str| -> Result<String, String> {
        let v = v.trim();
        validate_value(v)?;
        Ok(v.to_string())
    };
    let op = if rest.is_empty() {
        LabelOp::Exists
    } else if let Some(v) = rest.strip_prefix("!=") {
        LabelOp::NotEq(single_value(v)?)
    } else if let Some(v) = rest.strip_prefix("==") {
        LabelOp::Eq(single_value(v)?)
    } else if let Some(v) = rest.strip_prefix('=') {
        LabelOp::Eq(single_value(v)?)
    } else if let Some(v) = rest.strip_prefix('>') {
        LabelOp::Gt(
            v.trim()
                .parse()
                .map_err(|_| format!("for 'gt' operator, value must be an integer: {v}"))?,
        )
    } else if let Some(v) = rest.strip_prefix('<') {
        LabelOp::Lt(
            v.trim()
                .parse()
                .map_err(|_| format!("for 'lt' operator, value must be an integer: {v}"))?,
        )
    } else if let Some(v) = rest.strip_prefix("notin").filter(|v| v.starts_with([' ', '\t', '('])) {
        LabelOp::NotIn(parse_set(v, "notin")?)
    } else if let Some(v) = rest.strip_prefix("in").filter(|v| v.starts_with([' ', '\t', '('])) {
        LabelOp::In(parse_set(v, "in")?)
    } else {
        return Err(format!("found '{rest}', expected: in, notin, =, ==, !=, gt, lt"));
    };
    Ok(LabelRequirement {
        key: key.to_string(),
        op,
    })
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter; `Err` carries a message for a 400 answer.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        if s.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        let reqs = split_top_level(s)?
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("unable to parse requirement: {e}"))?;
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object with these `metadata.labels` is selected.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.reqs.iter().all(|r| {
            let v = labels.and_then(|m| m.get(&r.key)).and_then(Value::as_str);
            match &r.op {
                LabelOp::Eq(x) => v == Some(x.as_str()),
                LabelOp::NotEq(x) => v != Some(x.as_str()),
                LabelOp::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
                LabelOp::NotIn(set) => !v.is_some_and(|v| set.iter().any(|s| s == v)),
                LabelOp::Exists => v.is_some(),
                LabelOp::NotExists => v.is_none(),
                LabelOp::Gt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|x| x > *n),
                LabelOp::Lt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|x| x < *n),
            }
        })
    }

    /// Whether an object (its `metadata.labels`) is selected.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.is_empty() || self.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

/// One `field=value` or `field!=value` term.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    pub field: String,
    pub negate: bool,
    pub value: String,
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    pub reqs: Vec<FieldRequirement>,
}

fn unescape_field_value(v: &str) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid escape sequence: \\{e}")),
                None => return Err("unterminated escape sequence".into()),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Splits on commas not preceded by a backslash escape.
fn split_unescaped(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            parts.push(&s[start..i]);
            start = i + 1;
        }
    }
    parts.push(&s[start..]);
    parts
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter; `Err` carries a message for a 400 answer.
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        if s.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        let mut reqs = Vec::new();
        for part in split_unescaped(s) {
            let bytes = part.as_bytes();
            let mut found = None;
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b'\\' => i += 1,
                    b'!' if bytes.get(i + 1) == Some(&b'=') => {
                        found = Some((i, 2, true));
                        break;
                    }
                    b'=' if bytes.get(i + 1) == Some(&b'=') => {
                        found = Some((i, 2, false));
                        break;
                    }
                    b'=' => {
                        found = Some((i, 1, false));
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
            let Some((at, len, negate)) = found else {
                return Err(format!("invalid selector: '{s}'; can't understand '{part}'"));
            };
            let field = part[..at].trim();
            if field.is_empty() {
                return Err(format!("invalid selector: '{s}'; can't understand '{part}'"));
            }
            let value = unescape_field_value(&part[at + len..])?;
            reqs.push(FieldRequirement {
                field: field.to_string(),
                negate,
                value,
            });
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether the object is selected, given how to read a field's value (missing fields read
    /// as the empty string, as upstream).
    pub fn matches(&self, value_of: impl Fn(&str) -> String) -> bool {
        self.reqs.iter().all(|r| (value_of(&r.field) == r.value) != r.negate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn equality_and_inequality() {
        let l = labels(json!({"spark-role": "executor", "app": "pi"}));
        assert!(LabelSelector::parse("spark-role=executor").unwrap().matches(Some(&l)));
        assert!(LabelSelector::parse("spark-role==executor").unwrap().matches(Some(&l)));
        assert!(!LabelSelector::parse("spark-role!=executor").unwrap().matches(Some(&l)));
        assert!(LabelSelector::parse("missing!=x").unwrap().matches(Some(&l)));
        assert!(
            LabelSelector::parse(" app = pi , spark-role = executor ")
                .unwrap()
                .matches(Some(&l))
        );
        assert!(
            !LabelSelector::parse("app=pi,spark-role=driver")
                .unwrap()
                .matches(Some(&l))
        );
    }

    #[test]
    fn set_based_and_existence() {
        let l = labels(json!({"spark-role": "executor", "spark-exec-id": "7"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m("spark-role in (driver, executor)"));
        assert!(m("spark-role in(executor)"));
        assert!(!m("spark-role notin (executor)"));
        assert!(m("absent notin (x)"));
        assert!(!m("absent in (x)"));
        assert!(m("spark-role"));
        assert!(m("!spark-app-selector"));
        assert!(!m("!spark-role"));
        assert!(m("spark-exec-id>5,spark-exec-id<8"));
        assert!(!m("spark-exec-id>7"));
        assert!(m("spark-role in (a,executor),spark-exec-id,!x"));
        assert!(m(""));
        assert!(
            LabelSelector::parse("a")
                .unwrap()
                .matches(Some(&labels(json!({"a": ""}))))
        );
        assert!(!LabelSelector::parse("a").unwrap().matches(None));
    }

    #[test]
    fn prefixed_keys() {
        let l = labels(json!({"sparkoperator.k8s.io/app-name": "pi"}));
        assert!(
            LabelSelector::parse("sparkoperator.k8s.io/app-name=pi")
                .unwrap()
                .matches(Some(&l))
        );
    }

    #[test]
    fn bad_label_selectors_are_errors() {
        for bad in [
            "a=b,",
            ",a",
            "a in (x",
            "a in x",
            "a in ()",
            "=b",
            "a=b c",
            "a>x",
            "a~b",
            "bad key=x",
            "a=-x",
            "Way/too/many",
            "!",
            ")",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn field_selector_terms() {
        let sel = FieldSelector::parse("spec.nodeName=n1,status.phase!=Succeeded").unwrap();
        assert_eq!(sel.reqs.len(), 2);
        let get = |phase: &'static str| {
            move |f: &str| match f {
                "spec.nodeName" => "n1".to_string(),
                "status.phase" => phase.to_string(),
                _ => String::new(),
            }
        };
        assert!(sel.matches(get("Running")));
        assert!(!sel.matches(get("Succeeded")));
        let eq2 = FieldSelector::parse("metadata.name==a\\,b\\=c").unwrap();
        assert_eq!(eq2.reqs[0].value, "a,b=c");
        assert!(!eq2.reqs[0].negate);
        let empty = FieldSelector::parse("spec.nodeName=").unwrap();
        assert!(empty.matches(|_| String::new()));
    }

    #[test]
    fn bad_field_selectors_are_errors() {
        for bad in ["spec.nodeName", "=x", "a=b\\q", "a=b\\"] {
            assert!(FieldSelector::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
