//! The suite's watchdog: a test still running after its time limit fails
//! the run at once, with what every thread of this process and of its
//! peers was doing, instead of holding the run until CI's own limit cuts it
//! off with nothing to show. Limit: `FABRICLIB_TEST_TIMEOUT_S` (default 300 s
//! a test; the soak gets three times as long).
use super::util::TaskStatus;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The test running now, since when, and its limit.
static CURRENT: Mutex<Option<(String, Instant, Duration)>> = Mutex::new(None);

/// The per-test limit.
pub fn limit() -> Duration {
    let s = std::env::var("FABRICLIB_TEST_TIMEOUT_S").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    Duration::from_secs(s)
}

/// Starts the watchdog thread.
pub fn start() {
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(|| {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let over = CURRENT
                    .lock()
                    .unwrap()
                    .as_ref()
                    .and_then(|(name, t, limit)| (t.elapsed() > *limit).then(|| (name.clone(), t.elapsed())));
                if let Some((name, took)) = over {
                    hung(&name, took);
                }
            }
        })
        .expect("the watchdog thread");
}

/// Runs `f` as test `name` under the watchdog, with `limit`.
pub fn run<T>(name: &str, limit: Duration, f: impl FnOnce() -> T) -> T {
    *CURRENT.lock().unwrap() = Some((name.to_string(), Instant::now(), limit));
    let r = f();
    *CURRENT.lock().unwrap() = None;
    r
}

/// Test `name` hung: report every thread of this process and its children,
/// kill the children, fail the run.
fn hung(name: &str, took: Duration) -> ! {
    println!("test {name} ... FAILED: HUNG, still running after {:.0} s", took.as_secs_f64());
    let me = std::process::id();
    let children = children_of(me);
    for pid in std::iter::once(me).chain(children.iter().copied()) {
        println!("--- process {pid} ({}): its threads", comm(format!("/proc/{pid}")));
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let dir = task.path();
            let st = TaskStatus::read(&dir);
            let state = st.state.unwrap_or('?');
            let call = st.syscall.map_or("?".into(), |c| if c == "-1" { "user space".into() } else { c });
            println!("  {} {:<16} state {state}, syscall {call}", task.file_name().to_string_lossy(), comm(&dir));
        }
        // Where each thread is, when gdb is there (scripts/deps.sh test installs it).
        match std::process::Command::new("gdb")
            .args(["-p", &pid.to_string(), "-batch", "-nx", "-ex", "thread apply all bt 12"])
            .output()
        {
            Ok(out) => {
                let text = String::from_utf8_lossy(&out.stdout);
                for l in text.lines().filter(|l| l.starts_with('#') || l.starts_with("Thread")) {
                    println!("  {}", l.chars().take(160).collect::<String>());
                }
            }
            Err(e) => println!("  (no backtraces: gdb: {e})"),
        }
    }
    for pid in children {
        // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        super::util::remove_shm_files(pid);
    }
    // This process's own shm endpoints, which nothing closes now.
    super::util::remove_shm_files(me);
    println!("\nloopback: FAILED, {name} hung");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // Not exit(3): its handlers (libfabric's among them) may wait on the hung thread.
    // SAFETY: _exit(2) ends the process at once; nothing runs after it.
    unsafe { libc::_exit(1) }
}

/// A process's or thread's command name.
fn comm(dir: impl AsRef<std::path::Path>) -> String {
    std::fs::read_to_string(dir.as_ref().join("comm")).unwrap_or_default().trim().to_string()
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut kids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if TaskStatus::read(&e.path()).ppid == Some(pid) {
            kids.push(child);
        }
    }
    kids
}
