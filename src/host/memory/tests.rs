use super::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Written at run time: lives in `.data`/`.bss`, a writable segment.
static WRITTEN: AtomicU64 = AtomicU64::new(1);
/// Pointers in a position-independent executable are relocated by the loader at start: this
/// table lives in RELRO (`.data.rel.ro`), inside the writable segment, whose pages are the
/// loader's private copies. Dropping them would bring back the file's unrelocated bytes.
static RELOCATED: [&str; 3] = ["alpha", "beta", "gamma"];

/// 256 KiB of constants (`.rodata`, a non-writable segment) that nothing else reads.
static CONSTANTS: [u8; 256 * 1024] = [7; 256 * 1024];

/// How many of the pages of `bytes` are mapped in this process (`/proc/self/pagemap`, bit
/// 63 "page present": Documentation/admin-guide/mm/pagemap.rst).
fn pages_present(bytes: &[u8]) -> usize {
    use std::os::unix::fs::FileExt;
    let pages = page_size();
    let map = std::fs::File::open("/proc/self/pagemap").unwrap();
    let first = bytes.as_ptr() as usize / pages;
    let last = (bytes.as_ptr() as usize + bytes.len() - 1) / pages;
    (first..=last)
        .filter(|page| {
            let mut entry = [0u8; 8];
            map.read_exact_at(&mut entry, (*page * 8) as u64).unwrap();
            u64::from_ne_bytes(entry) >> 63 == 1
        })
        .count()
}

fn inside(ranges: &[(usize, usize)], addr: usize) -> bool {
    ranges.iter().any(|&(s, e)| (s..e).contains(&addr))
}

/// `Rss:` in kB of the smaps entry whose range holds `addr`.
fn rss_kb_at(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut in_it = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((s, e)) = range.split_once('-') {
                if let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16))
                {
                    in_it = (s..e).contains(&addr);
                    continue;
                }
            }
        }
        if in_it {
            if let Some(v) = line.strip_prefix("Rss:") {
                return v.trim().trim_end_matches(" kB").trim().parse().unwrap();
            }
        }
    }
    panic!("no mapping holds {addr:#x}");
}

#[test]
fn only_unmodified_read_only_file_mappings_are_picked() {
    let smaps = "\
55558aed0000-55558aee2000 rw-p 00000000 00:00 0                          [heap]
Rss:                  72 kB
Anonymous:            72 kB
7f9571000000-7f9571064000 r--p 00000000 fd:01 123 /usr/bin/reloadlet
Rss:                 400 kB
Anonymous:             0 kB
7f9571064000-7f9571749000 r-xp 00064000 fd:01 123 /usr/bin/reloadlet
Rss:                6164 kB
Anonymous:             0 kB
7f9571749000-7f957196a000 r--p 00749000 fd:01 123 /usr/bin/reloadlet
Rss:                 732 kB
Anonymous:           120 kB
7f957196a000-7f95719bc000 rw-p 0096a000 fd:01 123 /usr/bin/reloadlet
Rss:                 328 kB
Anonymous:           328 kB
7f9571af5000-7f9571af7000 r-xp 00000000 00:00 0                          [vdso]
Anonymous:             0 kB
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
Anonymous:             0 kB
";
    assert_eq!(
        unmodified_read_only_mappings(smaps),
        vec![
            (0x7f9571000000, 0x7f9571064000),
            (0x7f9571064000, 0x7f9571749000)
        ]
    );
}

#[test]
fn only_what_both_the_segments_and_the_mappings_cover_is_released() {
    let segments = [(0x1000, 0x5000), (0x8000, 0x9000)];
    let mappings = [
        (0x0, 0x2000),
        (0x3000, 0x4000),
        (0x8000, 0xa000),
        (0xb000, 0xc000),
    ];
    assert_eq!(
        releasable(&segments, &mappings),
        vec![(0x1000, 0x2000), (0x3000, 0x4000), (0x8000, 0x9000)]
    );
    assert!(releasable(&segments, &[]).is_empty());
}

/// The bug class the first version had no guard for: a released range reaching into what
/// the process wrote (RELRO's relocated pointers, `.data`) or into another file's mapping.
#[test]
fn the_segments_are_this_executables_code_and_constants_only() {
    let segments = read_only_segments();
    assert!(
        !segments.is_empty(),
        "the test binary has non-writable segments"
    );
    let code = the_segments_are_this_executables_code_and_constants_only as fn() as usize;
    assert!(inside(&segments, code), "its own code is in them");
    assert!(!inside(&segments, &WRITTEN as *const AtomicU64 as usize));
    assert!(!inside(&segments, &RELOCATED as *const [&str; 3] as usize));
    let pages = page_size();
    for &(s, e) in &segments {
        assert!(s % pages == 0 && e % pages == 0 && s < e);
    }
}

#[test]
fn released_code_runs_again_and_nothing_written_is_lost() {
    WRITTEN.store(42, Ordering::SeqCst);
    // Another file, mapped private and read-only, with every page touched: not ours.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other");
    std::fs::write(&path, vec![7u8; 64 * 1024]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: a fresh private read-only mapping of a 64 KiB file, unmapped below.
    let other = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            64 * 1024,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(other, libc::MAP_FAILED);
    // SAFETY: reading inside the mapping just made.
    let sum: u64 = (0..16)
        .map(|p| u64::from(unsafe { *(other as *const u8).add(p * 4096) }))
        .sum();
    assert_eq!(sum, 16 * 7);
    // Every page of the constants read: mapped.
    let constants = std::hint::black_box(&CONSTANTS[..]);
    let read: u64 = constants.iter().step_by(4096).map(|b| u64::from(*b)).sum();
    assert_eq!(read, 7 * 64);

    let released = release_startup_code();

    // Looked at before anything reads them again (other tests may release too, concurrently:
    // that only unmaps more). Fault-around may map back a few pages at the edges, from
    // neighbouring constants read meanwhile, not the bulk.
    let present = pages_present(constants);
    assert!(
        released > 0,
        "the test binary's code and constants were released"
    );
    assert!(
        present <= 64 / 2,
        "{present} of 64 pages of constants still mapped"
    );
    assert_eq!(
        rss_kb_at(other as usize),
        64,
        "another file's mapping is untouched"
    );
    assert_eq!(WRITTEN.load(Ordering::SeqCst), 42);
    assert_eq!(RELOCATED.concat(), "alphabetagamma");
    let v: Vec<u64> = (0..1000).map(|i| i * 3).collect();
    assert_eq!(v.iter().sum::<u64>(), 1_498_500);
    assert_eq!(format!("{:?}", Some("still here")), "Some(\"still here\")");
    assert!(
        constants.iter().all(|b| *b == 7),
        "the constants read back from the file"
    );
    assert!(release_startup_code() > 0, "and can be released again");
    // SAFETY: the mapping made above, no longer used.
    assert_eq!(unsafe { libc::munmap(other, 64 * 1024) }, 0);
}
