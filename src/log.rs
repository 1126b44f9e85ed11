//! Where fabriclib's own messages go (a callback that panicked, a receive
//! that could not be reposted, a refused call it cannot return an error
//! from): the application's log sink if it set one (`set_sink`; C:
//! `fabriclib_set_log_callback`), else standard error with a `fabriclib: `
//! prefix. Process-wide, as stderr is. The sink may be called from any
//! fabriclib thread, several at once; it may set another sink.
use std::sync::{Arc, RwLock};

/// How much a message matters.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Something failed and fabriclib could not report it as a status.
    Error = 0,
    /// Something went wrong and fabriclib carried on.
    Warn = 1,
}

/// A log sink: `(level, message)`; the message has no prefix or newline.
pub type Sink = Arc<dyn Fn(Level, &str) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Sends fabriclib's messages to `sink` from now on (`None`: standard error).
pub fn set_sink(sink: Option<Sink>) {
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = sink;
}

/// Logs `msg` at `level`.
pub fn log(level: Level, msg: &str) {
    // Taken out of the lock before the call: the sink may set another.
    let sink = SINK.read().unwrap_or_else(|e| e.into_inner()).clone();
    match sink {
        Some(s) => s(level, msg),
        None => eprintln!("fabriclib: {msg}"),
    }
}

/// `log!(Warn, "format", args…)`: `log::log` with a formatted message.
#[macro_export]
macro_rules! log {
    ($level:ident, $($arg:tt)*) => {
        $crate::log::log($crate::log::Level::$level, &format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn messages_go_to_the_sink_then_back_to_stderr() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        set_sink(Some(Arc::new(move |l, m: &str| s.lock().unwrap().push((l, m.to_string())))));
        crate::log!(Warn, "a callback panicked {}", 7);
        // A sink that swaps the sink does not deadlock.
        set_sink(Some(Arc::new(|_, _: &str| set_sink(None))));
        log(Level::Error, "last");
        set_sink(None);
        log(Level::Error, "to stderr");
        assert_eq!(*seen.lock().unwrap(), [(Level::Warn, "a callback panicked 7".to_string())]);
    }
}
