//! XXL-JOB's wire format, as `xxl-job-core` 2.5.0 and 3.3.2 speak it: JSON bodies of
//! camelCase fields, every answer HTTP 200 with an envelope whose `code` says how it went
//! (200 success, 500 failure, 502 timeout). 2.x calls the envelope's payload `content`,
//! 3.x `data`; Rota writes both and reads either.

use serde::{Deserialize, Serialize};

/// The header every call carries in both directions.
pub const TOKEN_HEADER: &str = "XXL-JOB-ACCESS-TOKEN";

/// `code` of a success.
pub const SUCCESS: i32 = 200;
/// `code` of a failure.
pub const FAIL: i32 = 500;
/// `code` of a handler that ran past its `executorTimeout`.
pub const TIMEOUT: i32 = 502;

/// Every answer: `ReturnT` in 2.x, `Response` in 3.x.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub code: i32,
    #[serde(default)]
    pub msg: Option<String>,
    /// 2.x's name for the payload.
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub content: Option<T>,
    /// 3.x's name for the payload.
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub data: Option<T>,
}

fn none<T>() -> Option<T> {
    None
}

impl<T> Envelope<T> {
    pub fn success() -> Self {
        Envelope {
            code: SUCCESS,
            msg: None,
            content: None,
            data: None,
        }
    }

    pub fn fail(msg: impl Into<String>) -> Self {
        Envelope {
            code: FAIL,
            msg: Some(msg.into()),
            content: None,
            data: None,
        }
    }

    /// The payload, under either name.
    pub fn payload(self) -> Option<T> {
        self.data.or(self.content)
    }
}

/// `POST {admin}/api/registry` and `/api/registryRemove`: an executor of `registryKey`
/// (its appname) at `registryValue` (its address).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryParam {
    #[serde(default)]
    pub registry_group: String,
    #[serde(default)]
    pub registry_key: String,
    #[serde(default)]
    pub registry_value: String,
}

/// One element of `POST {admin}/api/callback` (a JSON array of them): the run `logId`
/// ended with `handleCode`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallbackParam {
    pub log_id: i64,
    /// Sic: xxl-job-core spells it so.
    #[serde(default)]
    pub log_date_tim: i64,
    pub handle_code: i32,
    #[serde(default)]
    pub handle_msg: Option<String>,
}

/// `POST {executor}/run`: run `executorHandler` once, as run `logId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerParam {
    /// Keys the executor's job thread: its block strategy applies among runs of one id.
    pub job_id: i64,
    pub executor_handler: String,
    pub executor_params: String,
    /// `SERIAL_EXECUTION`, `DISCARD_LATER` or `COVER_EARLY`.
    pub executor_block_strategy: String,
    /// Seconds; 0: none.
    pub executor_timeout: i64,
    pub log_id: i64,
    /// Names the directory of the run's log file on the executor; `/log` repeats it.
    pub log_date_time: i64,
    pub glue_type: String,
    pub glue_source: String,
    pub glue_updatetime: i64,
    pub broadcast_index: i32,
    pub broadcast_total: i32,
}

/// `POST {executor}/kill` and `/idleBeat`: about the job thread of `jobId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobParam {
    pub job_id: i64,
}

/// `POST {executor}/log`: the run's log from line `fromLineNum` (1-based).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogParam {
    pub log_date_tim: i64,
    pub log_id: i64,
    pub from_line_num: i64,
}

/// What `/log` answers: the lines from `fromLineNum` to `toLineNum`, as one text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogResult {
    #[serde(default)]
    pub from_line_num: i64,
    #[serde(default)]
    pub to_line_num: i64,
    #[serde(default)]
    pub log_content: Option<String>,
    #[serde(default)]
    pub is_end: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_reads_both_lines_and_writes_what_both_read() {
        let two: Envelope<LogResult> = serde_json::from_str(
            r#"{"code":200,"msg":null,"content":{"fromLineNum":1,"toLineNum":2,"logContent":"a\nb","isEnd":false}}"#,
        )
        .unwrap();
        let three: Envelope<LogResult> = serde_json::from_str(
            r#"{"code":200,"msg":null,"data":{"fromLineNum":1,"toLineNum":2,"logContent":"a\nb","isEnd":false}}"#,
        )
        .unwrap();
        assert_eq!(two.payload(), three.payload());
        let failed: Envelope<String> =
            serde_json::from_str(r#"{"code":500,"msg":"The access token is wrong."}"#).unwrap();
        assert_eq!(failed.code, FAIL);
        assert_eq!(failed.payload(), None);
        assert_eq!(
            serde_json::to_string(&Envelope::<String>::success()).unwrap(),
            r#"{"code":200,"msg":null}"#
        );
    }

    #[test]
    fn a_callback_reads_as_xxl_job_core_writes_it() {
        let list: Vec<CallbackParam> = serde_json::from_str(
            r#"[{"logId":7,"logDateTim":1700000000000,"handleCode":502,"handleMsg":"timeout"}]"#,
        )
        .unwrap();
        assert_eq!(
            list,
            vec![CallbackParam {
                log_id: 7,
                log_date_tim: 1_700_000_000_000,
                handle_code: TIMEOUT,
                handle_msg: Some("timeout".into()),
            }]
        );
    }
}
