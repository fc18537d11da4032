//! The egress policy: where a node's HTTP on a job's behalf may connect — webhook
//! deliveries and alarm channels on a scheduler, plugins' `http_request` and `wasi:http` on
//! an executor. A job's `http_allow` list is written by whoever may change the job; this
//! policy is the admin's (flags or environment, read at start), and it bounds every list.
//!
//! A rule names an address range (`10.0.0.0/8`, `fd00::/8`, `127.0.0.1`), a host name
//! (`hooks.corp.example`, or `*.corp.example` for every name below it), optionally with a
//! port (`127.0.0.1:18282`, `[::1]:8080`, `10.0.0.0/8:443`, `*.corp.example:443`), and
//! allows or denies it. Built in, before the admin's rules ([`Policy::new`]): loopback,
//! link-local, the cloud metadata addresses, the unspecified, multicast, broadcast and
//! reserved ranges are denied; private ranges are allowed, like every address no rule names.
//! The node adds its own listen ports and its database's host and port ([`Policy::deny_own_port`],
//! [`Policy::deny_service`]).
//!
//! **Which rule decides.** For an address, the most specific matching rule: the longest
//! prefix, then a rule with a port over one without; at equal specificity the admin's rule
//! over a built-in one, the node's own (its ports, its database) over the admin's, and
//! deny over allow. So `--egress-allow 127.0.0.1:18282` opens exactly that port of the
//! loopback range, `--egress-deny 10.0.0.0/8` closes the private range, and allowing
//! `169.254.0.0/16` still leaves the metadata address (a /32) denied unless it is named. A
//! name rule that matches decides before any address (deny first): an allowed name is
//! the admin vouching for whatever it resolves to.
//!
//! **The address checked is the address connected to.** A URL's IP literal is checked
//! before anything is sent ([`Egress::client`]); a name is resolved by the client's own
//! resolver ([`Guard`]), which hands the connection only the addresses the policy allows
//! for the request's port — so a name that resolves to 127.0.0.1, or one that resolves to
//! a public address at save time and to the metadata address later (DNS rebinding), never
//! reaches a denied address. A resolver sees a name but not a port, so [`Egress`] keeps
//! one client per destination port, each with a resolver that knows it. Clients built
//! here connect directly, never through an HTTP proxy from the environment (a proxy would
//! hide the destination's address from the policy). Redirects are never followed by these
//! clients (they are built so): whoever follows one asks [`Egress::client`] again for the
//! next hop. The node's own denials hold even for a host name the admin allowed.
//!
//! IPv4-mapped IPv6 addresses (`::ffff:127.0.0.1`) are checked as the IPv4 address they
//! carry; NAT64, 6to4 and IPv4-compatible addresses as both the IPv6 address and the IPv4
//! one inside.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};

use reqwest::Url;
use reqwest::dns::{Name, Resolve, Resolving};

/// Destination ports with a client of their own at most; past it the clients are built
/// anew (a node talks to a handful of ports).
const MAX_PORTS: usize = 256;

/// What a rule does with what it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Deny,
}

/// An address range, masked to its prefix; IPv4 ranges hold IPv4 addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    net: IpAddr,
    len: u8,
}

impl Range {
    fn new(net: IpAddr, len: u8) -> Range {
        let net = net.to_canonical();
        let net = match net {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        Range { net, len }
    }

    fn parse(text: &str) -> Result<Range, String> {
        let (ip, len) = match text.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (text, None),
        };
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| format!("`{ip}` is not an IP address"))?;
        let ip = ip.to_canonical();
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(len) => match len.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("`/{len}` is not a prefix length from 0 to {max}")),
            },
        };
        Ok(Range::new(ip, len))
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.net.is_ipv4() && Range::new(ip, self.len).net == self.net
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// What a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Range(Range),
    /// Any address of this host: a listen socket on `0.0.0.0` answers on all of them.
    ThisHost,
    /// A host name exactly, or (`wildcard`) every name below it.
    Name {
        name: String,
        wildcard: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    target: Target,
    port: Option<u16>,
    action: Action,
    /// Who wrote it: at equal specificity the admin's rules override the built-in ones,
    /// and the node's own (its ports, its database) override the admin's.
    tier: Tier,
    /// What the rule is, as a refusal names it.
    why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    BuiltIn,
    Admin,
    Node,
}

impl Rule {
    /// How specific the rule is for an address it matches: prefix length (a host
    /// address of this machine counts as a single address), then whether it names a port.
    fn rank(&self) -> (u8, bool) {
        let len = match &self.target {
            Target::Range(r) if r.net.is_ipv4() => r.len + 96,
            Target::Range(r) => r.len,
            Target::ThisHost => 128,
            Target::Name { .. } => 0,
        };
        (len, self.port.is_some())
    }

    fn matches_port(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    fn matches_ip(&self, ip: IpAddr, port: u16) -> bool {
        self.matches_port(port)
            && match &self.target {
                Target::Range(r) => r.contains(ip),
                Target::ThisHost => is_this_host(ip),
                Target::Name { .. } => false,
            }
    }

    /// For a name rule that matches `host`: how specific it is (an exact name over a
    /// wildcard, a longer suffix over a shorter one).
    fn name_rank(&self, host: &str, port: u16) -> Option<(bool, usize, bool)> {
        let Target::Name { name, wildcard } = &self.target else {
            return None;
        };
        if !self.matches_port(port) {
            return None;
        }
        let hit = if *wildcard {
            host.strip_suffix(name.as_str())
                .is_some_and(|rest| rest.ends_with('.'))
        } else {
            host == name
        };
        hit.then_some((!*wildcard, name.len(), self.port.is_some()))
    }
}

/// Whether `ip` is an address of this machine (a socket can be bound to it).
fn is_this_host(ip: IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// A destination the policy refuses, and the rule that refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The address (with its port) or name refused.
    pub to: String,
    /// The rule, as a person reads it.
    pub rule: String,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the egress policy refuses {}: {}", self.to, self.rule)
    }
}

impl std::error::Error for Denied {}

/// The first [`Denied`] among an error's causes: how a refusal by the resolver is found
/// again in what the HTTP client answers.
pub fn denied_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Denied> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(d) = c.downcast_ref::<Denied>() {
            return Some(d);
        }
        cause = c.source();
    }
    None
}

/// The built-in denials, in the order a person reads them.
const DEFAULT_DENIED: &[(&str, &str)] = &[
    ("127.0.0.0/8", "loopback"),
    ("::1/128", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("fe80::/10", "link-local"),
    ("169.254.169.254/32", "the cloud metadata address"),
    ("fd00:ec2::254/128", "the cloud metadata address"),
    ("100.100.100.200/32", "the cloud metadata address"),
    ("168.63.129.16/32", "the cloud metadata address"),
    ("0.0.0.0/8", "unspecified"),
    ("::/128", "unspecified"),
    ("224.0.0.0/4", "multicast"),
    ("ff00::/8", "multicast"),
    ("240.0.0.0/4", "reserved"),
];

/// A node's egress policy: the built-in rules, the node's own, and the admin's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
    /// The admin's rules as given, for the start-up log and audit.
    admin: Vec<String>,
}

impl Default for Policy {
    /// The built-in rules alone.
    fn default() -> Policy {
        let rules = DEFAULT_DENIED
            .iter()
            .map(|(range, what)| {
                let range = Range::parse(range).expect("built-in ranges parse");
                Rule {
                    target: Target::Range(range),
                    port: None,
                    action: Action::Deny,
                    tier: Tier::BuiltIn,
                    why: format!("{what} ({range}, denied by default)"),
                }
            })
            .collect();
        Policy {
            rules,
            admin: Vec::new(),
        }
    }
}

impl Policy {
    /// The built-in rules, then the admin's (`--egress-allow`, `--egress-deny`). The
    /// error names the rule at fault and why.
    pub fn new(allow: &[String], deny: &[String]) -> Result<Policy, String> {
        let mut policy = Policy::default();
        for (flag, action, rules) in [
            ("--egress-allow", Action::Allow, allow),
            ("--egress-deny", Action::Deny, deny),
        ] {
            for text in rules.iter().map(|r| r.trim()).filter(|r| !r.is_empty()) {
                let (target, port) =
                    parse_rule(text).map_err(|why| format!("{flag} `{text}`: {why}"))?;
                policy.rules.push(Rule {
                    target,
                    port,
                    action,
                    tier: Tier::Admin,
                    why: format!("{flag} {text}"),
                });
                policy.admin.push(format!("{flag} {text}"));
            }
        }
        Ok(policy)
    }

    /// The admin's rules as given (`--egress-allow 127.0.0.1:18282`, …).
    pub fn admin_rules(&self) -> &[String] {
        &self.admin
    }

    /// Denies this node's own listen socket: that address and port, or — listening on an
    /// unspecified address — that port on every address of this host.
    pub fn deny_own_port(&mut self, listen: SocketAddr, what: &str) {
        let ip = listen.ip().to_canonical();
        let target = if ip.is_unspecified() {
            Target::ThisHost
        } else {
            Target::Range(Range::new(ip, if ip.is_ipv4() { 32 } else { 128 }))
        };
        self.rules.push(Rule {
            target,
            port: Some(listen.port()),
            action: Action::Deny,
            tier: Tier::Node,
            why: format!(
                "{what} (port {} of this node, always denied)",
                listen.port()
            ),
        });
    }

    /// Denies a service the node uses (its database): the name as written and each
    /// address it resolves to now, at `port`.
    pub async fn deny_service(&mut self, host: &str, port: u16, what: &str) {
        let why = format!("{what} ({host}:{port}, always denied)");
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
            // A service listening on 0.0.0.0 answers on every address of this host.
            Ok(ip) if ip.is_unspecified() => {
                self.rules.push(Rule {
                    target: Target::ThisHost,
                    port: Some(port),
                    action: Action::Deny,
                    tier: Tier::Node,
                    why: why.clone(),
                });
                Vec::new()
            }
            Ok(ip) => vec![ip],
            Err(_) => {
                self.rules.push(Rule {
                    target: Target::Name {
                        name: normal_name(host),
                        wildcard: false,
                    },
                    port: Some(port),
                    action: Action::Deny,
                    tier: Tier::Node,
                    why: why.clone(),
                });
                match tokio::net::lookup_host((host, port)).await {
                    Ok(found) => found.map(|a| a.ip()).collect(),
                    Err(_) => Vec::new(),
                }
            }
        };
        for ip in addrs {
            let ip = ip.to_canonical();
            self.rules.push(Rule {
                target: Target::Range(Range::new(ip, if ip.is_ipv4() { 32 } else { 128 })),
                port: Some(port),
                action: Action::Deny,
                tier: Tier::Node,
                why: why.clone(),
            });
        }
    }

    /// Whether a connection to `ip`:`port` is allowed. An IPv6 address that carries an
    /// IPv4 one (NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, IPv4-compatible `::/96`) must be
    /// allowed as both: a gateway would take it to the IPv4 address.
    pub fn check_ip(&self, ip: IpAddr, port: u16) -> Result<(), Denied> {
        if let Some(v4) = embedded_ipv4(ip) {
            self.check_one(IpAddr::V4(v4), port)?;
        }
        self.check_one(ip, port)
    }

    fn check_one(&self, ip: IpAddr, port: u16) -> Result<(), Denied> {
        let ip = ip.to_canonical();
        let decisive = self
            .rules
            .iter()
            .filter(|r| r.matches_ip(ip, port))
            .max_by_key(|r| (r.rank(), r.tier, r.action == Action::Deny));
        match decisive {
            Some(rule) if rule.action == Action::Deny => Err(Denied {
                to: SocketAddr::new(ip, port).to_string(),
                rule: rule.why.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// The node's own denial of `ip`:`port` (its ports, its database, its schedulers), which
    /// no admin rule opens — not even an allowed host name.
    fn node_denies(&self, ip: IpAddr, port: u16) -> Option<Denied> {
        let ip = ip.to_canonical();
        let rule = self
            .rules
            .iter()
            .find(|r| r.tier == Tier::Node && r.action == Action::Deny && r.matches_ip(ip, port))?;
        Some(Denied {
            to: SocketAddr::new(ip, port).to_string(),
            rule: rule.why.clone(),
        })
    }

    /// What the name rules say of `host`:`port`, if any matches.
    fn check_name(&self, host: &str, port: u16) -> Option<Result<(), Denied>> {
        let host = normal_name(host);
        let rule = self
            .rules
            .iter()
            .filter_map(|r| r.name_rank(&host, port).map(|rank| (rank, r)))
            .max_by_key(|(rank, r)| (*rank, r.tier, r.action == Action::Deny))?
            .1;
        Some(match rule.action {
            Action::Allow => Ok(()),
            Action::Deny => Err(Denied {
                to: format!("{host}:{port}"),
                rule: rule.why.clone(),
            }),
        })
    }

    /// What can be decided about `url` before connecting: its IP literal, or a name rule.
    /// `Ok` for a name no name rule decides: its addresses are checked as it resolves.
    pub fn check_url(&self, url: &Url) -> Result<(), Denied> {
        let Some(port) = url.port_or_known_default() else {
            return Err(Denied {
                to: url.as_str().chars().take(100).collect(),
                rule: "the URL has no port and its scheme has no default".into(),
            });
        };
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check_ip(IpAddr::V4(ip), port),
            Some(url::Host::Ipv6(ip)) => self.check_ip(IpAddr::V6(ip), port),
            Some(url::Host::Domain(name)) => self.check_name(name, port).unwrap_or(Ok(())),
            None => Err(Denied {
                to: url.as_str().chars().take(100).collect(),
                rule: "the URL has no host".into(),
            }),
        }
    }

    /// [`Policy::check_url`], and for a name no rule decides, the addresses it resolves to
    /// now: refused when every one of them is. What a job's allow-list and an alarm
    /// channel's URL are checked with when they are saved; a name that does not resolve
    /// here passes (it may resolve where it is used, and is checked there).
    pub async fn check_url_now(&self, url: &Url) -> Result<(), Denied> {
        self.check_url(url)?;
        let (Some(url::Host::Domain(name)), Some(port)) = (url.host(), url.port_or_known_default())
        else {
            return Ok(());
        };
        if self.check_name(name, port).is_some() {
            return Ok(());
        }
        let lookup = tokio::net::lookup_host((name, port));
        let Ok(Ok(addrs)) = tokio::time::timeout(std::time::Duration::from_secs(2), lookup).await
        else {
            return Ok(());
        };
        let mut refused = None;
        for addr in addrs {
            match self.check_ip(addr.ip(), port) {
                Ok(()) => return Ok(()),
                Err(d) => {
                    refused.get_or_insert(Denied {
                        to: format!("{name}:{port} (resolves to {})", d.to),
                        rule: d.rule,
                    });
                }
            }
        }
        refused.map_or(Ok(()), Err)
    }
}

/// The IPv4 address an IPv6 one carries for a translator or tunnel: NAT64's well-known
/// prefix `64:ff9b::/96`, 6to4's `2002:AABB:CCDD::/48`, and the deprecated IPv4-compatible
/// `::a.b.c.d` (not `::` or `::1`). IPv4-mapped addresses are canonicalised elsewhere.
fn embedded_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else {
        return None;
    };
    let bits = u128::from(v6);
    let low32 = Ipv4Addr::from(bits as u32);
    if bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 {
        return Some(low32);
    }
    if bits >> 112 == 0x2002 {
        return Some(Ipv4Addr::from((bits >> 80) as u32));
    }
    (bits >> 32 == 0 && bits > 1).then_some(low32)
}

/// A host name as rules compare it: lower case, without a trailing dot.
fn normal_name(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// `10.0.0.0/8`, `127.0.0.1:18282`, `[::1]:8080`, `[fd00::/8]:443`, `fd00::/8`,
/// `hooks.corp.example`, `*.corp.example:443`.
fn parse_rule(text: &str) -> Result<(Target, Option<u16>), String> {
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("`{p}` is not a port from 1 to 65535"))
    };
    // `[v6 or v6/len]:port`
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or("has `[` without its `]`".to_owned())?;
        let p = match after {
            "" => None,
            a => Some(port(
                a.strip_prefix(':').ok_or("expected `:port` after `]`")?,
            )?),
        };
        return Ok((Target::Range(Range::parse(inside)?), p));
    }
    // A bare IPv6 address or range has more than one `:`.
    if text.matches(':').count() > 1 {
        return Ok((Target::Range(Range::parse(text)?), None));
    }
    let (host, p) = match text.rsplit_once(':') {
        Some((host, p)) => (host, Some(port(p)?)),
        None => (text, None),
    };
    if host.parse::<IpAddr>().is_ok() || host.contains('/') {
        return Ok((Target::Range(Range::parse(host)?), p));
    }
    let (name, wildcard) = match host.strip_prefix("*.") {
        Some(suffix) => (suffix, true),
        None => (host, false),
    };
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if !valid {
        return Err(
            "is neither an address range (10.0.0.0/8, 127.0.0.1:8080, [::1]:8080) nor a host \
             name (hooks.example.com, *.example.com)"
                .into(),
        );
    }
    Ok((
        Target::Name {
            name: normal_name(name),
            wildcard,
        },
        p,
    ))
}

/// Why [`Egress::client`] gave no client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The policy refuses the destination.
    Denied(Denied),
    /// No HTTP client could be built (the TLS set-up failed).
    Client(String),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Denied(d) => d.fmt(f),
            Refused::Client(why) => write!(f, "no HTTP client: {why}"),
        }
    }
}

impl std::error::Error for Refused {}

/// Builds the clients of one kind of outgoing HTTP (timeouts, pools, TLS roots); the
/// policy's resolver and the proxy setting are added to what it returns.
pub type Builder = dyn Fn() -> reqwest::ClientBuilder + Send + Sync;

/// The HTTP clients of one kind of outgoing request under one [`Policy`]: one per
/// destination port, each resolving names through a [`Guard`] for that port.
pub struct Egress {
    policy: Arc<Policy>,
    build: Box<Builder>,
    clients: Mutex<HashMap<u16, reqwest::Client>>,
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Egress")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Egress {
    pub fn new(
        policy: Arc<Policy>,
        build: impl Fn() -> reqwest::ClientBuilder + Send + Sync + 'static,
    ) -> Egress {
        Egress {
            policy,
            build: Box::new(build),
            clients: Mutex::new(HashMap::new()),
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The client to send a request to `url` with — or why the policy refuses it before
    /// any connection. The client's resolver refuses the name's denied addresses in turn;
    /// [`denied_in`] finds that refusal in the request's error. A redirect's next hop is
    /// asked for again.
    pub fn client(&self, url: &Url) -> Result<reqwest::Client, Refused> {
        self.policy.check_url(url).map_err(Refused::Denied)?;
        let port = url.port_or_known_default().unwrap_or(0);
        if let Some(client) = self.lock().get(&port) {
            return Ok(client.clone());
        }
        // Built outside the lock (it loads the TLS roots); a race builds one twice.
        let client = (self.build)()
            .no_proxy()
            // A redirect's next hop is checked only by asking here again.
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(Guard {
                policy: self.policy.clone(),
                port,
            }))
            .build()
            .map_err(|e| Refused::Client(e.to_string()))?;
        let mut clients = self.lock();
        if clients.len() >= MAX_PORTS {
            clients.clear();
        }
        Ok(clients.entry(port).or_insert(client).clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u16, reqwest::Client>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A resolver that hands a connection only the addresses the policy allows at `port`.
struct Guard {
    policy: Arc<Policy>,
    port: u16,
}

impl Resolve for Guard {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let port = self.port;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let vouched = match policy.check_name(&host, port) {
                Some(Err(denied)) => return Err(Box::new(denied) as _),
                Some(Ok(())) => true,
                None => false,
            };
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect();
            let mut refused = None;
            let mut kept = Vec::with_capacity(found.len());
            for addr in found {
                // An allowed name vouches for its addresses, but never for the node's own.
                let verdict = match vouched {
                    true => policy.node_denies(addr.ip(), port).map_or(Ok(()), Err),
                    false => policy.check_ip(addr.ip(), port),
                };
                match verdict {
                    Ok(()) => kept.push(addr),
                    Err(d) => {
                        refused.get_or_insert(Denied {
                            to: format!("{host}:{port} (resolves to {})", d.to),
                            rule: d.rule,
                        });
                    }
                }
            }
            match (kept.is_empty(), refused) {
                (true, Some(denied)) => Err(Box::new(denied) as _),
                _ => Ok(Box::new(kept.into_iter()) as _),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn policy(allow: &[&str], deny: &[&str]) -> Policy {
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Policy::new(&owned(allow), &owned(deny)).unwrap()
    }

    fn refused_by(p: &Policy, addr: &str, port: u16) -> Option<String> {
        p.check_ip(ip(addr), port).err().map(|d| d.rule)
    }

    #[test]
    fn the_defaults_deny_this_host_link_local_metadata_and_the_unroutable_and_allow_the_rest() {
        let p = Policy::default();
        for (addr, rule) in [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("169.254.169.254", "the cloud metadata address"),
            ("fd00:ec2::254", "the cloud metadata address"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "reserved"),
        ] {
            let why = refused_by(&p, addr, 80).unwrap_or_else(|| panic!("{addr} allowed"));
            assert!(why.starts_with(rule), "{addr}: {why}");
        }
        for addr in [
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "fc00::1",
            "93.184.216.34",
        ] {
            assert_eq!(refused_by(&p, addr, 443), None, "{addr}");
        }
    }

    #[test]
    fn the_most_specific_rule_decides_and_deny_wins_a_tie() {
        let p = policy(&["127.0.0.1:18282", "169.254.0.0/16"], &["10.0.0.0/8"]);
        assert_eq!(refused_by(&p, "127.0.0.1", 18282), None, "the exception");
        assert!(
            refused_by(&p, "127.0.0.1", 18283).is_some(),
            "only that port"
        );
        assert!(
            refused_by(&p, "127.0.0.2", 18282).is_some(),
            "only that address"
        );
        assert_eq!(refused_by(&p, "169.254.1.1", 80), None, "link-local opened");
        assert!(
            refused_by(&p, "169.254.169.254", 80)
                .unwrap()
                .contains("metadata"),
            "the metadata address stays denied unless named"
        );
        assert_eq!(
            refused_by(&p, "10.9.9.9", 443).as_deref(),
            Some("--egress-deny 10.0.0.0/8")
        );
        let tie = policy(&["10.0.0.0/8"], &["10.0.0.0/8"]);
        assert!(refused_by(&tie, "10.0.0.1", 80).is_some());
        let hole = policy(&["10.1.2.3:443"], &["10.0.0.0/8"]);
        assert_eq!(refused_by(&hole, "10.1.2.3", 443), None);
        assert!(refused_by(&hole, "10.1.2.3", 80).is_some());
    }

    #[test]
    fn the_nodes_own_ports_and_its_database_are_denied_even_where_opened() {
        let mut p = policy(&["127.0.0.0/8"], &[]);
        p.deny_own_port("127.0.0.1:8080".parse().unwrap(), "the API");
        p.deny_own_port("0.0.0.0:9999".parse().unwrap(), "the executor");
        assert!(
            refused_by(&p, "127.0.0.1", 8080)
                .unwrap()
                .contains("the API")
        );
        assert_eq!(refused_by(&p, "127.0.0.1", 8081), None);
        assert!(
            refused_by(&p, "127.0.0.5", 9999)
                .unwrap()
                .contains("executor")
        );
        let open_one = policy(&["127.0.0.1:8080"], &[]);
        let mut q = open_one.clone();
        q.deny_own_port("127.0.0.1:8080".parse().unwrap(), "the API");
        assert!(
            refused_by(&q, "127.0.0.1", 8080).is_some(),
            "a tie: deny wins"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut db = policy(&["10.0.0.0/8"], &[]);
        rt.block_on(db.deny_service("10.0.0.7", 3306, "the database"));
        assert!(
            refused_by(&db, "10.0.0.7", 3306)
                .unwrap()
                .contains("database")
        );
        assert_eq!(refused_by(&db, "10.0.0.7", 80), None);
    }

    #[test]
    fn names_are_decided_by_their_rules_before_any_address() {
        let p = policy(
            &["hooks.corp.example"],
            &["*.internal", "metadata.google.internal"],
        );
        let url = |u: &str| Url::parse(u).unwrap();
        assert!(p.check_url(&url("http://db.internal/")).is_err());
        assert!(
            p.check_url(&url("http://METADATA.google.internal./"))
                .is_err()
        );
        assert!(
            p.check_url(&url("http://internal/")).is_ok(),
            "not below it"
        );
        assert_eq!(p.check_name("hooks.corp.example", 443), Some(Ok(())));
        assert_eq!(p.check_name("other.example", 443), None);
        let refused = p
            .check_url(&url("http://[::ffff:169.254.169.254]/"))
            .unwrap_err();
        assert!(refused.rule.contains("metadata"), "{refused}");
        assert!(p.check_url(&url("http://127.0.0.1:1/")).is_err());
        assert!(p.check_url(&url("https://10.0.0.1/")).is_ok());
    }

    #[test]
    fn ipv6_that_carries_ipv4_is_checked_as_that_ipv4_too() {
        let p = policy(&[], &["10.0.0.0/8"]);
        for addr in ["64:ff9b::a00:5", "2002:a00:5::1", "::10.0.0.5"] {
            let why = refused_by(&p, addr, 80).unwrap_or_else(|| panic!("{addr} allowed"));
            assert_eq!(why, "--egress-deny 10.0.0.0/8", "{addr}");
        }
        assert!(
            refused_by(&p, "64:ff9b::7f00:1", 80)
                .unwrap()
                .starts_with("loopback")
        );
        assert!(refused_by(&p, "::", 80).unwrap().starts_with("unspecified"));
        assert_eq!(refused_by(&p, "2001:db8::1", 80), None);
        assert!(
            refused_by(&p, "168.63.129.16", 80)
                .unwrap()
                .contains("metadata")
        );
    }

    #[tokio::test]
    async fn an_allowed_name_never_opens_the_nodes_own_denials() {
        let mut p = policy(&["localhost"], &[]);
        p.deny_service("0.0.0.0", 8080, "a scheduler of this executor")
            .await;
        assert_eq!(
            p.check_name("localhost", 8080),
            Some(Ok(())),
            "the name is allowed"
        );
        let denied = p.node_denies("127.0.0.1".parse().unwrap(), 8080).unwrap();
        assert!(
            denied.rule.starts_with("a scheduler of this executor"),
            "{denied}"
        );
        assert_eq!(p.node_denies("127.0.0.1".parse().unwrap(), 8081), None);
        let egress = Egress::new(Arc::new(p), reqwest::Client::builder);
        let url = Url::parse("http://localhost:8080/").unwrap();
        let e = egress
            .client(&url)
            .unwrap()
            .get(url)
            .send()
            .await
            .unwrap_err();
        let denied = denied_in(&e).expect("refused by the resolver");
        assert!(
            denied.rule.starts_with("a scheduler of this executor"),
            "{denied}"
        );
    }

    #[test]
    fn a_bad_rule_is_an_error_naming_it() {
        for (rule, says) in [
            ("10.0.0.0/33", "prefix length"),
            ("10.0.0.1:0", "port"),
            ("[::1]8080", "`:port`"),
            ("not a host!", "neither"),
            ("1.2.3.4:99999", "port"),
        ] {
            let e = Policy::new(&[rule.to_string()], &[]).unwrap_err();
            assert!(e.contains(rule) && e.contains(says), "{rule}: {e}");
        }
        assert!(Policy::new(&[], &["[fd00::/8]:443".into(), "*.corp:443".into()]).is_ok());
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_a_denied_address_is_refused_at_connect_and_at_save() {
        let egress = Egress::new(Arc::new(Policy::default()), reqwest::Client::builder);
        let url = Url::parse("http://localhost:9/").unwrap();
        let refused = egress.policy().check_url_now(&url).await.unwrap_err();
        assert!(refused.to.starts_with("localhost:9"), "{refused}");
        let client = egress.client(&url).unwrap();
        let e = client.get(url).send().await.unwrap_err();
        let denied = denied_in(&e).expect("the resolver's refusal is in the error");
        assert!(denied.rule.contains("loopback"), "{denied}");
    }
}
