//! The console's languages: English (the text in the templates) and Simplified Chinese.
//! Chosen by the `rota_lang` cookie (the switch in the header) or else `Accept-Language`.
//!
//! Templates write `{{ chrome.t("Jobs") }}`: the English text is the key, so a string
//! missing from [`ZH_CN`] shows in English rather than as a blank.

use axum::http::{HeaderMap, header};

/// The language cookie's name.
pub const COOKIE: &str = "rota_lang";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    ZhCn,
}

impl Lang {
    /// The BCP 47 tag, for `<html lang>` and the cookie.
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::ZhCn => "zh-CN",
        }
    }

    pub fn from_tag(tag: &str) -> Option<Lang> {
        let tag = tag.trim().to_ascii_lowercase();
        if tag == "en" || tag.starts_with("en-") {
            Some(Lang::En)
        } else if tag == "zh" || tag.starts_with("zh-") {
            Some(Lang::ZhCn)
        } else {
            None
        }
    }

    /// The cookie's choice, else the first language of `Accept-Language` we speak (by
    /// weight), else English.
    pub fn of(headers: &HeaderMap) -> Lang {
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)
            .and_then(|(_, v)| Lang::from_tag(v));
        if let Some(lang) = cookie {
            return lang;
        }
        let accept = headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let mut best: Option<(f32, Lang)> = None;
        for item in accept.split(',') {
            let mut parts = item.split(';');
            let Some(lang) = parts.next().and_then(Lang::from_tag) else {
                continue;
            };
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            if best.is_none_or(|(bq, _)| q > bq) {
                best = Some((q, lang));
            }
        }
        best.map_or(Lang::En, |(_, l)| l)
    }

    /// `en` in this language.
    pub fn t(self, en: &'static str) -> &'static str {
        match self {
            Lang::En => en,
            Lang::ZhCn => ZH_CN
                .iter()
                .find(|(k, _)| *k == en)
                .map_or(en, |(_, zh)| zh),
        }
    }

    /// The other language, for the switch.
    pub fn other(self) -> Lang {
        match self {
            Lang::En => Lang::ZhCn,
            Lang::ZhCn => Lang::En,
        }
    }

    /// The other language's name, in itself.
    pub fn other_name(self) -> &'static str {
        match self {
            Lang::En => "中文",
            Lang::ZhCn => "English",
        }
    }
}

/// English → Simplified Chinese. The domain's words: job 作业, task 任务, run 运行,
/// plugin 插件, executor 执行器, app 应用, schedule 调度.
const ZH_CN: &[(&str, &str)] = &[
    ("Dashboard", "仪表盘"),
    ("Jobs", "作业"),
    ("Tasks", "任务"),
    ("Runs", "运行"),
    ("Plugins", "插件"),
    ("Executors", "执行器"),
    ("Audit", "审计"),
    ("Sign out", "退出"),
    ("Sign in", "登录"),
    ("User", "用户"),
    ("Password", "密码"),
    ("jobs", "个作业"),
    ("tasks pending", "个待执行任务"),
    ("executors online", "个在线执行器"),
    ("Runs today", "今日运行"),
    ("since", "自"),
    ("status", "状态"),
    ("runs", "运行数"),
    ("New job", "新建作业"),
    ("Name contains", "名称包含"),
    ("Search", "搜索"),
    ("name", "名称"),
    ("app", "应用"),
    ("plugin", "插件"),
    ("schedule", "调度"),
    ("next fire", "下次触发"),
    ("enabled", "启用"),
    ("yes", "是"),
    ("no", "否"),
    ("No jobs.", "没有作业。"),
    ("Next page →", "下一页 →"),
    ("Job", "作业"),
    ("Trigger now", "立即触发"),
    ("params (optional)", "参数（可选）"),
    ("Disable", "停用"),
    ("Enable", "启用"),
    ("Delete…", "删除…"),
    ("Name", "名称"),
    ("App", "应用"),
    ("Plugin", "插件"),
    ("Schedule", "调度"),
    ("Kind", "类型"),
    (
        "Cron expression (Quartz, with seconds)",
        "Cron 表达式（Quartz，含秒）",
    ),
    (
        "Time zone (IANA, blank for UTC)",
        "时区（IANA，留空为 UTC）",
    ),
    (
        "Every (ms: fixed rate; after each run: fixed delay)",
        "间隔（毫秒：固定频率；每次运行结束后：固定延迟）",
    ),
    ("Preview", "预览"),
    ("Next fire times:", "接下来的触发时间："),
    ("Params", "参数"),
    ("Route", "路由策略"),
    ("When busy", "阻塞策略"),
    ("Misfire", "错过触发"),
    ("Timeout (ms)", "超时（毫秒）"),
    ("Max attempts", "最大尝试次数"),
    ("Memory (MiB)", "内存（MiB）"),
    ("Max concurrency (blank: no limit)", "最大并发（留空不限）"),
    ("Waiting for a slot, by key", "按键等待并发名额"),
    ("Throttled", "限流等待"),
    (
        "Concurrency per (a JSON Pointer into the payload, like /customer; blank: the whole job)",
        "并发按键（载荷中的 JSON Pointer，如 /customer；留空：整个任务）",
    ),
    (
        "Rate limit: starts (blank: no limit)",
        "限速：启动次数（留空不限）",
    ),
    ("per (ms)", "每（毫秒）"),
    ("Behind its schedule", "调度滞后"),
    ("Its last fires", "最近触发次数"),
    (
        "latest start after its fire time",
        "最近一次晚于触发时间启动",
    ),
    ("at most", "最多"),
    ("never ran", "未运行"),
    (
        "Debounce (ms: a task with the key of a pending one replaces it; blank: keys deduplicate)",
        "防抖（毫秒：带有待运行任务键的新任务替换它；留空：键用于去重）",
    ),
    (
        "Rate limit per (a JSON Pointer into the payload, like /partner; blank: the whole job)",
        "限速按键（载荷中的 JSON Pointer，如 /partner；留空：整个任务）",
    ),
    ("Secrets", "密钥"),
    (
        "Plugins of an app read its secrets with secret_get. A value is stored sealed and never shown again.",
        "应用的插件通过 secret_get 读取密钥。密钥值加密保存，之后不再显示。",
    ),
    ("Value", "值"),
    ("Delete this secret?", "删除此密钥？"),
    ("No secrets.", "没有密钥。"),
    (
        "HTTP allow-list: one origin or URL prefix per line; empty: no network",
        "HTTP 白名单：每行一个源或 URL 前缀；留空则不能访问网络",
    ),
    ("Enabled", "启用"),
    ("Save", "保存"),
    ("Delete job", "删除作业"),
    (
        "The job and its pending tasks go; running runs finish on their own. This cannot be undone.",
        "作业及其待执行任务将被删除；正在进行的运行会自行结束。此操作无法撤销。",
    ),
    ("Delete", "删除"),
    ("Cancel", "取消"),
    ("Job id", "作业 ID"),
    ("Status", "状态"),
    ("Key", "键"),
    ("any", "全部"),
    ("job", "作业"),
    ("kind", "类型"),
    ("key", "键"),
    ("due", "到期"),
    ("attempt", "尝试"),
    ("No tasks.", "没有任务。"),
    ("Task", "任务"),
    ("created", "创建"),
    ("updated", "更新"),
    ("params", "参数"),
    ("payload", "载荷"),
    ("last run", "最近运行"),
    ("Cancel task", "取消任务"),
    ("Retry (a new attempt, now)", "重试（立即新一次尝试）"),
    ("Run at (UTC)", "执行时间（UTC）"),
    ("Priority", "优先级"),
    ("Reschedule", "改期"),
    ("Retry dead tasks", "重试已死亡任务"),
    (
        "Retry every dead task of this job?",
        "重试该作业的所有已死亡任务？",
    ),
    ("Queue", "队列"),
    ("ready for a consumer", "待消费"),
    ("leased", "已租出"),
    ("consumers in the last minute", "最近一分钟的消费者"),
    ("Delivery", "投递方式"),
    ("Plugin (wasm delivery)", "插件（wasm 投递）"),
    ("Webhook URL (http delivery)", "Webhook 地址（http 投递）"),
    (
        "Signing secret (a secret of the app)",
        "签名密钥（应用的密钥名）",
    ),
    (
        "XXL-JOB handler (xxl delivery)",
        "XXL-JOB 处理器（xxl 投递）",
    ),
    ("task", "任务"),
    ("shard", "分片"),
    ("executor", "执行器"),
    ("scheduled", "计划时间"),
    ("finished", "结束"),
    ("No runs.", "没有运行。"),
    ("Filter", "筛选"),
    ("Run", "运行"),
    ("started", "开始"),
    ("exit code", "退出码"),
    ("message", "消息"),
    ("Kill run", "终止运行"),
    ("Log", "日志"),
    (
        "No log: the run has not reached an executor.",
        "没有日志：该运行尚未到达执行器。",
    ),
    (
        "Turn on JavaScript to follow the log here.",
        "启用 JavaScript 以在此跟踪日志。",
    ),
    ("Upload", "上传"),
    (
        "Module or component (.wasm or .wat), at most",
        "模块或组件（.wasm 或 .wat），最大",
    ),
    ("component", "组件"),
    ("module", "模块"),
    ("imports", "项导入"),
    (
        "Uploading from this page needs JavaScript; without it use",
        "从此页面上传需要 JavaScript；否则请使用",
    ),
    ("or", "或"),
    ("version", "版本"),
    ("bytes", "字节"),
    ("uploaded", "上传时间"),
    ("No plugins.", "没有插件。"),
    ("Executors online", "在线执行器"),
    ("address", "地址"),
    ("running", "运行中"),
    ("capacity", "容量"),
    ("registered", "注册时间"),
    ("last heartbeat", "最近心跳"),
    ("No executor is online.", "没有在线的执行器。"),
    ("Scheduler nodes", "调度节点"),
    ("clock offset (ms)", "时钟偏差（毫秒）"),
    ("gone", "已离线"),
    ("clock off", "时钟偏差过大"),
    ("ready", "就绪"),
    ("Audit log", "审计日志"),
    ("when", "时间"),
    ("user", "用户"),
    ("action", "操作"),
    ("target", "对象"),
    ("Nothing yet.", "暂无记录。"),
    ("Wrong user name or password.", "用户名或密码错误。"),
    ("signs in with", "登录方式"),
    (
        "Sign in with your company directory (LDAP) account, or a local Rota account.",
        "请使用公司目录（LDAP）账号或 Rota 本地账号登录。",
    ),
    (
        "Your password is your directory account's: change it there.",
        "您的密码属于目录账号：请在目录中修改。",
    ),
    ("a password kept here", "本地密码"),
    (
        "from the directory's groups, at each sign-in",
        "每次登录时由目录分组决定",
    ),
    (
        "from the provider's groups, at each sign-in",
        "每次登录时由身份提供方的分组决定",
    ),
    (
        "Your directory account is in no group that gives access to Rota. Ask an administrator.",
        "您的目录账号不在任何可访问 Rota 的组中，请联系管理员。",
    ),
    (
        "Sign-in with a local account is turned off: use your directory account.",
        "本地账号登录已关闭：请使用目录账号登录。",
    ),
    (
        "The directory cannot be reached: try again later (local accounts still work).",
        "无法连接目录服务：请稍后重试（本地账号仍可登录）。",
    ),
    (
        "The identity provider cannot be reached: try again later (local accounts still work).",
        "无法连接身份提供方：请稍后重试（本地账号仍可登录）。",
    ),
    (
        "Sign-in through an identity provider is not set up on this node.",
        "此节点未配置通过身份提供方登录。",
    ),
    (
        "This sign-in was not started in this browser, or took too long: sign in again.",
        "此次登录并非在本浏览器中发起，或耗时过长：请重新登录。",
    ),
    (
        "Your account is in no group that gives access to Rota. Ask an administrator.",
        "你的账号不在任何可访问 Rota 的组中。请联系管理员。",
    ),
    ("Account", "账户"),
    ("Change password", "修改密码"),
    ("Current password", "当前密码"),
    ("New password", "新密码"),
    ("New password, again", "再次输入新密码"),
    ("This is not your password.", "当前密码不正确。"),
    ("The two passwords differ.", "两次输入的密码不一致。"),
    (
        "Password changed; your other sessions have ended.",
        "密码已修改；你的其他会话已结束。",
    ),
    (
        "This sign-in form did not come from this site.",
        "此登录表单并非来自本站。",
    ),
    ("Users", "用户"),
    ("Tokens", "令牌"),
    ("API tokens", "API 令牌"),
    ("New user", "新用户"),
    ("Create user", "创建用户"),
    ("Role", "角色"),
    ("role", "角色"),
    ("apps", "应用"),
    ("role and apps", "角色与应用"),
    (
        "Apps (comma-separated, or * for every app)",
        "应用（逗号分隔，* 表示全部应用）",
    ),
    ("you", "你"),
    (
        "viewer: reads its apps. operator: also changes jobs, tasks and runs of its apps and uploads plugins. admin: everything, every app, users and tokens.",
        "viewer：只读其应用。operator：还可修改其应用的作业、任务和运行，并上传插件。admin：全部权限，所有应用、用户和令牌。",
    ),
    (
        "Delete this user, their sessions and tokens?",
        "删除该用户及其会话和令牌？",
    ),
    (
        "Your new token. Copy it now: it is shown only this once.",
        "你的新令牌。请立即复制：它只显示这一次。",
    ),
    (
        "A token acts as the user it belongs to, with that user's role and apps.",
        "令牌以其所属用户的身份、角色和应用行事。",
    ),
    ("revoked", "已吊销"),
    ("Revoke", "吊销"),
    (
        "Revoke this token? Clients using it stop working at once.",
        "吊销该令牌？使用它的客户端将立即失效。",
    ),
    ("No tokens.", "没有令牌。"),
    ("New token", "新令牌"),
    ("Name (what uses it)", "名称（谁在使用）"),
    ("Create token", "创建令牌"),
    ("Runs per minute, last hour", "每分钟运行数（最近一小时）"),
    ("Runs per day, last 7 days", "每天运行数（最近 7 天）"),
    (
        "The charts count the runs of every app: they are shown to users who see every app.",
        "图表统计所有应用的运行：仅对可查看所有应用的用户显示。",
    ),
    (
        "fire lateness p99, last 5 min",
        "触发延迟 p99（最近 5 分钟）",
    ),
    (
        "fires on this node in the last 5 minutes",
        "本节点最近 5 分钟的触发次数",
    ),
    (
        "failed, timed out, killed or lost",
        "失败、超时、被终止或丢失",
    ),
    (
        "Cancel this task? It will not run.",
        "取消该任务？它将不会运行。",
    ),
    ("used by", "使用者"),
    ("no job", "无作业"),
    ("older version", "旧版本"),
    (
        "Delete every version of this plugin?",
        "删除该插件的所有版本？",
    ),
    ("Schedule task", "计划任务"),
    ("delay, seconds", "延迟（秒）"),
    ("key (optional)", "键（可选）"),
    ("payload (optional)", "载荷（可选）"),
    ("Due from (UTC)", "到期起（UTC）"),
    ("Due before (UTC)", "到期止（UTC）"),
    ("succeeded", "成功"),
    ("dead", "死亡"),
    ("Alarms", "告警"),
    (
        "Rules watch failures, dead tasks, lateness and executors; channels tell people. A throttle folds repeated events into one message with a count, and a resolved notice follows when the condition clears.",
        "规则监视失败、死亡任务、延迟和执行器；通道负责通知。节流把重复事件合并为一条带计数的消息，条件消除后会发送恢复通知。",
    ),
    ("Channels", "通道"),
    ("Test message delivered through", "测试消息已送达："),
    ("signed with", "签名密钥"),
    ("Send test", "发送测试"),
    ("Delete this channel?", "删除此通道？"),
    ("No channels.", "没有通道。"),
    ("blank: every app", "留空：所有应用"),
    ("Email recipients", "邮件收件人"),
    ("Signing secret (an app secret)", "签名密钥（应用密钥名）"),
    ("Add channel", "添加通道"),
    ("Rules", "规则"),
    ("on", "事件"),
    ("threshold", "阈值"),
    ("channels", "通道"),
    ("throttle", "节流"),
    ("open since", "告警中，始于"),
    ("quiet", "正常"),
    ("disabled", "已停用"),
    ("Delete this rule?", "删除此规则？"),
    ("No rules.", "没有规则。"),
    ("Job (blank: every job)", "作业（留空：所有作业）"),
    ("On", "事件"),
    ("Threshold (ms)", "阈值（毫秒）"),
    ("Throttle (s, blank: 60)", "节流（秒，留空为 60）"),
    ("Add rule", "添加规则"),
    ("History", "历史"),
    ("time", "时间"),
    ("rule", "规则"),
    ("count", "次数"),
    ("sends", "发送"),
    ("resolved", "已恢复"),
    ("No alarms yet.", "还没有告警。"),
    ("Open alarms", "未恢复的告警"),
    ("Workflows", "工作流"),
    ("Workflow", "工作流"),
    ("Workflow instance", "工作流实例"),
    ("Cancel instance", "取消实例"),
    (
        "Cancel this instance? Its running steps are killed.",
        "取消这个实例？正在运行的步骤会被终止。",
    ),
    ("Input (JSON)", "输入（JSON）"),
    (
        "Key (optional: a second start with it returns the first instance)",
        "键（可选：用同一个键再次启动会返回第一个实例）",
    ),
    ("Latest instances", "最近的实例"),
    ("No instances yet.", "还没有实例。"),
    (
        "No workflows yet: define one with the API or `rota workflow apply`.",
        "还没有工作流：用 API 或 `rota workflow apply` 定义一个。",
    ),
    ("Retry the failed steps", "重试失败的步骤"),
    ("Start", "启动"),
    ("Start an instance", "启动一个实例"),
    ("Steps", "步骤"),
    (
        "This workflow is disabled: enable it to start instances.",
        "这个工作流已停用：启用后才能启动实例。",
    ),
    ("after", "前置步骤"),
    ("elements", "元素"),
    ("id", "编号"),
    ("input", "输入"),
    ("map", "映射"),
    ("output", "输出"),
    ("step", "步骤"),
    ("steps", "步骤数"),
    ("took", "耗时"),
    ("workflow", "工作流"),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_cookie_wins_then_accept_language_by_weight() {
        assert_eq!(Lang::of(&HeaderMap::new()), Lang::En);
        let al = header::ACCEPT_LANGUAGE;
        assert_eq!(
            Lang::of(&headers(&[(al.clone(), "zh-CN,zh;q=0.9,en;q=0.8")])),
            Lang::ZhCn
        );
        assert_eq!(
            Lang::of(&headers(&[(al.clone(), "fr, en;q=0.5, zh;q=0.4")])),
            Lang::En
        );
        assert_eq!(Lang::of(&headers(&[(al.clone(), "de")])), Lang::En);
        let both = headers(&[(al, "zh-CN"), (header::COOKIE, "a=b; rota_lang=en")]);
        assert_eq!(Lang::of(&both), Lang::En);
    }

    #[test]
    fn every_key_is_unique_and_english_is_the_key() {
        for (i, (k, _)) in ZH_CN.iter().enumerate() {
            assert!(
                ZH_CN[..i].iter().all(|(other, _)| other != k),
                "`{k}` twice"
            );
        }
        assert_eq!(Lang::En.t("Jobs"), "Jobs");
        assert_eq!(Lang::ZhCn.t("Jobs"), "作业");
        assert_eq!(Lang::ZhCn.t("not translated"), "not translated");
    }

    #[test]
    fn every_text_of_the_templates_has_its_chinese() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web/templates");
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for piece in text.split("chrome.t(\"").skip(1) {
                let key = piece.split("\")").next().unwrap();
                if !ZH_CN.iter().any(|(k, _)| *k == key) {
                    missing.push(format!("{}: {key}", path.display()));
                }
            }
        }
        assert!(missing.is_empty(), "untranslated: {missing:#?}");
    }
}
