//! The few calls of ONNX Runtime's C API this crate makes, with their handles released on drop.
//!
//! The library is loaded at run time (`ort`'s `load-dynamic`) from the onnxruntime wheel that
//! `scripts/onnx.sh` installs. Tensors are made over memory the caller owns, inputs and outputs
//! alike, so that a kernel call reads graphsched's buffers and writes into them: no copy, no
//! allocation by ONNX Runtime for the values it passes on.

use ort::sys::{
    ExecutionMode, GraphOptimizationLevel, ONNXTensorElementDataType, OrtAllocatorType, OrtApi, OrtEnv,
    OrtLoggingLevel, OrtMemType, OrtMemoryInfo, OrtSession, OrtSessionOptions, OrtStatusPtr, OrtValue,
};
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr::{self, NonNull};

/// What went wrong, as a sentence.
pub type Result<T> = std::result::Result<T, String>;

/// The loaded library: its API table, one environment and a CPU memory description.
pub struct Runtime {
    api: &'static OrtApi,
    env: NonNull<OrtEnv>,
    cpu: NonNull<OrtMemoryInfo>,
    /// The allocator over graphsched's pool, when sessions' shared memory comes from there.
    pool_allocator: Option<Box<crate::pool_allocator::PoolAllocator>>,
}

// SAFETY: ONNX Runtime's environment and memory info are immutable after creation and documented
// as usable from any thread; this type only hands them to thread-safe API calls.
unsafe impl Send for Runtime {}
// SAFETY: as above.
unsafe impl Sync for Runtime {}

/// How one session runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionConfig {
    /// Threads one operator may use (ONNX Runtime's intra-op pool); 0: its default.
    pub intra_threads: usize,
    /// With `parallel`: threads running independent nodes (its inter-op pool).
    pub inter_threads: usize,
    /// ONNX Runtime's parallel executor instead of its sequential one.
    pub parallel: bool,
    /// Use the environment's global thread pools (`Runtime::load` with `global_intra_threads`).
    pub global_threads: bool,
    /// Where the kernels' scratch memory comes from.
    pub arena: Arena,
    /// Allocate each value as it is made and free it after its last reader, instead of one
    /// block per run planned from the first run (ONNX Runtime's memory pattern): what a session
    /// whose memory comes from graphsched's pool wants, so that freed bytes serve the next
    /// value, the next cluster and graphsched's own values.
    pub value_by_value: bool,
}

/// Where a session's kernels take their scratch memory (and, for a whole model, its values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arena {
    /// The session's own arena: ONNX Runtime's default.
    #[default]
    Own,
    /// One arena all the environment's sessions share: what per-node sessions use, so that
    /// hundreds of sessions do not keep hundreds of arenas.
    Shared,
}

impl Runtime {
    /// Loads the library at `library` and makes an environment. With `global_intra_threads`, the
    /// environment owns one intra-op pool of that many threads that sessions may share.
    pub fn load(library: &Path, global_intra_threads: Option<usize>) -> Result<Runtime> {
        Runtime::load_with(library, global_intra_threads, None)
    }

    /// [`load`](Self::load), the sessions' shared memory (`Arena::Shared`) taken from graphsched's
    /// `pool` when given (see `pool_allocator`), which must outlive the runtime.
    pub fn load_with(
        library: &Path,
        global_intra_threads: Option<usize>,
        pool: Option<*mut graphsched::ffi::gs_pool>,
    ) -> Result<Runtime> {
        let _ =
            ort::init_from(library).map_err(|e| format!("cannot load ONNX Runtime from {}: {e}", library.display()))?;
        let api = ort::api();
        let mut env = ptr::null_mut();
        let id = c"graphsched-onnx";
        let level = OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR;
        match global_intra_threads {
            None => {
                // SAFETY: valid log id and out pointer.
                check(api, unsafe { (api.CreateEnv)(level, id.as_ptr(), &mut env) })?
            }
            Some(threads) => {
                let mut options = ptr::null_mut();
                // SAFETY: valid out pointer.
                check(api, unsafe { (api.CreateThreadingOptions)(&mut options) })?;
                // SAFETY: `options` was just created; released right after the environment is made.
                let made = unsafe {
                    check(api, (api.SetGlobalIntraOpNumThreads)(options, threads as i32))
                        .and_then(|_| check(api, (api.SetGlobalInterOpNumThreads)(options, 1)))
                        .and_then(|_| {
                            check(
                                api,
                                (api.CreateEnvWithGlobalThreadPools)(level, id.as_ptr(), options, &mut env),
                            )
                        })
                };
                // SAFETY: made above, not used after.
                unsafe { (api.ReleaseThreadingOptions)(options) };
                made?;
            }
        }
        let env = NonNull::new(env).ok_or("ONNX Runtime made no environment")?;
        let mut cpu = ptr::null_mut();
        // SAFETY: valid out pointer.
        let made = check(api, unsafe {
            (api.CreateCpuMemoryInfo)(
                OrtAllocatorType::OrtDeviceAllocator,
                OrtMemType::OrtMemTypeDefault,
                &mut cpu,
            )
        });
        let cpu = match (made, NonNull::new(cpu)) {
            (Ok(()), Some(cpu)) => cpu,
            (made, _) => {
                // SAFETY: made above, released once; nothing else refers to it yet.
                unsafe { (api.ReleaseEnv)(env.as_ptr()) };
                return Err(made.err().unwrap_or_else(|| "ONNX Runtime made no memory info".into()));
            }
        };
        // From here on, dropping `runtime` releases both.
        let mut runtime = Runtime {
            api,
            env,
            cpu,
            pool_allocator: None,
        };
        if let Some(pool) = pool {
            let mut allocator = crate::pool_allocator::PoolAllocator::new(pool, cpu.as_ptr());
            // SAFETY: a live environment; the allocator is boxed and kept until after the
            // environment is released (unregistered first, on drop).
            check(api, unsafe {
                (api.RegisterAllocator)(env.as_ptr(), allocator.as_ort())
            })?;
            runtime.pool_allocator = Some(allocator);
            return Ok(runtime);
        }
        // The arena sessions with `Arena::Shared` use (defaults: grows by powers of two, never shrinks).
        let mut arena_info = ptr::null_mut();
        // SAFETY: valid out pointer; the info is released after the allocator is registered.
        unsafe {
            check(
                api,
                (api.CreateCpuMemoryInfo)(
                    OrtAllocatorType::OrtArenaAllocator,
                    OrtMemType::OrtMemTypeDefault,
                    &mut arena_info,
                ),
            )?;
            let registered = check(
                api,
                (api.CreateAndRegisterAllocator)(env.as_ptr(), arena_info, ptr::null()),
            );
            (api.ReleaseMemoryInfo)(arena_info);
            registered?;
        }
        Ok(runtime)
    }

    /// A session over the model at `path`, run as `config` says, without further optimization
    /// (the model was optimized when it was prepared).
    pub fn session(&self, path: &Path, config: SessionConfig) -> Result<Session<'_>> {
        let api = self.api;
        let mut options = ptr::null_mut();
        // SAFETY: valid out pointer.
        check(api, unsafe { (api.CreateSessionOptions)(&mut options) })?;
        let options = Options { api, ptr: options };
        let o = options.ptr;
        let model = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| "a model path holds a NUL byte")?;
        // SAFETY: `o` is a live options object; every call only sets a field of it.
        unsafe {
            check(
                api,
                (api.SetSessionGraphOptimizationLevel)(o, GraphOptimizationLevel::ORT_DISABLE_ALL),
            )?;
            if config.arena == Arena::Shared {
                check(
                    api,
                    (api.AddSessionConfigEntry)(o, c"session.use_env_allocators".as_ptr(), c"1".as_ptr()),
                )?;
            }
            check(api, (api.SetSessionLogSeverityLevel)(o, 3))?;
            if config.value_by_value {
                check(api, (api.DisableMemPattern)(o))?;
            }
            if config.global_threads {
                check(api, (api.DisablePerSessionThreads)(o))?;
            } else {
                check(api, (api.SetIntraOpNumThreads)(o, config.intra_threads as i32))?;
            }
            if config.parallel {
                check(api, (api.SetSessionExecutionMode)(o, ExecutionMode::ORT_PARALLEL))?;
                check(api, (api.SetInterOpNumThreads)(o, config.inter_threads as i32))?;
            }
        }
        let mut session = ptr::null_mut();
        // SAFETY: live environment and options, NUL-terminated path, valid out pointer.
        check(api, unsafe {
            (api.CreateSession)(self.env.as_ptr(), model.as_ptr(), o, &mut session)
        })
        .map_err(|e| format!("{}: {e}", path.display()))?;
        let ptr = NonNull::new(session).ok_or("ONNX Runtime made no session")?;
        Ok(Session { runtime: self, ptr })
    }

    /// An ONNX Runtime tensor over `bytes` at `data`. Making and releasing it leaves the memory
    /// alone; ONNX Runtime reads or writes it only in `Session::run`.
    ///
    /// # Safety
    /// Whenever the value is passed to [`Session::run`], `data` is valid for `bytes` bytes and
    /// aligned for the element type.
    pub unsafe fn tensor(&self, data: *mut c_void, bytes: usize, shape: &[i64], elem_type: i32) -> Result<Value<'_>> {
        let elem =
            element_type(elem_type).ok_or_else(|| format!("element type {elem_type} is not an ONNX tensor type"))?;
        let mut value = ptr::null_mut();
        // SAFETY: the caller vouches for `data`; `shape` is read during the call only.
        check(self.api, unsafe {
            (self.api.CreateTensorWithDataAsOrtValue)(
                self.cpu.as_ptr(),
                data,
                bytes,
                shape.as_ptr(),
                shape.len(),
                elem,
                &mut value,
            )
        })?;
        Ok(Value {
            api: self.api,
            ptr: value,
            _runtime: std::marker::PhantomData,
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: made in `load`, released once; sessions borrow the runtime, so none is left.
        unsafe {
            if self.pool_allocator.is_some() {
                let _ = check(
                    self.api,
                    (self.api.UnregisterAllocator)(self.env.as_ptr(), self.cpu.as_ptr()),
                );
            }
            (self.api.ReleaseMemoryInfo)(self.cpu.as_ptr());
            (self.api.ReleaseEnv)(self.env.as_ptr());
        }
    }
}

/// Session options, released when the session has been made.
struct Options {
    api: &'static OrtApi,
    ptr: *mut OrtSessionOptions,
}

impl Drop for Options {
    fn drop(&mut self) {
        // SAFETY: made by CreateSessionOptions, released once.
        unsafe { (self.api.ReleaseSessionOptions)(self.ptr) }
    }
}

/// One ONNX Runtime session. `Run` is thread-safe in ONNX Runtime, so a session may serve
/// several runs at once.
pub struct Session<'r> {
    runtime: &'r Runtime,
    ptr: NonNull<OrtSession>,
}

// SAFETY: ONNX Runtime documents OrtSession::Run as safe to call from several threads at once;
// the session is released only on drop, when no call is in flight.
unsafe impl Send for Session<'_> {}
// SAFETY: as above.
unsafe impl Sync for Session<'_> {}

impl Session<'_> {
    /// Runs the session on `inputs`, writing `outputs` in place (their memory is the caller's).
    ///
    /// # Safety
    /// Every name is a NUL-terminated string that lives for the call, and the values' memory
    /// is valid as [`Runtime::tensor`] requires.
    pub unsafe fn run(
        &self,
        input_names: &[*const c_char],
        inputs: &[Value<'_>],
        output_names: &[*const c_char],
        outputs: &mut [Value<'_>],
    ) -> Result<()> {
        if input_names.len() != inputs.len() || output_names.len() != outputs.len() {
            return Err(format!(
                "{} input names for {} inputs, {} output names for {} outputs",
                input_names.len(),
                inputs.len(),
                output_names.len(),
                outputs.len()
            ));
        }
        let api = self.runtime.api;
        let ins: Vec<*const OrtValue> = inputs.iter().map(|v| v.ptr as *const OrtValue).collect();
        let mut outs: Vec<*mut OrtValue> = outputs.iter().map(|v| v.ptr).collect();
        // SAFETY: names are NUL-terminated (caller) and as many as the values (checked); output
        // values are preallocated tensors, which Run fills instead of replacing.
        check(api, unsafe {
            (api.Run)(
                self.ptr.as_ptr(),
                ptr::null(),
                input_names.as_ptr(),
                ins.as_ptr(),
                ins.len(),
                output_names.as_ptr(),
                output_names.len(),
                outs.as_mut_ptr(),
            )
        })
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // SAFETY: made by CreateSession, released once, no run in flight (runs borrow it).
        unsafe { (self.runtime.api.ReleaseSession)(self.ptr.as_ptr()) }
    }
}

/// A tensor over caller memory; releasing it leaves the memory alone.
pub struct Value<'r> {
    api: &'static OrtApi,
    ptr: *mut OrtValue,
    _runtime: std::marker::PhantomData<&'r Runtime>,
}

// SAFETY: an OrtValue over caller memory has no thread affinity; its users serialize access.
unsafe impl Send for Value<'_> {}

impl Drop for Value<'_> {
    fn drop(&mut self) {
        // SAFETY: made by CreateTensorWithDataAsOrtValue, released once.
        unsafe { (self.api.ReleaseValue)(self.ptr) }
    }
}

/// `Ok` for a null status, else its message (the status released).
fn check(api: &OrtApi, status: OrtStatusPtr) -> Result<()> {
    if status.0.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null status from the API; its message lives until it is released.
    let message = unsafe { CStr::from_ptr((api.GetErrorMessage)(status.0)) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: released once, after its message was copied.
    unsafe { (api.ReleaseStatus)(status.0) };
    Err(message)
}

/// ONNX's element type `code` (`TensorProto.DataType`, which ONNX Runtime's enum follows), if it
/// is one ONNX Runtime has.
pub fn element_type(code: i32) -> Option<ONNXTensorElementDataType> {
    use ONNXTensorElementDataType::*;
    Some(match code {
        1 => ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
        2 => ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
        3 => ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
        4 => ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
        5 => ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
        6 => ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
        7 => ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
        9 => ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
        10 => ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
        11 => ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
        12 => ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
        13 => ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
        16 => ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
        _ => return None,
    })
}

/// Bytes of one element of ONNX element type `code`, for the types [`element_type`] knows.
pub fn element_bytes(code: i32) -> Option<usize> {
    Some(match code {
        2 | 3 | 9 => 1,
        4 | 5 | 10 | 16 => 2,
        1 | 6 | 12 => 4,
        7 | 11 | 13 => 8,
        _ => return None,
    })
}
