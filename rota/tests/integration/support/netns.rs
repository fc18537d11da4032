//! A network namespace of a test's own, joined to the host by a veth pair, whose link the
//! test cuts and heals: a partition (`partition.rs`, `soak.rs`).

use std::process::{Command, Stdio};

/// A network namespace holding one end of a veth pair; the other end stays on the host.
/// Host side `10.213.N.1/24`, namespace side `10.213.N.2/24` (N from the process id). Deleted on drop (the veth
/// pair goes with it).
pub struct TestNet {
    pub name: String,
    inside_if: String,
    pub host_ip: String,
    pub inside_ip: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("running `ip` (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestNet {
    pub fn create() -> TestNet {
        TestNet::create_in(213)
    }

    /// [`TestNet::create`] on `10.<octet>.N.0/24`: tests that may run at once keep apart.
    pub fn create_in(octet: u8) -> TestNet {
        // One test binary runs every test: the octet keeps two namespaces of one process
        // apart (interface names stay within 15 bytes: 3 + 3 + a pid's 7).
        let pid = std::process::id();
        let id = format!("{octet}{pid}");
        let name = format!("rota-part-{id}");
        let (host_if, inside_if) = (format!("rph{id}"), format!("rpn{id}"));
        let subnet = format!("10.{octet}.{}", pid % 250);
        let net = TestNet {
            host_ip: format!("{subnet}.1"),
            inside_ip: format!("{subnet}.2"),
            name,
            inside_if,
        };
        let _ = Command::new("ip")
            .args(["netns", "del", &net.name])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", &net.name]);
        ip(&[
            "link",
            "add",
            &host_if,
            "type",
            "veth",
            "peer",
            "name",
            &net.inside_if,
        ]);
        ip(&["link", "set", &net.inside_if, "netns", &net.name]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.host_ip),
            "dev",
            &host_if,
        ]);
        ip(&["link", "set", &host_if, "up"]);
        net.inside(&[
            "addr",
            "add",
            &format!("{}/24", net.inside_ip),
            "dev",
            &net.inside_if,
        ]);
        net.inside(&["link", "set", &net.inside_if, "up"]);
        net.inside(&["link", "set", "lo", "up"]);
        net
    }

    /// `ip ARGS` run inside the namespace.
    fn inside(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name, "ip"];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// The partition: the namespace's end of the link goes down. Packets to and from it are
    /// lost; nothing tells either side (the host's end stays up).
    pub fn cut(&self) {
        self.inside(&["link", "set", &self.inside_if, "down"]);
    }

    pub fn heal(&self) {
        self.inside(&["link", "set", &self.inside_if, "up"]);
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Whether the test runs as root (namespaces, mounts).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
