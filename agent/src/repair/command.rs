//! The one flow every repair command follows, and its exit codes:
//!
//! ```text
//!  plan ─> print (with its fingerprint) ─> nothing to do? exit 0
//!               ─> dry run (no --apply)? exit 1
//!               ─> refused (the plan says why, or a precondition)? exit 1
//!               ─> not the plan --expect-plan names (it changed since it was shown)? exit 1
//!               ─> confirm (--yes, or an answer y/yes) ─> no? exit 1
//!               ─> re-check and apply (the repair's own) ─> print the records
//!                    ─> every action done or skipped on purpose: exit 0
//!                    ─> an action failed: exit 3
//!  could not run at all (bad flags, unreadable input, no API): exit 2
//! ```
//!
//! A repair supplies its plan and the steps that differ ([`Repair`]); this module owns the order,
//! the question, the texts shared by all repairs, and the mapping of an [`End`] to an exit code.

use std::io::Write;

use crate::output::{self, Format};

/// Exit code: nothing to do, or everything applied (or skipped on purpose).
pub const EXIT_OK: u8 = 0;
/// Exit code: a plan shown (dry run), refused, aborted, or not confirmed: nothing changed.
pub const EXIT_NOT_APPLIED: u8 = 1;
/// Exit code: could not run.
pub const EXIT_ERROR: u8 = 2;
/// Exit code: applied, but some actions failed.
pub const EXIT_ACTIONS_FAILED: u8 = 3;

/// Why a repair did not change everything it planned to. Each maps to one exit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepairError {
    /// The plan, or a precondition checked before acting, says no.
    #[error("refused: {0}")]
    Refused(String),
    /// Nobody said yes.
    #[error("{0}")]
    NotConfirmed(String),
    /// Stopped between steps because something changed; nothing was written.
    #[error("aborted: {0}")]
    Aborted(String),
    /// It acted, and some actions failed.
    #[error("{0}")]
    ActionsFailed(String),
    /// It could not run at all.
    #[error("{0}")]
    CouldNotRun(String),
    /// The confirmation question could not be answered (stdin unreadable): the reason.
    #[error("reading the answer: {0}")]
    NoAnswer(String),
}

impl RepairError {
    /// The command's exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            RepairError::Refused(_)
            | RepairError::NotConfirmed(_)
            | RepairError::Aborted(_)
            | RepairError::NoAnswer(_) => EXIT_NOT_APPLIED,
            RepairError::ActionsFailed(_) => EXIT_ACTIONS_FAILED,
            RepairError::CouldNotRun(_) => EXIT_ERROR,
        }
    }

    /// The reason alone, without the `refused: ` or `aborted: ` of its kind: what follows
    /// "Not applied: " in the text output.
    pub fn reason(&self) -> String {
        match self {
            RepairError::Refused(why)
            | RepairError::NotConfirmed(why)
            | RepairError::Aborted(why)
            | RepairError::ActionsFailed(why)
            | RepairError::CouldNotRun(why) => why.clone(),
            RepairError::NoAnswer(_) => self.to_string(),
        }
    }
}

impl From<String> for RepairError {
    fn from(e: String) -> Self {
        RepairError::CouldNotRun(e)
    }
}

/// How a run that got as far as a plan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The plan has nothing to do.
    NothingToDo,
    /// A dry run showed the plan.
    PlanShown,
    /// Applied: every action done or skipped on purpose.
    Applied,
    /// Not applied, or applied with failures.
    Failed(RepairError),
}

impl End {
    /// The command's exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            End::NothingToDo | End::Applied => EXIT_OK,
            End::PlanShown => EXIT_NOT_APPLIED,
            End::Failed(e) => e.exit_code(),
        }
    }
}

/// Whether a plan can be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    NothingToDo,
    Ready,
    /// The plan itself refuses (its text says why).
    Refused(String),
}

/// What the flow needs from a repair.
pub trait Repair {
    type Plan;
    /// What applying did.
    type Applied;

    fn readiness(&self, plan: &Self::Plan) -> Readiness;
    /// A reason not to act that is known before asking (the kubelet runs, ...): the run ends
    /// with this error (a [`RepairError::Refused`] for a precondition).
    fn precheck(&self, _plan: &Self::Plan) -> Result<(), RepairError> {
        Ok(())
    }
    /// The confirmation question.
    fn question(&self, plan: &Self::Plan) -> String;
    /// The plan as text; `dry_run` adds how to act.
    fn render_plan(&self, plan: &Self::Plan, dry_run: bool) -> String;
    /// Checks the plan again right before acting, and acts. `Err` when nothing could be done.
    fn apply(&mut self, plan: &Self::Plan) -> Result<Self::Applied, RepairError>;
    /// What applying did, as text.
    fn render_applied(&self, plan: &Self::Plan, applied: &Self::Applied) -> String;
    /// How applying ended.
    fn end(&self, applied: &Self::Applied) -> End;
    /// The whole run as one JSON document.
    fn json(&self, plan: &Self::Plan, applied: Option<&Self::Applied>, end: &End) -> serde_json::Value;
    /// What the plan would change, one line per target (which entry, directory or pod, and
    /// what of it), in any order: the [`fingerprint`] of the plan. Not what merely describes it
    /// (ages, sizes, notes), which may move between a dry run and the apply.
    fn targets(&self, plan: &Self::Plan) -> Vec<String>;
}

/// A plan's fingerprint: FNV-1a (64 bits) of its targets, sorted, as 16 hex digits. A dry run
/// prints it; `--expect-plan` makes the apply act only when its own plan has the same one.
pub fn fingerprint(mut targets: Vec<String>) -> String {
    targets.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in targets.join("\n").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The answer to a confirmation question: `Ok(true)` to act; `Err` when nobody can answer
/// ([`RepairError::NoAnswer`]).
pub type Confirm<'a> = &'a mut dyn FnMut(&str) -> Result<bool, RepairError>;

/// How the flow runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Flow {
    /// Act (otherwise a dry run).
    pub apply: bool,
    /// Do not ask.
    pub yes: bool,
    /// Act only on the plan with this fingerprint.
    pub expect_plan: Option<String>,
    pub format: Format,
}

/// What a run did.
#[derive(Debug)]
pub struct Ran<P, A> {
    pub plan: P,
    pub applied: Option<A>,
    pub end: End,
}

impl<P, A> Ran<P, A> {
    /// The command's exit code.
    pub fn code(&self) -> u8 {
        self.end.exit_code()
    }
}

fn write(out: &mut dyn Write, text: &str) -> Result<(), RepairError> {
    output::emit(out, text).map_err(|e| RepairError::CouldNotRun(format!("writing the output: {e}")))
}

/// Runs the flow of the module's documentation for `plan`. The question (without `--yes`)
/// goes to `out` in text, to stderr in JSON (so stdout stays one document), and `confirm`
/// answers it.
pub fn run<R: Repair>(
    repair: &mut R,
    plan: R::Plan,
    flow: &Flow,
    out: &mut dyn Write,
    confirm: Confirm<'_>,
) -> Result<Ran<R::Plan, R::Applied>, RepairError> {
    let text = flow.format == Format::Text;
    let readiness = repair.readiness(&plan);
    let print = fingerprint(repair.targets(&plan));
    let changed = match &flow.expect_plan {
        Some(expected) if *expected != print => Some(RepairError::Aborted(format!(
            "the plan changed since it was shown (fingerprint {expected}, now {print}): nothing was changed; \
             look at the plan again"
        ))),
        _ => None,
    };
    let refusal = match (&readiness, flow.apply) {
        (Readiness::Ready, true) => changed.or_else(|| repair.precheck(&plan).err()),
        _ => None,
    };
    if text {
        write(out, &repair.render_plan(&plan, !flow.apply))?;
        if readiness != Readiness::NothingToDo {
            write(out, &format!("Plan fingerprint: {print}\n"))?;
        }
    }
    let end = match (&readiness, flow.apply, refusal) {
        (Readiness::NothingToDo, _, _) => Some(End::NothingToDo),
        (_, false, _) => Some(End::PlanShown),
        (Readiness::Refused(why), true, _) => Some(End::Failed(RepairError::Refused(why.clone()))),
        (Readiness::Ready, true, Some(e)) => {
            if text {
                write(out, &format!("\nNot applied: {}\n", e.reason()))?;
            }
            Some(End::Failed(e))
        }
        (Readiness::Ready, true, None) => None,
    };
    if let Some(end) = end {
        return finish(repair, plan, None, end, flow.format, &print, out);
    }
    if !flow.yes {
        let question = format!("{} [y/N] ", repair.question(&plan));
        let asked = if text {
            write(out, &question)
        } else {
            write(&mut std::io::stderr(), &question)
        };
        asked?;
        let answer = confirm(&question);
        if text {
            write(out, "\n")?;
        }
        let why = match answer {
            Ok(true) => None,
            Ok(false) => Some("not confirmed: nothing changed (add --yes to skip the question)".to_string()),
            Err(e) => Some(format!("{e}; nothing was changed")),
        };
        if let Some(why) = why {
            if text {
                write(out, &format!("Not applied: {why}\n"))?;
            }
            return finish(
                repair,
                plan,
                None,
                End::Failed(RepairError::NotConfirmed(why)),
                flow.format,
                &print,
                out,
            );
        }
    }
    let applied = repair.apply(&plan)?;
    if text {
        write(out, &repair.render_applied(&plan, &applied))?;
    }
    let end = repair.end(&applied);
    finish(repair, plan, Some(applied), end, flow.format, &print, out)
}

fn finish<R: Repair>(
    repair: &R,
    plan: R::Plan,
    applied: Option<R::Applied>,
    end: End,
    format: Format,
    print: &str,
    out: &mut dyn Write,
) -> Result<Ran<R::Plan, R::Applied>, RepairError> {
    if format == Format::Json {
        let mut json = repair.json(&plan, applied.as_ref(), &end);
        if let serde_json::Value::Object(map) = &mut json {
            map.insert("plan_fingerprint".into(), print.into());
        }
        write(out, &output::pretty_json(&json))?;
    }
    Ok(Ran { plan, applied, end })
}

/// Reads an answer from `input`: only `y` or `yes` (any case) says yes; no answer (end of
/// input) says no.
pub fn read_answer(input: &mut dyn std::io::BufRead) -> Result<bool, RepairError> {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) => Ok(false),
        Ok(_) => Ok(matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")),
        Err(e) => Err(RepairError::NoAnswer(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repair whose plan is a list of numbers to "apply"; odd numbers fail.
    struct Numbers {
        refuse: Option<String>,
        applied_calls: usize,
    }

    impl Repair for Numbers {
        type Plan = Vec<u32>;
        type Applied = Vec<(u32, bool)>;

        fn readiness(&self, plan: &Vec<u32>) -> Readiness {
            if plan.is_empty() {
                Readiness::NothingToDo
            } else {
                Readiness::Ready
            }
        }
        fn precheck(&self, _: &Vec<u32>) -> Result<(), RepairError> {
            self.refuse.clone().map_or(Ok(()), |why| Err(RepairError::Refused(why)))
        }
        fn question(&self, plan: &Vec<u32>) -> String {
            format!("Apply {} numbers?", plan.len())
        }
        fn render_plan(&self, plan: &Vec<u32>, dry_run: bool) -> String {
            format!("plan {plan:?}{}\n", if dry_run { " (dry run)" } else { "" })
        }
        fn apply(&mut self, plan: &Vec<u32>) -> Result<Self::Applied, RepairError> {
            self.applied_calls += 1;
            Ok(plan.iter().map(|n| (*n, n % 2 == 0)).collect())
        }
        fn render_applied(&self, _: &Vec<u32>, applied: &Self::Applied) -> String {
            format!("applied {applied:?}\n")
        }
        fn end(&self, applied: &Self::Applied) -> End {
            match applied.iter().filter(|(_, ok)| !ok).count() {
                0 => End::Applied,
                n => End::Failed(RepairError::ActionsFailed(format!("{n} failed"))),
            }
        }
        fn json(&self, plan: &Vec<u32>, applied: Option<&Self::Applied>, end: &End) -> serde_json::Value {
            serde_json::json!({"plan": plan, "applied": applied.map(|a| a.len()), "code": end.exit_code()})
        }
        fn targets(&self, plan: &Vec<u32>) -> Vec<String> {
            plan.iter().map(u32::to_string).collect()
        }
    }

    fn go(plan: Vec<u32>, flow: Flow, refuse: Option<&str>, answer: Result<bool, RepairError>) -> (u8, String, usize) {
        let mut repair = Numbers {
            refuse: refuse.map(str::to_string),
            applied_calls: 0,
        };
        let mut out = Vec::new();
        let ran = run(&mut repair, plan, &flow, &mut out, &mut |_| answer.clone()).unwrap();
        (ran.code(), String::from_utf8(out).unwrap(), repair.applied_calls)
    }

    const TEXT: Flow = Flow {
        apply: false,
        yes: false,
        expect_plan: None,
        format: Format::Text,
    };

    fn print_of(plan: &[u32]) -> String {
        fingerprint(plan.iter().map(u32::to_string).collect())
    }

    #[test]
    fn every_way_a_run_ends_has_its_exit_code() {
        assert_eq!(go(vec![], TEXT, None, Ok(true)).0, EXIT_OK);
        let (code, out, calls) = go(vec![2], TEXT, None, Ok(true));
        assert_eq!((code, calls), (EXIT_NOT_APPLIED, 0));
        assert_eq!(
            out,
            format!("plan [2] (dry run)\nPlan fingerprint: {}\n", print_of(&[2]))
        );
        let apply = Flow { apply: true, ..TEXT };
        let (code, out, calls) = go(vec![2, 4], apply.clone(), None, Ok(true));
        assert_eq!((code, calls), (EXIT_OK, 1));
        assert_eq!(
            out,
            format!(
                "plan [2, 4]\nPlan fingerprint: {}\nApply 2 numbers? [y/N] \napplied [(2, true), (4, true)]\n",
                print_of(&[2, 4])
            )
        );
        assert_eq!(go(vec![2, 3], apply.clone(), None, Ok(true)).0, EXIT_ACTIONS_FAILED);
        let (code, out, calls) = go(vec![2], apply.clone(), None, Ok(false));
        assert_eq!((code, calls), (EXIT_NOT_APPLIED, 0));
        assert!(
            out.contains("Not applied: not confirmed: nothing changed (add --yes"),
            "{out}"
        );
        let (code, out, _) = go(
            vec![2],
            apply.clone(),
            None,
            Err(RepairError::NoAnswer("no terminal".into())),
        );
        assert_eq!(code, EXIT_NOT_APPLIED);
        assert!(
            out.contains("Not applied: reading the answer: no terminal; nothing was changed"),
            "{out}"
        );
        let (code, out, calls) = go(vec![2], apply.clone(), Some("the kubelet runs"), Ok(true));
        assert_eq!((code, calls), (EXIT_NOT_APPLIED, 0));
        assert!(out.ends_with("\nNot applied: the kubelet runs\n"), "{out}");
        // --yes never asks.
        let (code, out, _) = go(
            vec![2],
            Flow { yes: true, ..apply },
            None,
            Err(RepairError::NoAnswer("asked".into())),
        );
        assert_eq!(code, EXIT_OK);
        assert!(!out.contains("[y/N]"), "{out}");
    }

    #[test]
    fn expect_plan_applies_only_the_plan_that_was_shown() {
        let shown = print_of(&[2, 4]);
        // The same targets in another order: the same plan.
        assert_eq!(print_of(&[4, 2]), shown);
        let flow = Flow {
            apply: true,
            yes: true,
            expect_plan: Some(shown.clone()),
            ..TEXT
        };
        let (code, _, calls) = go(vec![4, 2], flow.clone(), None, Ok(true));
        assert_eq!((code, calls), (EXIT_OK, 1));
        // One more target since the dry run: nothing is applied, and it says why.
        let (code, out, calls) = go(vec![2, 4, 6], flow, None, Ok(true));
        assert_eq!((code, calls), (EXIT_NOT_APPLIED, 0));
        assert!(
            out.contains(&format!(
                "Not applied: the plan changed since it was shown (fingerprint {shown}, now {}): nothing was changed",
                print_of(&[2, 4, 6])
            )),
            "{out}"
        );
        // Nothing to do any more: nothing to refuse either.
        let (code, out, _) = go(
            vec![],
            Flow {
                apply: true,
                yes: true,
                expect_plan: Some(shown),
                ..TEXT
            },
            None,
            Ok(true),
        );
        assert_eq!(code, EXIT_OK);
        assert!(!out.contains("Plan fingerprint"), "{out}");
    }

    #[test]
    fn json_is_one_document_with_the_end() {
        let flow = Flow {
            apply: true,
            yes: true,
            expect_plan: None,
            format: Format::Json,
        };
        let (code, out, _) = go(vec![1], flow, None, Ok(true));
        assert_eq!(code, EXIT_ACTIONS_FAILED);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"plan": [1], "applied": 1, "code": 3, "plan_fingerprint": print_of(&[1])})
        );
    }

    #[test]
    fn answers() {
        for (text, yes) in [
            ("y\n", true),
            ("YES\n", true),
            ("no\n", false),
            ("", false),
            ("yess\n", false),
        ] {
            assert_eq!(read_answer(&mut text.as_bytes()), Ok(yes), "{text:?}");
        }
        assert_eq!(RepairError::CouldNotRun("x".into()).exit_code(), EXIT_ERROR);
    }

    /// A stdin that cannot be read is no answer: the error says so, with the system's reason,
    /// and ends the run as "not applied".
    #[test]
    fn an_unreadable_answer_is_named() {
        struct Broken;
        impl std::io::Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("input/output error"))
            }
        }
        let e = read_answer(&mut std::io::BufReader::new(Broken)).unwrap_err();
        assert_eq!(e, RepairError::NoAnswer("input/output error".into()));
        assert_eq!(e.to_string(), "reading the answer: input/output error");
        assert_eq!(e.reason(), "reading the answer: input/output error");
        assert_eq!(e.exit_code(), EXIT_NOT_APPLIED);
        // The other kinds: the text output shows the reason without the kind's prefix.
        let refused = RepairError::Refused("the kubelet runs".into());
        assert_eq!(refused.to_string(), "refused: the kubelet runs");
        assert_eq!(refused.reason(), "the kubelet runs");
        assert_eq!(RepairError::Aborted("changed".into()).reason(), "changed");
    }
}
