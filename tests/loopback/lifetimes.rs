//! Handles the application lets go of while its requests still use them:
//! the engine keeps what a request names until the request ends, and no
//! longer (a descriptor per request, regions dropped right after submit,
//! one descriptor shared by two engines).
use super::*;

/// 300 single writes of 64 bytes with an immediate to two peers in turn,
/// each through a descriptor parsed afresh and dropped right after the
/// submit (more descriptors than the worker keeps before it lets go of
/// unused ones, paced so that it does so meanwhile); every tenth from a
/// region registered for it and dropped at once too. A descriptor confused
/// with another would write to the wrong peer.
pub fn handles_dropped_after_submit(prov: &str, domains: usize) -> TestResult {
    const R: usize = 1 << 16;
    const N: usize = 300;
    let l = local(prov, domains, R, 31)?;
    let base = l.mem.as_ptr() as *mut u8;
    let mut ps = peers(prov, domains, 2, R)?;
    for p in ps.iter_mut() {
        p.expect(21, N as u32 / 2);
    }
    let mut want = vec![vec![0u8; R]; 2];
    let flags: Vec<_> = (0..N).map(|_| flag()).collect();
    for (i, f) in flags.iter().enumerate() {
        let d = desc(&ps[i % 2]);
        let (off, src) = (i * 64, (i * 64) % (R / 2));
        if i % 10 == 0 {
            // SAFETY: l.mem outlives the engine's use of it (flags are waited on below).
            let mr = unsafe { l.engine.register(base, R) }.map_err(e2s)?;
            l.engine.submit_single_write(64, Some(21), &mr, src as u64, &d, off as u64, OnDone::Flag(f.clone()))
        } else {
            l.engine.submit_single_write(64, Some(21), &l.mr, src as u64, &d, off as u64, OnDone::Flag(f.clone()))
        }
        .map_err(e2s)?;
        want[i % 2][off..off + 64].copy_from_slice(&l.mem[src..src + 64]);
        if i % 25 == 24 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    for f in &flags {
        wait_flag(f)?;
    }
    for (p, want) in ps.iter_mut().zip(&want) {
        p.fired(21)?;
        check_hash(p, want)?;
    }
    let (mut p, mut want) = (ps.swap_remove(0), want.swap_remove(0));
    // One descriptor shared by two engines: the first keeps it by index, the
    // second keeps sending clones of it; both land.
    let l2 = local(prov, domains, R, 32)?;
    let d = desc(&p);
    p.expect(22, 20);
    for i in 0..20u64 {
        let (e, mr, mem) = if i % 2 == 0 { (&l.engine, &l.mr, &l.mem) } else { (&l2.engine, &l2.mr, &l2.mem) };
        let off = (R / 2) as u64 + i * 128;
        e.submit_single_write(128, Some(22), mr, i * 128, &d, off, OnDone::Nothing).map_err(e2s)?;
        want[off as usize..off as usize + 128].copy_from_slice(&mem[i as usize * 128..i as usize * 128 + 128]);
    }
    p.fired(22)?;
    check_hash(&mut p, &want)?;
    drop(d);
    // The engines are still whole: one more write from each.
    p.expect(23, 2);
    l.engine.submit_single_write(8, Some(23), &l.mr, 0, &desc(&p), 0, OnDone::Nothing).map_err(e2s)?;
    l2.engine.submit_single_write(8, Some(23), &l2.mr, 8, &desc(&p), 8, OnDone::Nothing).map_err(e2s)?;
    p.fired(23)?;
    want[..8].copy_from_slice(&l.mem[..8]);
    want[8..16].copy_from_slice(&l2.mem[8..16]);
    check_hash(&mut p, &want)
}
