//! The pool against glibc malloc/free, side by side in one run, and the pool's peak on the real
//! graphs against their lower bound.
//!
//! Run: `cargo bench -p graphsched-workloads --bench pool`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use graphsched::{run, Pool, RunOptions};
use graphsched_workloads::{bundled_graphs, GraphFile, Measured, Pace};

fn minor_faults() -> i64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_minflt
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

/// Median ns per acquire+release pair and minor faults per pair, for each of `pairs`, over
/// `batches` batches of `iters` pairs, and the median over batches of the first's time over
/// the second's; the pairs take turns batch by batch, so that a drift of this shared machine's
/// clock falls on all of them alike, and each batch's ratio compares neighbours. With `touch`,
/// one byte per page is written, so fresh pages fault.
fn measure<const N: usize>(
    iters: usize,
    batches: usize,
    touch: bool,
    size: usize,
    mut pairs: [&mut dyn FnMut(usize, bool); N],
) -> ([(f64, f64); N], f64) {
    let mut times = vec![Vec::new(); N];
    let mut faults = [0i64; N];
    for pair in pairs.iter_mut() {
        pair(size, touch); // warm up: the first round may take memory from the system
    }
    for _ in 0..batches {
        for (k, pair) in pairs.iter_mut().enumerate() {
            let f = minor_faults();
            let t = Instant::now();
            for _ in 0..iters {
                pair(size, touch);
            }
            times[k].push(t.elapsed().as_nanos() as f64 / iters as f64);
            faults[k] += minor_faults() - f;
        }
    }
    let ratio = median(times[0].iter().zip(&times[1]).map(|(a, b)| a / b).collect());
    let each = std::array::from_fn(|k| {
        (
            median(std::mem::take(&mut times[k])),
            faults[k] as f64 / (iters * batches) as f64,
        )
    });
    (each, ratio)
}

fn touch_pages(p: *mut u8, size: usize) {
    for off in (0..size).step_by(4096) {
        // SAFETY: `p` holds `size` bytes.
        unsafe { p.add(off).write_volatile(1) };
    }
}

/// The reference to beat: a pool that reuses a freed block only for a request of the same size
/// class (four classes per power of two), replayed on the file-order acquire/release sequence.
/// Returns the bytes it would hold at its peak.
fn same_class_peak(file: &GraphFile) -> u64 {
    use std::collections::HashMap;
    let class = |n: u64| {
        let step = (1u64 << (63 - n.leading_zeros())).max(64) / 4;
        n.div_ceil(step) * step
    };
    let mut readers: HashMap<&str, usize> = HashMap::new();
    for n in &file.nodes {
        for i in &n.inputs {
            *readers.entry(i).or_default() += 1;
        }
    }
    for o in &file.outputs {
        *readers.entry(o).or_default() += 1;
    }
    let mut free: HashMap<u64, usize> = HashMap::new();
    let mut held: HashMap<&str, u64> = HashMap::new();
    let mut reserved = 0u64;
    let give_back = |c: u64, free: &mut HashMap<u64, usize>| *free.entry(c).or_default() += 1;
    for n in &file.nodes {
        for o in &n.outputs {
            let c = class(o.bytes as u64);
            match free.get_mut(&c).filter(|k| **k > 0) {
                Some(k) => *k -= 1,
                None => reserved += c,
            }
            held.insert(&o.name, c);
        }
        for i in &n.inputs {
            if let (Some(r), Some(&c)) = (readers.get_mut(i.as_str()), held.get(i.as_str())) {
                *r -= 1;
                if *r == 0 {
                    give_back(c, &mut free);
                }
            }
        }
        for o in &n.outputs {
            if !readers.contains_key(o.name.as_str()) {
                give_back(held[o.name.as_str()], &mut free);
            }
        }
    }
    reserved
}

fn main() {
    println!("acquire+release pairs, one thread (medians of 15 batches, pool and malloc in turn; pool/malloc is the median of the batches' own ratios; issue 12 asks <= 2x)");
    println!(
        "{:>10} | {:>12} {:>12} {:>11} | {:>13} {:>13}",
        "size", "pool ns", "malloc ns", "pool/malloc", "pool faults", "malloc faults"
    );
    let pool = Pool::default();
    for size in [64usize, 1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20] {
        let iters = (200_000_000 / size.max(1000)).clamp(20, 200_000);
        let mut pool_pair = |size: usize, touch: bool| {
            let p = pool.acquire(size, false).unwrap();
            if touch {
                touch_pages(p.as_ptr(), size);
            }
            // SAFETY: acquired above, not used after.
            unsafe { pool.release(std::hint::black_box(p)) }.unwrap();
        };
        let mut malloc_pair = |size: usize, touch: bool| {
            // SAFETY: plain malloc/free of a positive size.
            unsafe {
                let p = libc::malloc(size) as *mut u8;
                assert!(!p.is_null());
                if touch {
                    touch_pages(p, size);
                }
                libc::free(std::hint::black_box(p) as *mut _);
            }
        };
        let ([(pool_ns, _), (malloc_ns, _)], ratio) =
            measure(iters, 15, false, size, [&mut pool_pair, &mut malloc_pair]);
        let touch_iters = (iters / 10).max(10);
        let ([(_, pool_faults), (_, malloc_faults)], _) =
            measure(touch_iters, 3, true, size, [&mut pool_pair, &mut malloc_pair]);
        println!(
            "{:>10} | {:>12.1} {:>12.1} {:>10.2}x | {:>13.2} {:>13.2}",
            size, pool_ns, malloc_ns, ratio, pool_faults, malloc_faults
        );
    }

    println!();
    println!("acquire+release pairs on one shared pool from 1 and from 2 threads at once: pairs per");
    println!("microsecond, and 2-thread throughput over 1-thread (medians of 11 rounds of 1,000,000 pairs a thread, each scaling the median of the rounds' own ratios; issue 12 asks 1.6x)");
    println!(
        "{:>10} | {:>10} {:>10} {:>8} | {:>10} {:>10} {:>8}",
        "size", "pool 1t", "pool 2t", "scaling", "malloc 1t", "malloc 2t", "scaling"
    );
    for size in [64usize, 4 << 10] {
        let iters = 1_000_000;
        // Pairs per microsecond from `threads` threads at once, one measurement: from when all
        // of them are running to when the last one is done. Thread start-up stays out: on this
        // virtual machine a new thread waited 0.1-0.7 ms for the idle second vCPU to wake, which
        // the 2-thread side alone would pay (it made 2 threads look like 1.2-1.5x one).
        let rate = |threads: usize, pair: &(dyn Fn(usize) + Sync)| {
            let running = AtomicUsize::new(0);
            let ns = std::thread::scope(|s| {
                let timers: Vec<_> = (0..threads)
                    .map(|_| {
                        s.spawn(|| {
                            pair(size); // the thread's heap is made or adopted here
                            running.fetch_add(1, Ordering::AcqRel);
                            while running.load(Ordering::Acquire) < threads {
                                std::hint::spin_loop();
                            }
                            let t = Instant::now();
                            (0..iters).for_each(|_| pair(size));
                            t.elapsed().as_nanos()
                        })
                    })
                    .collect();
                timers.into_iter().map(|t| t.join().unwrap()).max().unwrap()
            });
            (threads * iters) as f64 / (ns as f64 / 1000.0)
        };
        let pool_pair = |size: usize| {
            let p = pool.acquire(size, false).unwrap();
            // SAFETY: acquired above, not used after.
            unsafe { pool.release(std::hint::black_box(p)) }.unwrap();
        };
        let malloc_pair = |size: usize| {
            // SAFETY: plain malloc/free of a positive size.
            unsafe { libc::free(std::hint::black_box(libc::malloc(size))) };
        };
        // Rounds of all four in turn, so that each scaling is a ratio of neighbours: the clock
        // of this shared machine drifts more between rounds than within one.
        let round = || {
            [
                rate(1, &pool_pair),
                rate(2, &pool_pair),
                rate(1, &malloc_pair),
                rate(2, &malloc_pair),
            ]
        };
        // One round untimed first: right after the one-thread section, the first row scaled
        // 1.55-1.70x for pool and malloc alike where the same row run again scaled 1.95x. The
        // second vCPU, idle for a minute, takes a while to come up to speed.
        round();
        let rounds: Vec<[f64; 4]> = (0..11).map(|_| round()).collect();
        let med = |f: &dyn Fn(&[f64; 4]) -> f64| median(rounds.iter().map(f).collect());
        println!(
            "{:>10} | {:>10.1} {:>10.1} {:>7.2}x | {:>10.1} {:>10.1} {:>7.2}x",
            size,
            med(&|r| r[0]),
            med(&|r| r[1]),
            med(&|r| r[1] / r[0]),
            med(&|r| r[2]),
            med(&|r| r[3]),
            med(&|r| r[3] / r[2])
        );
    }

    println!();
    println!("releases from another thread: one thread acquires a batch of 64-byte blocks, a second");
    println!("releases them (ns per release, median of 7 batches of 2,000; the pool's release claims");
    println!(
        "the block in the owning heap's table, src/pool/out_table/; malloc's free goes to the other thread's arena)"
    );
    println!(
        "{:>10} | {:>10} {:>10} {:>11}",
        "size", "pool ns", "malloc ns", "pool/malloc"
    );
    {
        const BATCH: usize = 2_000;
        // Addresses cross the threads as integers; each side times only the releases.
        let batch_ns = |acquire: &dyn Fn() -> usize, release: &(dyn Fn(usize) + Sync)| {
            let blocks: Vec<usize> = (0..BATCH).map(|_| acquire()).collect();
            std::thread::scope(|s| {
                s.spawn(|| {
                    let t = Instant::now();
                    blocks.iter().for_each(|&b| release(b));
                    t.elapsed().as_nanos() as f64 / BATCH as f64
                })
                .join()
                .unwrap()
            })
        };
        let pool_acquire = || pool.acquire(64, false).unwrap().as_ptr() as usize;
        let pool_release = |b: usize| {
            // SAFETY: acquired by `pool_acquire`, released once, not used after.
            unsafe { pool.release(std::ptr::NonNull::new(b as *mut u8).unwrap()) }.unwrap();
        };
        // SAFETY: plain malloc of a positive size.
        let malloc_acquire = || unsafe { libc::malloc(64) } as usize;
        // SAFETY: allocated by `malloc_acquire`, freed once.
        let malloc_release = |b: usize| unsafe { libc::free(b as *mut libc::c_void) };
        let rounds: Vec<(f64, f64)> = (0..7)
            .map(|_| {
                (
                    batch_ns(&pool_acquire, &pool_release),
                    batch_ns(&malloc_acquire, &malloc_release),
                )
            })
            .collect();
        let (p, m) = (
            median(rounds.iter().map(|r| r.0).collect()),
            median(rounds.iter().map(|r| r.1).collect()),
        );
        println!("{:>10} | {:>10.1} {:>10.1} {:>10.2}x", 64, p, m, p / m);
    }

    println!();
    println!("real graphs, file order, one thread: the pool's peak against the max-live lower bound");
    println!(
        "{:>18} | {:>12} {:>13} {:>6} | {:>13} {:>6} | {:>12} {:>12}",
        "graph", "lower bound", "pool reserved", "ratio", "same-class", "ratio", "run 1 allocs", "run 2 allocs"
    );
    for path in bundled_graphs() {
        let file = GraphFile::load(&path).unwrap();
        let loaded = Measured::build(&file, Pace::Touch, Some(1)).unwrap();
        let bindings = loaded.bindings();
        let pool = Arc::new(Pool::default());
        let r1 = run(
            &loaded.graph,
            &pool,
            &RunOptions {
                inputs: &bindings,
                ..Default::default()
            },
        )
        .unwrap();
        let first = pool.stats();
        drop(r1);
        let r2 = run(
            &loaded.graph,
            &pool,
            &RunOptions {
                inputs: &bindings,
                ..Default::default()
            },
        )
        .unwrap();
        drop(r2);
        let second = pool.stats();
        let lb = file.max_live_bytes();
        assert_eq!(
            first.peak_live_bytes, lb,
            "the run holds exactly the lower bound's values"
        );
        let same_class = same_class_peak(&file);
        println!(
            "{:>18} | {:>12} {:>13} {:>6.3} | {:>13} {:>6.3} | {:>12} {:>12}",
            file.name,
            lb,
            first.peak_reserved_bytes,
            first.peak_reserved_bytes as f64 / lb as f64,
            same_class,
            same_class as f64 / lb as f64,
            first.os_allocs,
            second.os_allocs - first.os_allocs
        );
    }
}
