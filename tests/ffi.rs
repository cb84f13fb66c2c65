//! The C ABI driven from Rust, as a specification: one table of named cases per API area
//! (`tests/ffi/cases.rs`), each case a call, the `gs_status` or value it must return, and a word
//! the last-error message must contain. Two checks tie the tables to the header: every status
//! code it declares is produced by some case, and every function it exports has a misuse case.

use std::collections::BTreeSet;
use std::ffi::{c_void, CStr};
use std::fmt::Debug;
use std::ptr::{null, null_mut};

use graphsched::ffi::*;
use graphsched::{GraphInfo, PoolStats, RunStats, Tensor, ValueRef};

/// A table of cases, run in order (a case may rely on what the ones above it did). A row is
///
/// - `"name": call => GS_STATUS, "word";` the call returns that status and, unless it is
///   `GS_OK`, the last-error message contains `word`;
/// - `"name": call => returns value, "word";` the call returns `value` and, unless `word` is
///   empty, the last-error message contains it;
/// - `"name": expression => is value;` a promise checked without calling the C ABI.
macro_rules! spec {
    ($s:ident;) => {};
    ($s:ident; $name:literal: $e:expr => is $want:expr; $($rest:tt)*) => {
        $s.returns($name, stringify!($e), $e, $want, "");
        spec!($s; $($rest)*);
    };
    ($s:ident; $name:literal: $call:expr => returns $want:expr, $word:literal; $($rest:tt)*) => {
        // SAFETY: a case passes only NULL, live locals, handles its area made (live or freed), or
        // garbage that the handle registry rejects before any dereference.
        let got = unsafe { $call };
        $s.returns($name, stringify!($call), got, $want, $word);
        spec!($s; $($rest)*);
    };
    ($s:ident; $name:literal: $call:expr => $want:ident, $word:literal; $($rest:tt)*) => {
        // SAFETY: as for the `returns` rows above.
        let got = unsafe { $call };
        $s.status($name, stringify!($call), got, gs_status::$want, $word);
        spec!($s; $($rest)*);
    };
}

#[path = "ffi/cases.rs"]
mod cases;

/// The areas, in order; each is a `#[test]` of its own (`area::<name>`), and
/// [`run_every_area`] runs them all for the two header checks.
macro_rules! areas {
    ($($area:ident),* $(,)?) => {
        const AREAS: &[(&str, fn(&mut Spec))] = &[$((stringify!($area), cases::$area)),*];
        mod area {
            $(#[test]
            fn $area() {
                super::cases::$area(&mut super::Spec::new(stringify!($area)));
            })*
        }
    };
}

areas!(
    graph_building,
    finalize,
    runs_and_bindings,
    results,
    pools,
    plans,
    executors,
    cancel_tokens,
    kernel_context,
    simulator,
    partitions,
);

/// What the cases produced: the statuses returned, and the functions given a misuse case (a
/// case whose last-error message is checked).
struct Spec {
    area: &'static str,
    statuses: BTreeSet<i32>,
    misused: BTreeSet<String>,
    cases: usize,
}

impl Spec {
    fn new(area: &'static str) -> Self {
        Spec {
            area,
            statuses: BTreeSet::new(),
            misused: BTreeSet::new(),
            cases: 0,
        }
    }

    fn status(&mut self, name: &str, call: &str, got: gs_status, want: gs_status, word: &str) {
        self.returns(name, call, got, want, "");
        if want != gs_status::GS_OK {
            self.mentions(name, call, word);
        }
        self.statuses.insert(got as i32);
    }

    fn returns<T: PartialEq + Debug>(&mut self, name: &str, call: &str, got: T, want: T, word: &str) {
        assert_eq!(
            got,
            want,
            "[{}] {name}: `{call}`; last error: {}",
            self.area,
            last_error()
        );
        if !word.is_empty() {
            self.mentions(name, call, word);
        }
        self.cases += 1;
    }

    fn mentions(&mut self, name: &str, call: &str, word: &str) {
        let msg = last_error();
        assert!(
            msg.contains(word),
            "[{}] {name}: message {msg:?} does not mention {word:?}",
            self.area
        );
        self.misused.insert(function_called(call));
    }
}

/// The first `gs_*` function a case's call text names.
fn function_called(call: &str) -> String {
    let start = call
        .find("gs_")
        .unwrap_or_else(|| panic!("`{call}` calls no gs_ function"));
    call[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

fn run_every_area() -> Spec {
    let mut s = Spec::new("");
    for (name, area) in AREAS {
        s.area = name;
        area(&mut s);
    }
    s
}

fn header() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/graphsched.h")).unwrap()
}

fn last_error() -> String {
    // SAFETY: the last error is a valid C string owned by this thread.
    unsafe { CStr::from_ptr(gs_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

unsafe extern "C" fn fill_kernel(ctx: *mut gs_kernel_ctx, user: *mut c_void) -> i32 {
    let value = user as usize as u8;
    // SAFETY: the context this kernel received, on its thread, while it runs.
    let out = unsafe { gs_ctx_output(ctx, 0) };
    // SAFETY: a static output is allocated with `nbytes` bytes while the kernel runs.
    unsafe { std::ptr::write_bytes((*out).data as *mut u8, value, (*out).nbytes) };
    0
}

unsafe extern "C" fn add_kernel(ctx: *mut gs_kernel_ctx, _user: *mut c_void) -> i32 {
    // SAFETY: the context this kernel received, on its thread, while it runs.
    let n = unsafe { gs_ctx_num_inputs(ctx) };
    // SAFETY: as above.
    let out = unsafe { gs_ctx_output(ctx, 0) };
    // SAFETY: inputs and output are valid for `nbytes` while the kernel runs; `ctx` as above.
    unsafe {
        let dst = std::slice::from_raw_parts_mut((*out).data as *mut u8, (*out).nbytes);
        dst.fill(0);
        for i in 0..n {
            let t = gs_ctx_input(ctx, i);
            let src = std::slice::from_raw_parts((*t).data as *const u8, (*t).nbytes);
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.wrapping_add(*s);
            }
        }
    }
    // Out of range: NULL, not a crash.
    // SAFETY: `ctx` as above.
    if unsafe { !gs_ctx_input(ctx, n).is_null() || !gs_ctx_output(ctx, 5).is_null() } {
        return 99;
    }
    0
}

unsafe extern "C" fn failing_kernel(ctx: *mut gs_kernel_ctx, _user: *mut c_void) -> i32 {
    // SAFETY: the context this kernel received, on its thread, while it runs; a static C string.
    unsafe { gs_ctx_set_error(ctx, c"bad shape".as_ptr()) };
    7
}

unsafe extern "C" fn dynamic_kernel(ctx: *mut gs_kernel_ctx, _user: *mut c_void) -> i32 {
    let mut t: *mut Tensor = null_mut();
    // SAFETY: the context this kernel received, on its thread, while it runs; `t` is writable.
    let first = unsafe { gs_ctx_alloc_output(ctx, 0, 48, &mut t) };
    // SAFETY: `ctx` as above; a NULL `out` is allowed.
    let again = unsafe { gs_ctx_alloc_output(ctx, 0, 48, null_mut()) };
    if first != gs_status::GS_OK || again != gs_status::GS_ERR_INVALID_ARGUMENT || t.is_null() {
        return 1;
    }
    // SAFETY: 48 bytes were just allocated.
    unsafe { std::ptr::write_bytes((*t).data as *mut u8, 3, 48) };
    0
}

fn desc(name: &CStr, kernel: gs_kernel_fn, inputs: &[ValueRef], sizes: &[usize], user: usize) -> gs_node_desc {
    gs_node_desc {
        name: name.as_ptr(),
        op_type: c"Op".as_ptr(),
        kernel,
        user_data: user as *mut c_void,
        inputs: inputs.as_ptr(),
        num_inputs: inputs.len() as u32,
        num_outputs: sizes.len() as u32,
        output_sizes: sizes.as_ptr(),
        estimated_ns: 0,
        flags: 0,
        in_place_output: 0,
        in_place_input: 0,
        size_fn: None,
    }
}

fn new_graph() -> *mut gs_graph {
    let mut g = null_mut();
    // SAFETY: `g` is writable.
    assert_eq!(unsafe { gs_graph_new(&mut g) }, gs_status::GS_OK);
    g
}

fn new_pool() -> *mut gs_pool {
    let mut p = null_mut();
    // SAFETY: NULL config means defaults; `p` is writable.
    assert_eq!(unsafe { gs_pool_new(null(), &mut p) }, gs_status::GS_OK);
    p
}

/// Blocks the pool has handed out so far.
fn acquires(p: *mut gs_pool) -> u64 {
    let mut s = PoolStats::default();
    // SAFETY: a live pool handle of the calling case and a local to write.
    assert_eq!(unsafe { gs_pool_get_stats(p, &mut s) }, gs_status::GS_OK);
    s.acquires
}

fn live_bytes(p: *mut gs_pool) -> u64 {
    let mut s = PoolStats::default();
    // SAFETY: `s` is writable; the caller's pool is freed by no other thread.
    assert_eq!(unsafe { gs_pool_get_stats(p, &mut s) }, gs_status::GS_OK);
    s.live_bytes
}

#[test]
fn a_graph_runs_end_to_end_through_the_c_abi() {
    let g = new_graph();
    let mut x = ValueRef::new(0, 0);
    // SAFETY: (whole test) arguments are valid pointers to live locals.
    unsafe {
        assert_eq!(gs_graph_add_input(g, c"x".as_ptr(), 32, &mut x), gs_status::GS_OK);
        let mut a = 0;
        assert_eq!(
            gs_graph_add_node(g, &desc(c"a", Some(fill_kernel), &[], &[32], 5), &mut a),
            gs_status::GS_OK
        );
        let ins = [x, ValueRef::new(a, 0), ValueRef::new(a, 0)];
        let mut sum = 0;
        assert_eq!(
            gs_graph_add_node(g, &desc(c"sum", Some(add_kernel), &ins, &[32], 0), &mut sum),
            gs_status::GS_OK
        );
        let mut dy = 0;
        let dyn_desc = desc(c"dyn", Some(dynamic_kernel), &[], &[GS_SIZE_DYNAMIC], 0);
        assert_eq!(gs_graph_add_node(g, &dyn_desc, &mut dy), gs_status::GS_OK);
        assert_eq!(gs_graph_mark_output(g, ValueRef::new(sum, 0)), gs_status::GS_OK);
        assert_eq!(gs_graph_mark_output(g, ValueRef::new(dy, 0)), gs_status::GS_OK);
        assert_eq!(gs_graph_finalize(g), gs_status::GS_OK);

        let mut info = GraphInfo::default();
        assert_eq!(gs_graph_get_info(g, &mut info), gs_status::GS_OK);
        assert_eq!(
            (info.num_nodes, info.num_inputs, info.num_outputs, info.num_edges),
            (4, 1, 2, 3)
        );
        let mut len = 0usize;
        assert_eq!(gs_graph_topological_order(g, null_mut(), 0, &mut len), gs_status::GS_OK);
        let mut order = vec![0u32; len];
        assert_eq!(
            gs_graph_topological_order(g, order.as_mut_ptr(), order.len(), &mut len),
            gs_status::GS_OK
        );
        assert_eq!(order, [0, 1, 2, 3]);
        let mut cp = [0u32; 8];
        assert_eq!(
            gs_graph_critical_path(g, cp.as_mut_ptr(), cp.len(), &mut len),
            gs_status::GS_OK
        );
        assert_eq!(&cp[..len], &[a, sum]);
        assert_eq!(CStr::from_ptr(gs_graph_node_name(g, sum)).to_str().unwrap(), "sum");
        let mut found = 0;
        assert_eq!(gs_graph_find_node(g, c"dyn".as_ptr(), &mut found), gs_status::GS_OK);
        assert_eq!(found, dy);

        let pool = new_pool();
        let input = graphsched::Tensor::new(Box::into_raw(Box::new([1u128; 2])) as *mut c_void, 32);
        let bind = [gs_input_binding {
            value: x,
            tensor: input,
        }];
        let opts = gs_run_options {
            inputs: bind.as_ptr(),
            num_inputs: 1,
            ..Default::default()
        };
        let mut r = null_mut();
        assert_eq!(gs_run(g, pool, &opts, &mut r), gs_status::GS_OK, "{}", last_error());
        let mut t = Tensor::empty();
        assert_eq!(gs_result_output(r, ValueRef::new(sum, 0), &mut t), gs_status::GS_OK);
        let bytes = std::slice::from_raw_parts(t.data as *const u8, t.nbytes);
        // Input bytes of 1u128 are [1, 0, 0, ...]: byte 0 and 16 are 1, the rest 0; plus 5 + 5.
        assert_eq!(bytes[0], 11);
        assert_eq!(bytes[1], 10);
        assert_eq!(gs_result_output(r, ValueRef::new(dy, 0), &mut t), gs_status::GS_OK);
        assert_eq!((t.nbytes, *(t.data as *const u8)), (48, 3));
        let mut stats = RunStats::default();
        assert_eq!(gs_result_stats(r, &mut stats), gs_status::GS_OK);
        assert_eq!(stats.nodes_run, 3);
        // The graph can be freed before its result.
        gs_graph_free(g);
        gs_result_free(r);
        assert_eq!(live_bytes(pool), 0);
        gs_pool_free(pool);
        drop(Box::from_raw(input.data as *mut [u128; 2]));
    }
}

#[test]
fn a_freed_handle_stays_invalid_after_its_memory_is_reused() {
    let first = new_graph();
    // SAFETY: (whole test) the handles are this thread's alone; a freed one is rejected by the
    // registry before any dereference.
    unsafe {
        gs_graph_free(first);
        let handles: Vec<*mut gs_graph> = (0..64).map(|_| new_graph()).collect();
        assert!(!handles.contains(&first), "handles are never reused");
        assert_eq!(gs_graph_finalize(first), gs_status::GS_ERR_INVALID_HANDLE);
        for h in handles {
            gs_graph_free(h);
        }
    }
}

/// Together the cases produce every status the header declares (GS_ERR_PANIC: see the guard's
/// unit test, since a C caller cannot make graphsched panic on purpose).
#[test]
fn every_status_in_the_header_is_produced_by_some_case() {
    let s = run_every_area();
    let all: BTreeSet<i32> = (0..=16).chain(18..=22).collect();
    assert_eq!(s.statuses, all, "statuses produced through the C ABI");
    let header = header();
    let body = &header[header.find("enum gs_status").unwrap()..];
    let declared: BTreeSet<i32> = body[..body.find("};").unwrap()]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("GS_")?.split_once(" = "))
        .filter(|(name, _)| *name != "ERR_PANIC")
        .map(|(_, value)| value.trim_end_matches(',').parse().unwrap())
        .collect();
    assert_eq!(
        s.statuses, declared,
        "statuses the header declares (GS_ERR_PANIC aside)"
    );
    assert_eq!(
        // SAFETY: static string.
        unsafe { CStr::from_ptr(gs_status_name(gs_status::GS_ERR_PANIC as i32)) }
            .to_str()
            .unwrap(),
        "GS_ERR_PANIC"
    );
    assert!(s.cases > 100, "{} cases", s.cases);
}

/// Every function the header exports has a case that misuses it and checks the message, but
/// those with nothing to misuse: no arguments, any argument accepted, or a free (NULL, freed and
/// garbage handles are no-ops; the cases free those too).
#[test]
fn every_exported_function_has_a_misuse_case() {
    let s = run_every_area();
    let nothing_to_misuse = [
        "gs_version_number",
        "gs_last_error_message",
        "gs_clear_last_error",
        "gs_status_name",
        "gs_graph_free",
        "gs_pool_free",
        "gs_result_free",
        "gs_plan_free",
        "gs_executor_free",
        "gs_cancel_token_free",
        "gs_partition_free",
    ];
    let mut exported = BTreeSet::new();
    for line in header().lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (at, _) in line.match_indices("gs_") {
            let name: String = line[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if line[at + name.len()..].starts_with('(') {
                exported.insert(name);
            }
        }
    }
    assert!(exported.len() >= 44, "{exported:?}");
    let missing: Vec<_> = exported
        .iter()
        .filter(|f| !s.misused.contains(*f) && !nothing_to_misuse.contains(&f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "exported functions without a misuse case: {missing:?}"
    );
    // The only call that cannot be misused: it agrees with the header's number.
    assert_eq!(gs_version_number(), GS_VERSION_NUMBER);
}
