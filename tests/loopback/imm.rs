//! Immediate counters: a failed or canceled expectation takes what it had
//! counted with it, so no stale count can ever complete a later expectation
//! of the same value; the count can be read and reset.
//!
//! Two engines of this process: `w` writes with immediates into `r`'s
//! region, over the real provider.
use super::faults::Ends;
use super::*;
use fabriclib::Deadline;

/// `n` writes of 64 B carrying `imm` from `w` into `r`, waited for.
fn writes(w: &Local, r: &Local, imm: u32, n: usize) -> TestResult {
    let ends = Ends::new(n);
    for i in 0..n {
        let off = (i * 64) as u64;
        w.engine.submit_single_write(64, Some(imm), &w.mr, off, r.mr.descriptor(), off, ends.on(i)).map_err(e2s)?;
    }
    ends.wait_all(WAIT)?;
    ends.only(&[Status::Ok])
}

/// Waits until `r` has counted `want` immediates `imm` (they land a moment
/// after the writer's completion).
fn wait_count(r: &Local, imm: u32, want: u64) -> TestResult {
    let t = Instant::now();
    loop {
        let n = r.engine.imm_count(imm, false).map_err(e2s)?;
        if n == want {
            return Ok(());
        }
        if n > want || t.elapsed() > Duration::from_secs(10) {
            return Err(format!("immediate {imm:#x}: count {n}, expected {want}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Arms an expectation of `count` immediates `imm` with deadline `ms` and
/// returns how it ended.
fn expect_within(r: &Local, imm: u32, count: u32, ms: u64) -> Result<Status, String> {
    let ex = Ends::new(1);
    r.engine
        .expect_imm_count(imm, count, ex.on(0).deadline(Deadline::After(Duration::from_millis(ms))))
        .map_err(e2s)?;
    ex.wait_all(WAIT)?;
    Ok(ex.status(0))
}

pub fn no_stale_immediate_counts(prov: &str, domains: usize) -> TestResult {
    let (w, r) = (local(prov, domains, 1 << 16, 71)?, local(prov, domains, 1 << 16, 72)?);
    // A timed-out expectation: 3 of 5 arrived; they go with it.
    let ex = Ends::new(1);
    r.engine.expect_imm_count(9, 5, ex.on(0).deadline(Deadline::After(Duration::from_millis(300)))).map_err(e2s)?;
    writes(&w, &r, 9, 3)?;
    wait_count(&r, 9, 3)?;
    ex.wait_all(WAIT)?;
    if ex.status(0) != Status::TimedOut {
        return Err(format!("5 expected, 3 sent: ended {:?}", ex.status(0)));
    }
    wait_count(&r, 9, 0)?;
    let st = expect_within(&r, 9, 2, 200)?;
    if st != Status::TimedOut {
        return Err(format!("nothing sent after a timed-out expectation, yet a new one ended {st:?}"));
    }
    // A canceled expectation: the same.
    let ex = Ends::new(1);
    let id = r.engine.expect_imm_count(10, 4, ex.on(0)).map_err(e2s)?;
    writes(&w, &r, 10, 2)?;
    wait_count(&r, 10, 2)?;
    r.engine.cancel(id).map_err(e2s)?;
    ex.wait_all(WAIT)?;
    if ex.status(0) != Status::Canceled {
        return Err(format!("canceled expectation ended {:?}", ex.status(0)));
    }
    wait_count(&r, 10, 0)?;
    let st = expect_within(&r, 10, 1, 200)?;
    if st != Status::TimedOut {
        return Err(format!("nothing sent after a canceled expectation, yet a new one ended {st:?}"));
    }
    // Counted with no expectation: read, then reset; nothing is left.
    writes(&w, &r, 11, 3)?;
    wait_count(&r, 11, 3)?;
    let before = r.engine.imm_count(11, true).map_err(e2s)?;
    if before != 3 {
        return Err(format!("reset returned {before}, expected 3"));
    }
    wait_count(&r, 11, 0)?;
    let st = expect_within(&r, 11, 1, 200)?;
    if st != Status::TimedOut {
        return Err(format!("a reset count completed an expectation ({st:?})"));
    }
    // And the counters still work: fresh writes complete fresh expectations,
    // a surplus stays for the next one.
    writes(&w, &r, 9, 3)?;
    for (count, left) in [(2, 1), (1, 0)] {
        let st = expect_within(&r, 9, count, 10_000)?;
        if st != Status::Ok {
            return Err(format!("3 sent, {count} expected: ended {st:?}"));
        }
        wait_count(&r, 9, left)?;
    }
    Ok(())
}
