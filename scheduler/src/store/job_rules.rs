//! What a job says of its ended attempts: how many attempts and how far apart, its
//! children, whether an end frees a slot, a fixed delay's next fire. Brought by the node
//! from its job cache ([`Completing::rules`](super::Completing)) or read by the
//! transaction that ends the attempts.

use std::collections::HashMap;

use sqlx::{FromRow, QueryBuilder};

use super::runs::EndedRow;
use super::*;

/// What the jobs of ended attempts say of retries and children, read apart and without
/// locks (a join would lock the job's row too, and a concurrent change of the job would
/// then deadlock with the report): once per job, not once per task, and only for the jobs
/// whose rules the node did not bring ([`Completing::rules`]).
const JOB_RULES_SELECT: &str = "SELECT id, max_attempts, backoff, child_jobs, max_concurrency, schedule FROM jobs WHERE id IN ";

/// What a job says of its ended attempts' sequels: how many attempts and how far apart,
/// its children, whether an end frees a concurrency slot, the next fire of a fixed delay.
/// A job deleted meanwhile says nothing ([`Default`]): the task's own settings, or none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobRules {
    pub max_attempts: Option<i32>,
    pub backoff: Option<Backoff>,
    pub child_jobs: Vec<i64>,
    /// It has a concurrency bound: an ended attempt may free a slot.
    pub bounded: bool,
    /// A fixed-delay schedule's delay: the next fire comes that long after a fire ends.
    pub fixed_delay_ms: Option<Millis>,
}

impl JobRules {
    /// The rules `spec` sets.
    pub fn of(spec: &JobSpec) -> Self {
        JobRules {
            max_attempts: Some(spec.max_attempts),
            backoff: Some(spec.backoff.clone()),
            child_jobs: spec.child_jobs.clone(),
            bounded: spec.max_concurrency.is_some(),
            fixed_delay_ms: match spec.schedule {
                Schedule::FixedDelay { every_ms } => Some(every_ms),
                _ => None,
            },
        }
    }

    /// A fixed-delay job's next fire time once one of its fires ended at `now`.
    pub(super) fn after_fire(&self, now: Millis) -> Option<Millis> {
        now.checked_add(self.fixed_delay_ms?)
    }
}

/// A job's columns that decide what follows an ended attempt ([`JOB_RULES_SELECT`]).
#[derive(FromRow)]
struct JobRulesRow {
    id: i64,
    max_attempts: Option<i32>,
    backoff: Option<String>,
    child_jobs: Option<String>,
    max_concurrency: Option<i32>,
    schedule: Option<String>,
}

impl JobRulesRow {
    fn parse(self) -> Result<(i64, JobRules)> {
        let fixed_delay_ms = match self.schedule.as_deref().map(serde_json::from_str) {
            Some(Ok(Schedule::FixedDelay { every_ms })) => Some(every_ms),
            _ => None,
        };
        Ok((
            self.id,
            JobRules {
                max_attempts: self.max_attempts,
                backoff: self.backoff.as_deref().map(parse_json).transpose()?,
                child_jobs: match self.child_jobs.as_deref() {
                    Some(s) => parse_json(s)?,
                    None => Vec::new(),
                },
                bounded: self.max_concurrency.is_some(),
                fixed_delay_ms,
            },
        ))
    }
}

impl Store {
    /// What the jobs of `rows` that are not in `known` say of retries and children, by
    /// job id.
    pub(super) async fn job_rules(
        &self,
        tx: &mut Tx,
        rows: &[EndedRow],
        known: &HashMap<i64, JobRules>,
    ) -> Result<HashMap<i64, JobRules>> {
        let mut job_ids: Vec<i64> = rows
            .iter()
            .map(|r| r.job_id)
            .filter(|id| !known.contains_key(id))
            .collect();
        job_ids.sort_unstable();
        job_ids.dedup();
        if job_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let read: Vec<JobRulesRow> = on_tx!(tx, |tx, Db| {
            let mut qb = QueryBuilder::<Db>::new(JOB_RULES_SELECT);
            push_ids(&mut qb, job_ids.iter().copied());
            qb.build_query_as::<JobRulesRow>()
                .fetch_all(&mut **tx)
                .await?
        });
        read.into_iter().map(JobRulesRow::parse).collect()
    }
}
