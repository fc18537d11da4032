//! Workflows (SPEC §10): a graph of steps, each a task of a job. What a graph may be
//! ([`Graph::new`]: every problem named), what a step's ending makes of the others
//! ([`Graph::advance`]: which start, which are skipped), when an instance is over
//! ([`Graph::outcome`]), and what each step's task is given ([`Graph::payload`]). Pure:
//! the store applies these decisions in the transaction that ended the step, so a join
//! is decided once however its predecessors finish.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::names::named_enum;

/// At most this many steps in one workflow.
pub const MAX_STEPS: usize = 100;
/// A mapped step runs at most this many elements; a longer array fails the step.
pub const MAX_MAP_ITEMS: usize = 10_000;
/// A run's output is at most this many bytes; a larger one fails the step.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

named_enum! {
    what = "`when`";
    /// When a step with predecessors runs, once they are done (succeeded, failed or
    /// skipped).
    pub enum When {
        /// Every predecessor succeeded (the default).
        AllSucceeded => "all_succeeded",
        /// All are done, and one or more succeeded.
        AnySucceeded => "any_succeeded",
        /// All are done, whatever the outcome: a clean-up step.
        AllDone => "all_done",
        /// All are done, and one or more failed: a compensation step.
        AnyFailed => "any_failed",
    }
}

named_enum! {
    what = "step status";
    /// A step of an instance.
    pub enum StepStatus {
        Pending => "pending",
        Running => "running",
        Succeeded => "succeeded",
        /// Its task ended `dead` (for a mapped step: an element's did).
        Failed => "failed",
        /// Its condition can no longer hold.
        Skipped => "skipped",
        Cancelled => "cancelled",
    }
}

named_enum! {
    what = "workflow instance status";
    /// An instance of a workflow.
    pub enum InstanceStatus {
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

named_enum! {
    what = "`overlap`";
    /// What a scheduled fire does while an earlier instance of the workflow still runs.
    #[derive(Default)]
    pub enum Overlap {
        /// No instance for this fire (the default).
        #[default]
        Skip => "skip",
        /// The fire waits, and starts its instance when one ends (in fire-time order).
        Queue => "queue",
        /// Its instance starts anyway.
        Allow => "allow",
    }
}

/// Fire times waiting for their turn (`overlap: queue`) are at most this many; a fire
/// beyond them is skipped, and logged.
pub const MAX_QUEUED_FIRES: usize = 1_000;

impl StepStatus {
    /// Succeeded, failed or skipped: what a successor's `when` waits for.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            StepStatus::Succeeded | StepStatus::Failed | StepStatus::Skipped
        )
    }
}

/// One step as written: its job already resolved to an id (the use case does that, in the
/// workflow's app).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepSpec {
    pub name: String,
    pub job_id: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// As written (`None`: all_succeeded); [`Graph::new`] says what is wrong with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub map: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
}

/// A step of a valid graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: String,
    pub job_id: i64,
    /// Indexes of its predecessors, in the order written.
    pub after: Vec<usize>,
    pub when: When,
    pub map: bool,
    pub params: Option<String>,
}

/// A valid graph: no cycle, every predecessor known, each map with one predecessor.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    steps: Vec<Step>,
}

/// What a step's state change makes of another step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Its condition holds: create its task (or, for a map, its elements' tasks).
    Start(usize),
    /// Its condition can no longer hold.
    Skip(usize),
}

impl Graph {
    /// The graph of `specs`, or what is wrong with it, named: no steps or more than
    /// [`MAX_STEPS`], an empty or duplicate step name, an unknown predecessor, a step
    /// listed twice after another, an unknown `when`, `map` without exactly one
    /// predecessor, a cycle (its steps in order).
    pub fn new(specs: &[StepSpec]) -> Result<Graph, String> {
        if specs.is_empty() {
            return Err("steps: a workflow needs at least one step".into());
        }
        if specs.len() > MAX_STEPS {
            return Err(format!(
                "steps: {} steps, at most {MAX_STEPS} allowed",
                specs.len()
            ));
        }
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, s) in specs.iter().enumerate() {
            if s.name.trim().is_empty() {
                return Err(format!("steps[{i}].name: empty"));
            }
            if index.insert(s.name.as_str(), i).is_some() {
                return Err(format!("steps: duplicate step \"{}\"", s.name));
            }
        }
        let mut steps = Vec::with_capacity(specs.len());
        for s in specs {
            let mut after = Vec::with_capacity(s.after.len());
            for p in &s.after {
                let Some(&j) = index.get(p.as_str()) else {
                    return Err(format!(
                        "step \"{}\": `after` names an unknown step \"{p}\"",
                        s.name
                    ));
                };
                if after.contains(&j) {
                    return Err(format!("step \"{}\": `after` names \"{p}\" twice", s.name));
                }
                after.push(j);
            }
            let when = match s.when.as_deref() {
                None => When::AllSucceeded,
                Some(w) => w
                    .parse()
                    .map_err(|e: String| format!("step \"{}\": {e}", s.name))?,
            };
            // A step with no predecessor starts with the instance: another `when` would
            // say something that never applies.
            if after.is_empty() && when != When::AllSucceeded {
                return Err(format!(
                    "step \"{}\": `when` ({when}) needs predecessors (`after`); a step \
                     without them starts with the instance",
                    s.name
                ));
            }
            if s.map && after.len() != 1 {
                return Err(format!(
                    "step \"{}\": `map` needs exactly one predecessor (whose output is the \
                     array to map), it has {}",
                    s.name,
                    after.len()
                ));
            }
            steps.push(Step {
                name: s.name.clone(),
                job_id: s.job_id,
                after,
                when,
                map: s.map,
                params: s.params.clone(),
            });
        }
        let graph = Graph { steps };
        if let Some(cycle) = graph.cycle() {
            return Err(format!("steps: a cycle: {}", cycle.join(" → ")));
        }
        Ok(graph)
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The index of the step named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.steps.iter().position(|s| s.name == name)
    }

    /// The names of a cycle (the first step again at the end), if there is one.
    fn cycle(&self) -> Option<Vec<String>> {
        // 0: not seen, 1: on the current path, 2: done.
        let mut mark = vec![0u8; self.steps.len()];
        let mut path = Vec::new();
        for start in 0..self.steps.len() {
            if let Some(c) = self.visit(start, &mut mark, &mut path) {
                return Some(c.iter().map(|&i| self.steps[i].name.clone()).collect());
            }
        }
        None
    }

    fn visit(&self, i: usize, mark: &mut [u8], path: &mut Vec<usize>) -> Option<Vec<usize>> {
        match mark[i] {
            2 => return None,
            1 => {
                let from = path.iter().position(|&p| p == i).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(i);
                return Some(cycle);
            }
            _ => {}
        }
        mark[i] = 1;
        path.push(i);
        for &p in &self.steps[i].after {
            if let Some(c) = self.visit(p, mark, path) {
                return Some(c);
            }
        }
        path.pop();
        mark[i] = 2;
        None
    }

    /// The steps no other step follows: their outputs are the instance's.
    pub fn sinks(&self) -> Vec<usize> {
        (0..self.steps.len())
            .filter(|&i| !self.steps.iter().any(|s| s.after.contains(&i)))
            .collect()
    }

    /// What the statuses come to: each pending step whose condition now holds starts, each
    /// whose condition can no longer hold is skipped (and its own successors are judged
    /// again, so a skip propagates). `statuses` is updated as decided (a started step is
    /// `Running`). A step with no predecessor starts with the instance.
    pub fn advance(&self, statuses: &mut [StepStatus]) -> Vec<Next> {
        let mut decided = Vec::new();
        loop {
            let mut changed = false;
            for (i, step) in self.steps.iter().enumerate() {
                if statuses[i] != StepStatus::Pending {
                    continue;
                }
                let before: Vec<StepStatus> = step.after.iter().map(|&p| statuses[p]).collect();
                let next = match judge(step.when, &before) {
                    Some(true) => Next::Start(i),
                    Some(false) => Next::Skip(i),
                    None => continue,
                };
                statuses[i] = match next {
                    Next::Start(_) => StepStatus::Running,
                    Next::Skip(_) => StepStatus::Skipped,
                };
                decided.push(next);
                changed = true;
            }
            if !changed {
                return decided;
            }
        }
    }

    /// The instance's end once nothing is pending or running: succeeded when every step
    /// succeeded or was skipped, else failed (or cancelled, if a step was). `None` while
    /// a step may still run.
    pub fn outcome(&self, statuses: &[StepStatus]) -> Option<InstanceStatus> {
        if statuses
            .iter()
            .any(|s| matches!(s, StepStatus::Pending | StepStatus::Running))
        {
            return None;
        }
        Some(if statuses.contains(&StepStatus::Cancelled) {
            InstanceStatus::Cancelled
        } else if statuses.contains(&StepStatus::Failed) {
            InstanceStatus::Failed
        } else {
            InstanceStatus::Succeeded
        })
    }

    /// The payload of step `i`'s task: `{"input": …, "steps": {"<predecessor>": its
    /// output, …}}`, and for an element of a map `"item"` and `"index"` as well.
    ///
    /// An element's `steps` leaves out the array it is an element of: repeated in each of
    /// 10,000 elements, a 48 KB array was 489 MB of task payloads written in the one
    /// transaction that ended its step (past the redo log's 10 % a MariaDB with its default
    /// log refuses), and 0.7 ms of node CPU per element spent serialising it.
    pub fn payload(
        &self,
        i: usize,
        input: &Value,
        outputs: &[Option<Value>],
        item: Option<(usize, &Value)>,
    ) -> Value {
        let steps: Map<String, Value> = self.steps[i]
            .after
            .iter()
            .filter(|_| item.is_none())
            .map(|&p| {
                (
                    self.steps[p].name.clone(),
                    outputs[p].clone().unwrap_or(Value::Null),
                )
            })
            .collect();
        let mut doc = Map::new();
        doc.insert("input".into(), input.clone());
        doc.insert("steps".into(), Value::Object(steps));
        if let Some((index, item)) = item {
            doc.insert("item".into(), item.clone());
            doc.insert("index".into(), Value::from(index));
        }
        Value::Object(doc)
    }

    /// The instance's output: `{"<sink step>": its output, …}`.
    pub fn instance_output(&self, outputs: &[Option<Value>]) -> Value {
        Value::Object(
            self.sinks()
                .into_iter()
                .map(|i| {
                    (
                        self.steps[i].name.clone(),
                        outputs[i].clone().unwrap_or(Value::Null),
                    )
                })
                .collect(),
        )
    }
}

/// Whether a step's condition holds (`Some(true)`), can no longer hold (`Some(false)`),
/// or is not yet known, given its predecessors' statuses.
fn judge(when: When, before: &[StepStatus]) -> Option<bool> {
    if before.is_empty() {
        return Some(true); // a first step starts with the instance
    }
    let all_done = before.iter().all(|s| s.is_done());
    let any = |want: StepStatus| before.contains(&want);
    match when {
        // Known as soon as one predecessor did not succeed.
        When::AllSucceeded => {
            if before
                .iter()
                .any(|s| s.is_done() && *s != StepStatus::Succeeded)
            {
                Some(false)
            } else {
                all_done.then_some(true)
            }
        }
        When::AnySucceeded => all_done.then(|| any(StepStatus::Succeeded)),
        When::AllDone => all_done.then_some(true),
        When::AnyFailed => all_done.then(|| any(StepStatus::Failed)),
    }
}

/// A run's output as kept: JSON if it parses as JSON, else the text as a JSON string;
/// an error naming the size if it is over [`MAX_OUTPUT_BYTES`].
pub fn parse_output(raw: &str) -> Result<Value, String> {
    if raw.len() > MAX_OUTPUT_BYTES {
        return Err(format!(
            "output of {} bytes, at most {MAX_OUTPUT_BYTES} allowed",
            raw.len()
        ));
    }
    Ok(serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())))
}

/// The elements a mapped step runs, from its predecessor's output: a JSON array of at
/// most [`MAX_MAP_ITEMS`], or the reason the step fails.
pub fn map_items(output: Option<&Value>) -> Result<&[Value], String> {
    match output {
        Some(Value::Array(items)) if items.len() <= MAX_MAP_ITEMS => Ok(items),
        Some(Value::Array(items)) => Err(format!(
            "map over {} elements, at most {MAX_MAP_ITEMS} allowed",
            items.len()
        )),
        Some(other) => Err(format!(
            "map needs its predecessor's output to be a JSON array, it is {}",
            match other {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Object(_) => "an object",
                Value::Array(_) => "an array",
            }
        )),
        None => Err("map needs its predecessor's output to be a JSON array, it has none".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepStatus::*;
    use serde_json::json;

    fn spec(name: &str, after: &[&str]) -> StepSpec {
        StepSpec {
            name: name.into(),
            job_id: 1,
            after: after.iter().map(|s| s.to_string()).collect(),
            when: None,
            map: false,
            params: None,
        }
    }

    fn with_when(mut s: StepSpec, when: &str) -> StepSpec {
        s.when = Some(when.into());
        s
    }

    /// fetch → (a, b) → join
    fn diamond() -> Graph {
        Graph::new(&[
            spec("fetch", &[]),
            spec("a", &["fetch"]),
            spec("b", &["fetch"]),
            spec("join", &["a", "b"]),
        ])
        .unwrap()
    }

    #[test]
    fn every_invalid_graph_is_refused_naming_the_problem() {
        let cases: Vec<(Vec<StepSpec>, &str)> = vec![
            (vec![], "at least one step"),
            (
                vec![spec("a", &["c"]), spec("b", &["a"]), spec("c", &["b"])],
                "a cycle: a → c → b → a",
            ),
            (vec![spec("a", &["a"])], "a cycle: a → a"),
            (vec![spec("a", &["nope"])], "unknown step \"nope\""),
            (vec![spec("a", &[]), spec("a", &[])], "duplicate step \"a\""),
            (
                vec![spec("a", &[]), spec("b", &["a", "a"])],
                "names \"a\" twice",
            ),
            (
                vec![spec("a", &[]), with_when(spec("b", &["a"]), "sometimes")],
                "`sometimes` is not a valid `when`",
            ),
            (vec![spec("", &[])], "steps[0].name: empty"),
            (
                vec![with_when(spec("a", &[]), "any_failed")],
                "`when` (any_failed) needs predecessors",
            ),
            (
                (0..101).map(|i| spec(&format!("s{i}"), &[])).collect(),
                "101 steps, at most 100",
            ),
        ];
        for (steps, want) in cases {
            let err = Graph::new(&steps).unwrap_err();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
        let mut two = spec("m", &["a", "b"]);
        two.map = true;
        let err = Graph::new(&[spec("a", &[]), spec("b", &[]), two]).unwrap_err();
        assert!(err.contains("`map` needs exactly one predecessor"), "{err}");
        let mut none = spec("m", &[]);
        none.map = true;
        assert!(Graph::new(&[none]).unwrap_err().contains("it has 0"));
    }

    #[test]
    fn a_diamond_starts_its_root_then_both_branches_then_the_join_once() {
        let g = diamond();
        let mut s = vec![Pending; 4];
        assert_eq!(g.advance(&mut s), vec![Next::Start(0)]);
        assert_eq!(g.advance(&mut s), vec![], "nothing more until fetch ends");
        s[0] = Succeeded;
        assert_eq!(g.advance(&mut s), vec![Next::Start(1), Next::Start(2)]);
        s[1] = Succeeded;
        assert_eq!(g.advance(&mut s), vec![], "the join waits for b");
        s[2] = Succeeded;
        assert_eq!(g.advance(&mut s), vec![Next::Start(3)]);
        assert_eq!(g.advance(&mut s), vec![], "and starts once");
        assert_eq!(g.outcome(&s), None);
        s[3] = Succeeded;
        assert_eq!(g.outcome(&s), Some(InstanceStatus::Succeeded));
        assert_eq!(g.sinks(), vec![3]);
    }

    #[test]
    fn a_failure_skips_what_needed_it_and_the_skip_propagates() {
        // fetch → a → b; fetch fails: a and b are skipped at once, the instance failed.
        let g =
            Graph::new(&[spec("fetch", &[]), spec("a", &["fetch"]), spec("b", &["a"])]).unwrap();
        let mut s = vec![Pending; 3];
        g.advance(&mut s);
        s[0] = Failed;
        assert_eq!(g.advance(&mut s), vec![Next::Skip(1), Next::Skip(2)]);
        assert_eq!(g.outcome(&s), Some(InstanceStatus::Failed));
    }

    #[test]
    fn all_succeeded_is_skipped_as_soon_as_one_predecessor_failed() {
        let g = diamond();
        let mut s = vec![Succeeded, Failed, Running, Pending];
        assert_eq!(g.advance(&mut s), vec![Next::Skip(3)]);
        assert_eq!(g.outcome(&s), None, "b still runs");
        s[2] = Succeeded;
        assert_eq!(g.outcome(&s), Some(InstanceStatus::Failed));
    }

    #[test]
    fn each_when_decides_once_every_predecessor_is_done() {
        // (when, a's and b's ends, whether the join runs)
        let cases = [
            ("all_succeeded", [Succeeded, Succeeded], true),
            ("all_succeeded", [Succeeded, Skipped], false),
            ("any_succeeded", [Failed, Succeeded], true),
            ("any_succeeded", [Failed, Skipped], false),
            ("all_done", [Failed, Skipped], true),
            ("all_done", [Succeeded, Succeeded], true),
            ("any_failed", [Succeeded, Failed], true),
            ("any_failed", [Succeeded, Skipped], false),
        ];
        for (when, [a, b], runs) in cases {
            let g = Graph::new(&[
                spec("a", &[]),
                spec("b", &[]),
                with_when(spec("join", &["a", "b"]), when),
            ])
            .unwrap();
            let mut waiting = vec![a, Running, Pending];
            assert_eq!(g.advance(&mut waiting), vec![], "{when}: b is not done yet");
            let mut done = vec![a, b, Pending];
            let want = if runs { Next::Start(2) } else { Next::Skip(2) };
            assert_eq!(g.advance(&mut done), vec![want], "{when} after {a}, {b}");
        }
    }

    #[test]
    fn a_compensation_step_runs_on_failure_and_the_instance_still_failed() {
        // charge → notify; charge → refund (any_failed); refund runs, notify is skipped.
        let g = Graph::new(&[
            spec("charge", &[]),
            spec("notify", &["charge"]),
            with_when(spec("refund", &["charge"]), "any_failed"),
        ])
        .unwrap();
        let mut s = vec![Failed, Pending, Pending];
        assert_eq!(g.advance(&mut s), vec![Next::Skip(1), Next::Start(2)]);
        s[2] = Succeeded;
        assert_eq!(g.outcome(&s), Some(InstanceStatus::Failed));
        // On success the refund is skipped, and the instance succeeded.
        let mut s = vec![Succeeded, Pending, Pending];
        assert_eq!(g.advance(&mut s), vec![Next::Start(1), Next::Skip(2)]);
        s[1] = Succeeded;
        assert_eq!(g.outcome(&s), Some(InstanceStatus::Succeeded));
    }

    #[test]
    fn a_cancelled_step_makes_the_instance_cancelled() {
        let g = diamond();
        let s = vec![Succeeded, Cancelled, Cancelled, Cancelled];
        assert_eq!(g.outcome(&s), Some(InstanceStatus::Cancelled));
    }

    #[test]
    fn payloads_carry_the_input_and_each_predecessors_output() {
        let g = diamond();
        let outputs = vec![
            Some(json!({"orders": [1, 2]})),
            Some(json!("text")),
            None,
            None,
        ];
        let input = json!({"day": "2026-12-04"});
        assert_eq!(
            g.payload(0, &input, &outputs, None),
            json!({"input": input, "steps": {}})
        );
        assert_eq!(
            g.payload(3, &input, &outputs, None),
            json!({"input": input, "steps": {"a": "text", "b": null}})
        );
        assert_eq!(
            g.payload(1, &input, &outputs, Some((7, &json!(42)))),
            json!({"input": input, "steps": {}, "item": 42, "index": 7}),
            "an element carries its item, not the whole array again"
        );
        let all = vec![None, None, None, Some(json!(3))];
        assert_eq!(g.instance_output(&all), json!({"join": 3}));
    }

    #[test]
    fn outputs_are_json_when_they_parse_and_bounded() {
        assert_eq!(parse_output("{\"n\": 1}").unwrap(), json!({"n": 1}));
        assert_eq!(parse_output("done").unwrap(), json!("done"));
        let big = "x".repeat(MAX_OUTPUT_BYTES + 1);
        assert!(parse_output(&big).unwrap_err().contains("65537 bytes"));
    }

    #[test]
    fn a_map_needs_an_array_of_at_most_ten_thousand() {
        assert_eq!(map_items(Some(&json!([1, 2]))).unwrap().len(), 2);
        assert!(
            map_items(Some(&json!({"a": 1})))
                .unwrap_err()
                .contains("an object")
        );
        assert!(map_items(None).unwrap_err().contains("has none"));
        let long = Value::Array(vec![Value::Null; MAX_MAP_ITEMS + 1]);
        assert!(
            map_items(Some(&long))
                .unwrap_err()
                .contains("10001 elements")
        );
    }
}
