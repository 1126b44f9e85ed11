//! Small helpers shared by the loopback tests.
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// FNV-1a, 64-bit: the peers report a region's hash instead of its bytes.
pub fn fnv64(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for x in b {
        h = (h ^ *x as u64).wrapping_mul(0x100000001b3);
    }
    h
}

/// xorshift64*: deterministic test data and page permutations.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
    /// A random permutation of 0..n.
    pub fn perm(&mut self, n: usize) -> Vec<u32> {
        let mut v: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
        v
    }
}

pub const WAIT: Duration = Duration::from_secs(60);

/// A peer process (see peer.rs), killed when dropped.
pub struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Lines read while waiting for another prefix, kept for later waits.
    backlog: Vec<String>,
    pub addr: Vec<u8>,
    pub desc: Vec<u8>,
    /// With `groups=N` (`spawn_groups`): a region of group 1's, and the
    /// engine's groups blob.
    pub desc1: Vec<u8>,
    pub groups: Vec<u8>,
    /// Set by `kill9`: its death by signal is ours.
    killed: bool,
}

/// Peers that died of a signal the test did not send (checked at the end of the run).
pub static PEER_CRASHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Peer {
    pub fn spawn(provider: &str, domains: usize, region: usize) -> Result<Peer, String> {
        Self::spawn_in(None, "127.0.0.1", provider, domains, region)
    }

    /// A peer bound to `bind`, inside network namespace `netns` if given.
    pub fn spawn_in(
        netns: Option<&str>,
        bind: &str,
        provider: &str,
        domains: usize,
        region: usize,
    ) -> Result<Peer, String> {
        match netns {
            Some(ns) => Self::spawn_under(&["ip", "netns", "exec", ns], bind, provider, domains, region),
            None => Self::spawn_under(&[], bind, provider, domains, region),
        }
    }

    /// A peer started through `wrapper` (a command that execs the rest, so
    /// the peer keeps its pid: `ip netns exec NS`, `setarch ARCH -R`).
    pub fn spawn_under(
        wrapper: &[&str],
        bind: &str,
        provider: &str,
        domains: usize,
        region: usize,
    ) -> Result<Peer, String> {
        Self::spawn_args(wrapper, &[provider, &domains.to_string(), &region.to_string(), bind])
    }

    /// A peer whose engine has `groups` groups of `domains` NICs, with a
    /// region in group 0 (`desc`) and one in group 1 (`desc1`).
    pub fn spawn_groups(provider: &str, domains: usize, region: usize, groups: usize) -> Result<Peer, String> {
        let g = format!("groups={groups}");
        Self::spawn_args(&[], &[provider, &domains.to_string(), &region.to_string(), "127.0.0.1", &g])
    }

    fn spawn_args(wrapper: &[&str], args: &[&str]) -> Result<Peer, String> {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = cmd
            .arg("--peer")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let (addr, desc, desc1, groups) = (vec![], vec![], vec![], vec![]);
        let mut p = Peer { child, stdin, lines, backlog: vec![], addr, desc, desc1, groups, killed: false };
        let info = p.wait_for("INFO")?;
        let w: Vec<&str> = info.split_whitespace().collect();
        p.addr = from_hex(w[1]);
        p.desc = from_hex(w[2]);
        if let [d1, g] = &w[3..] {
            (p.desc1, p.groups) = (from_hex(d1), from_hex(g));
        }
        Ok(p)
    }

    pub fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Waits for the next line starting with `prefix`; an `ERROR` line fails.
    pub fn wait_for(&mut self, prefix: &str) -> Result<String, String> {
        if let Some(i) = self.backlog.iter().position(|l| l.starts_with(prefix)) {
            return Ok(self.backlog.remove(i));
        }
        loop {
            match self.lines.recv_timeout(WAIT) {
                Ok(l) if l.starts_with(prefix) => return Ok(l),
                Ok(l) if l.starts_with("ERROR") => return Err(format!("peer: {l}")),
                Ok(l) => self.backlog.push(l),
                Err(e) => return Err(format!("peer: no {prefix} line within {WAIT:?} ({e})")),
            }
        }
    }

    /// Whether a line starting with `prefix` has arrived (without waiting).
    pub fn has_line(&mut self, prefix: &str) -> bool {
        while let Ok(l) = self.lines.try_recv() {
            self.backlog.push(l);
        }
        self.backlog.iter().any(|l| l.starts_with(prefix))
    }

    pub fn hash(&mut self) -> Result<u64, String> {
        self.hash_cmd("HASH")
    }

    /// The hash of `len` bytes at `off` of the peer's region.
    pub fn hash_range(&mut self, off: usize, len: usize) -> Result<u64, String> {
        self.hash_cmd(&format!("HASH {off} {len}"))
    }

    fn hash_cmd(&mut self, cmd: &str) -> Result<u64, String> {
        self.send(cmd);
        let l = self.wait_for("HASH")?;
        Ok(u64::from_str_radix(l.split_whitespace().nth(1).unwrap(), 16).unwrap())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to the peer process.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} {}", self.pid());
    }

    /// Stops the peer (SIGSTOP) at a moment when none of its threads is in
    /// user space: each is blocked in a system call (its workers napping).
    /// libfabric's shm (1.17, 1.20) guards a process's region with a spinlock
    /// its owner takes on every poll; a peer stopped while holding it stalls
    /// every post to it inside libfabric, our worker with it
    /// (docs/failure-semantics.md), and a test that stops a peer tests
    /// fabriclib, not that. A thread caught in user space (it may hold the
    /// lock) lets the peer go on, and it is stopped again a little later.
    /// (A thread could hold it inside a system call only mid-transfer, in
    /// shm's CMA copies; the tests stop peers between transfers.)
    pub fn stop(&self) -> Result<(), String> {
        for attempt in 1..=200 {
            std::thread::sleep(Duration::from_millis(if attempt == 1 { 20 } else { 2 }));
            self.signal("STOP");
            if threads_stopped_in_syscalls(self.pid())? {
                return Ok(());
            }
            self.signal("CONT");
        }
        Err(format!("peer {}: a thread was in user space at each of 200 stops", self.pid()))
    }

    /// `kill -9`: the peer dies without closing anything.
    pub fn kill9(&mut self) {
        self.killed = true;
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_shm_files(self.pid());
    }

    pub fn expect(&mut self, imm: u32, count: u32) {
        self.send(&format!("EXPECT {imm} {count}"));
    }

    /// Waits until the peer's expectation on `imm` fired, successfully.
    pub fn fired(&mut self, imm: u32) -> Result<(), String> {
        let l = self.wait_for(&format!("FIRED {imm} "))?;
        if l.ends_with("Ok(())") { Ok(()) } else { Err(format!("expectation ended badly: {l}")) }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "QUIT");
        let _ = self.stdin.flush();
        for _ in 0..200 {
            if let Ok(Some(st)) = self.child.try_wait() {
                // A peer that did not exit cleanly (and that we did not kill)
                // crashed: the run fails. (A crash handler may turn a signal
                // into an exit code, so any failure counts.)
                if !st.success() && !self.killed {
                    eprintln!("PEER CRASHED: pid {} ended with {st:?}", self.child.id());
                    PEER_CRASHES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("peer {} did not quit within 2 s: killed", self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_shm_files(self.child.id());
    }
}

/// Once every thread of stopped process `pid` has stopped: whether each
/// was inside a system call.
fn threads_stopped_in_syscalls(pid: u32) -> Result<bool, String> {
    let t = std::time::Instant::now();
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| format!("peer {pid}: {e}"))?;
        let (mut stopped, mut in_syscall) = (true, true);
        for task in tasks.flatten() {
            let st = TaskStatus::read(&task.path());
            if st.state != Some('T') {
                stopped = false;
                break;
            }
            let call = st.syscall.ok_or_else(|| format!("peer {pid}: cannot read its threads' syscall files"))?;
            in_syscall &= call != "-1" && call != "running";
        }
        if stopped {
            return Ok(in_syscall);
        }
        if t.elapsed() > Duration::from_secs(5) {
            return Err(format!("peer {pid}: its threads did not all stop within 5 s of SIGSTOP"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// What /proc says of a process or thread (`/proc/PID`, `/proc/PID/task/TID`).
pub struct TaskStatus {
    /// Its state letter (`R`, `S`, `T`…).
    pub state: Option<char>,
    /// Its parent's pid.
    pub ppid: Option<u32>,
    /// The first field of its `syscall` file: a system call's number, `-1`
    /// in user space, `running`; `None` if unreadable.
    pub syscall: Option<String>,
}

impl TaskStatus {
    pub fn read(dir: &std::path::Path) -> TaskStatus {
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // The fields after the command name (which may hold spaces): state, parent's pid, …
        let mut rest = stat.rsplit_once(") ").map_or("", |(_, r)| r).split_whitespace();
        let state = rest.next().and_then(|s| s.chars().next());
        let ppid = rest.next().and_then(|p| p.parse().ok());
        let syscall = std::fs::read_to_string(dir.join("syscall"))
            .ok()
            .map(|c| c.split_whitespace().next().unwrap_or_default().to_string());
        TaskStatus { state, ppid, syscall }
    }
}

/// Whether the tests run as root (network namespaces, the kernel's last pid).
pub fn is_root() -> bool {
    fabriclib::os::is_root()
}

/// A killed shm endpoint leaves its file behind: remove it.
pub fn remove_shm_files(pid: u32) {
    if let Ok(dir) = std::fs::read_dir("/dev/shm") {
        for e in dir.flatten() {
            if e.file_name().to_string_lossy().starts_with(&format!("{pid}:")) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
