//! ONNX Runtime's servers: one session of the whole model shared by every client (one intra-op
//! thread, or the threads), a second session for the priority stream, and the whole model's
//! reference answer every server checks against.

use super::closed_loop::{all_equal, closed_loop, Answer, Request};
use super::row::{add_priority, add_usage, row, ServeRow};
use super::usage::{rss_now, rss_peak, Usage};
use super::{Load, Priority, Server};
use crate::manifest::Manifest;
use crate::ort_api::{Arena, Runtime, SessionConfig};
use crate::run::WholeModel;
use std::path::Path;
use std::sync::Mutex;

/// The whole model's answer, in a session of `runtime`.
pub(super) fn reference(runtime: &Runtime, manifest: &Manifest) -> Result<Vec<Vec<u8>>, String> {
    let config = SessionConfig {
        intra_threads: 1,
        ..Default::default()
    };
    let session = runtime.session(&manifest.dir.join(&manifest.prepared), config)?;
    WholeModel::new(runtime, session, manifest).run(true)
}

fn intra_name(intra: usize) -> String {
    format!("{intra} intra-op thread{}", if intra == 1 { "" } else { "s" })
}

/// Serves `load` (and the `priority` client) with one of ONNX Runtime's shared sessions.
pub(super) fn serve_ort(
    manifest: &Manifest,
    library: &Path,
    server: Server,
    load: Load,
    priority: Option<Priority<'_>>,
) -> Result<ServeRow, String> {
    let Load {
        clients,
        seconds,
        threads,
        ..
    } = load;
    let runtime = Runtime::load(library, None)?;
    let want = reference(&runtime, manifest)?;
    let intra = if server == Server::OrtIntra { threads } else { 1 };
    let config = |intra_threads: usize| SessionConfig {
        intra_threads,
        arena: Arena::Own,
        ..Default::default()
    };
    let session = runtime.session(&manifest.dir.join(&manifest.prepared), config(intra))?;
    // One WholeModel per client (its own output buffers), all over the one session.
    let sessions: Vec<Mutex<WholeModel<'_>>> = (0..clients)
        .map(|_| Mutex::new(WholeModel::shared(&runtime, &session, manifest)))
        .collect();
    // The priority client's model: a second session, its reference.
    let second = match &priority {
        Some(p) => {
            let want = reference(&runtime, p.manifest)?;
            let s = runtime.session(&p.manifest.dir.join(&p.manifest.prepared), config(p.ort_intra_threads))?;
            Some((Mutex::new(WholeModel::new(&runtime, s, p.manifest)), want))
        }
        None => None,
    };
    let request = |client: usize, keep: bool| -> Result<Option<Answer>, String> {
        let out = sessions[client].lock().unwrap().run(keep)?;
        Ok(keep.then_some(out))
    };
    let urgent = |_client: usize, keep: bool| -> Result<Option<Answer>, String> {
        match &second {
            Some((s, _)) => {
                let out = s.lock().unwrap().run(keep)?;
                Ok(keep.then_some(out))
            }
            None => Ok(None),
        }
    };
    request(0, false)?;
    urgent(0, false)?;
    let start_rss = rss_now();
    let mut streams: Vec<(usize, Request<'_>)> = vec![(clients, &request)];
    if second.is_some() {
        streams.push((1, &urgent));
    }
    let before = Usage::now();
    let mut served = closed_loop(seconds, &streams)?;
    let spent = Usage::now().since(before);
    let rss = (rss_peak().saturating_sub(start_rss), rss_peak());
    let name = format!("onnxruntime (one shared session, {})", intra_name(intra));
    let mut r = row(name, clients, threads, seconds, &mut served[0], rss);
    r.bitwise_equal = all_equal(&served[0], &want);
    add_usage(&mut r, spent, served.iter().map(|s| s.latencies.len() as u64).sum());
    if let (Some(p), Some((_, want))) = (&priority, &second) {
        let equal = all_equal(&served[1], want);
        let how = format!("a second session, {}", intra_name(p.ort_intra_threads));
        add_priority(&mut r, &p.manifest.model, how, seconds, &mut served[1], equal);
    }
    Ok(r)
}
