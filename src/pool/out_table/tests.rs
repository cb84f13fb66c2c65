//! Unit tests of the record of blocks out.
use super::*;

fn out(n: usize) -> Out {
    Out {
        block: n.next_multiple_of(64),
        requested: n,
        class: (n % 7) as u8,
    }
}

#[test]
fn entries_come_back_once_across_rebuilds() {
    let (mut t, shared) = OutTable::new();
    // Enough to grow the table twice, with removals in between that leave tombstones.
    for a in 1..=300usize {
        t.insert(&shared, a * 64, out(a));
        if a % 3 == 0 {
            assert_eq!(t.remove(&shared, (a - 1) * 64), Some(out(a - 1)));
        }
    }
    for a in [3, 300, 1, 150, 9, 298, 4] {
        assert_eq!(t.remove(&shared, a * 64), Some(out(a)), "{a}");
        assert_eq!(t.remove(&shared, a * 64), None, "removed once");
    }
    assert_eq!(t.remove(&shared, 1000 * 64), None, "never inserted");
    let left = (1..=300).filter(|a| t.remove(&shared, a * 64).is_some()).count();
    assert_eq!(left, 300 - 100 - 7);
    assert_eq!(t.live(&shared), 0);
}

#[test]
fn a_claim_is_exact_and_collected_once() {
    let (mut t, shared) = OutTable::new();
    for a in 1..=40usize {
        t.insert(&shared, a * 64, out(a));
    }
    let mut seen = Vec::new();
    assert!(shared.claim(5 * 64, |o| seen.push(o), |_| panic!("undone")));
    assert_eq!(seen, vec![out(5)]);
    let never = |_| panic!("a claim that finds nothing calls nothing");
    assert!(!shared.claim(5 * 64, never, never), "a second claim fails");
    assert!(!shared.claim(41 * 64, never, never), "a block not out is no claim");
    assert_eq!(t.remove(&shared, 5 * 64), None, "a claimed block cannot be removed");
    assert!(shared.pending());
    // A rebuild keeps the claim (forced by filling the table past three quarters).
    for a in 41..=60usize {
        t.insert(&shared, a * 64, out(a));
    }
    assert!(shared.claim(50 * 64, |_| {}, |_| {}));
    let mut got = Vec::new();
    t.collect(&shared, |a, o| got.push((a, o)));
    got.sort_by_key(|g| g.0);
    assert_eq!(got, vec![(5 * 64, out(5)), (50 * 64, out(50))]);
    t.collect(&shared, |_, _| panic!("collected twice"));
    assert!(!shared.pending());
    assert_eq!(t.live(&shared), 58);
}

#[test]
fn the_front_slot_serves_a_pair_without_the_table() {
    let (mut t, shared) = OutTable::new();
    for _ in 0..3 {
        t.insert(&shared, 64, out(64));
        assert_eq!(t.remove(&shared, 64), Some(out(64)));
    }
    assert_eq!(t.used, 0, "the table was not touched");
    // Taken: the next block goes to the table, and both come back.
    t.insert(&shared, 64, out(64));
    t.insert(&shared, 128, out(128));
    assert_eq!(t.used, 1);
    assert_eq!(t.remove(&shared, 64), Some(out(64)));
    assert_eq!(t.remove(&shared, 64), None, "removed once");
    // A claim in the front slot: exact, collected once, not removable meanwhile.
    t.insert(&shared, 192, out(192));
    let never = |_| panic!("a claim that finds nothing calls nothing");
    assert!(shared.claim(192, |o| assert_eq!(o, out(192)), never));
    assert!(!shared.claim(192, never, never), "a second claim fails");
    assert_eq!(t.remove(&shared, 192), None);
    assert_eq!(t.live(&shared), 2);
    let mut got = Vec::new();
    t.collect(&shared, |a, o| got.push((a, o)));
    assert_eq!(got, vec![(192, out(192))]);
    t.collect(&shared, |_, _| panic!("collected twice"));
    assert_eq!(t.remove(&shared, 128), Some(out(128)));
    assert_eq!(t.live(&shared), 0);
}

#[test]
fn a_block_held_long_leaves_the_front_slot_to_the_pairs() {
    let (mut t, shared) = OutTable::new();
    t.insert(&shared, 64, out(64));
    for _ in 0..FRONT_PATIENCE + 2 {
        t.insert(&shared, 128, out(128));
        assert_eq!(t.remove(&shared, 128), Some(out(128)));
    }
    t.insert(&shared, 128, out(128));
    assert_eq!(
        t.in_front(&shared, 128),
        Some(out(128)),
        "the pairs have the front slot"
    );
    assert_eq!(t.in_front(&shared, 64), None);
    // The block held long, now in the table: still out, claimable and collected once.
    assert!(shared.claim(64, |o| assert_eq!(o, out(64)), |_| panic!("undone")));
    let mut got = Vec::new();
    t.collect(&shared, |a, o| got.push((a, o)));
    assert_eq!(got, vec![(64, out(64))]);
    assert_eq!(t.remove(&shared, 128), Some(out(128)));
    assert_eq!(t.live(&shared), 0);
    // A claimed entry moves with its mark: claimed in the front slot, then moved.
    t.insert(&shared, 192, out(192));
    assert!(shared.claim(192, |_| {}, |_| panic!("undone")));
    for _ in 0..FRONT_PATIENCE + 2 {
        t.insert(&shared, 256, out(256));
        assert_eq!(t.remove(&shared, 256), Some(out(256)));
    }
    let mut got = Vec::new();
    t.collect(&shared, |a, o| got.push((a, o)));
    assert_eq!(got, vec![(192, out(192))], "the claim survived the move");
}

/// Threads claim the blocks while the holder inserts, removes and rebuilds: every block
/// goes back exactly once, either removed or claimed and collected.
#[test]
fn claims_race_with_the_holder() {
    use std::sync::Mutex;
    let (mut t, shared) = OutTable::new();
    const N: usize = 20_000;
    let handed: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let claimed = AtomicUsize::new(0);
    let mut back = vec![0u8; N + 1];
    std::thread::scope(|s| {
        let (shared, handed, claimed) = (&shared, &handed, &claimed);
        let claimers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(move || loop {
                    let next = handed.lock().unwrap().pop();
                    match next {
                        Some(0) => return,
                        Some(a) => {
                            // The holder's rebuild may hide a key for a moment: retry.
                            let check = |o| assert_eq!(o, out(a));
                            while !shared.claim(a * 64, check, check) {
                                std::hint::spin_loop();
                            }
                            claimed.fetch_add(1, Ordering::Relaxed);
                        }
                        None => std::hint::spin_loop(),
                    }
                })
            })
            .collect();
        for a in 1..=N {
            t.insert(shared, a * 64, out(a));
            match a % 4 {
                0 => handed.lock().unwrap().push(a),
                _ => {
                    assert_eq!(t.remove(shared, a * 64), Some(out(a)));
                    back[a] += 1;
                }
            }
            if a % 64 == 0 {
                t.collect(shared, |addr, o| {
                    assert_eq!(o, out(addr / 64));
                    back[addr / 64] += 1;
                });
            }
        }
        handed.lock().unwrap().splice(0..0, [0, 0]);
        claimers.into_iter().for_each(|c| c.join().unwrap());
    });
    t.collect(&shared, |addr, _| back[addr / 64] += 1);
    assert_eq!(claimed.load(Ordering::Relaxed), N / 4);
    assert!(back[1..].iter().all(|&b| b == 1), "every block back once");
    assert_eq!(t.live(&shared), 0);
}
