//! What `prepare.py` wrote: the prepared model's values and nodes, one small model per node.

use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A tensor of the prepared model: its name, ONNX element type and static shape.
#[derive(Clone, Debug, Deserialize)]
pub struct TensorInfo {
    /// The ONNX value name.
    pub name: String,
    /// ONNX `TensorProto.DataType` code (1 is float).
    pub elem_type: i32,
    /// Bytes of one element.
    pub elem_bytes: usize,
    /// Every dimension, known before the run.
    pub shape: Vec<i64>,
}

impl TensorInfo {
    /// Bytes of the whole tensor.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<i64>().max(0) as usize * self.elem_bytes
    }
}

/// One ONNX node, saved as a model of its own.
#[derive(Clone, Debug, Deserialize)]
pub struct NodeInfo {
    /// The node's name in the prepared model.
    pub name: String,
    /// Its operator type, e.g. `Conv`.
    pub op: String,
    /// The single-node model, relative to the manifest.
    pub file: String,
    /// Input value names, in the node's order; weights and absent optional inputs included.
    pub inputs: Vec<String>,
    /// Output value names.
    pub outputs: Vec<String>,
}

/// The manifest of a prepared model.
#[derive(Clone, Debug, Deserialize)]
pub struct Manifest {
    /// The original model's file name.
    pub model: String,
    /// The optimization level ONNX Runtime saved it at.
    pub optimization: String,
    /// The prepared whole model, relative to the manifest.
    pub prepared: String,
    /// Bytes of the model's weights.
    pub weights_bytes: u64,
    /// A model whose call does nothing (one Identity of one float), relative to the manifest:
    /// its time is the fixed cost of a call. Absent in directories prepared before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_model: Option<String>,
    /// The graph inputs (one).
    pub inputs: Vec<TensorInfo>,
    /// The graph outputs, by name.
    pub outputs: Vec<String>,
    /// Every value a node produces.
    pub values: Vec<TensorInfo>,
    /// The nodes, in a topological order.
    pub nodes: Vec<NodeInfo>,
    /// The directory the manifest is in.
    #[serde(skip)]
    pub dir: PathBuf,
}

impl Manifest {
    /// Reads `DIR/manifest.json`.
    pub fn load(dir: &Path) -> Result<Manifest, String> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e} (run prepare.py first)", path.display()))?;
        let mut manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| format!("{} is not a manifest: {e}", path.display()))?;
        manifest.dir = dir.to_path_buf();
        if manifest.inputs.is_empty() {
            return Err(format!("{} has no graph input", path.display()));
        }
        for t in manifest.inputs.iter().chain(&manifest.values) {
            if crate::ort_api::element_bytes(t.elem_type) != Some(t.elem_bytes) || t.shape.iter().any(|&d| d <= 0) {
                return Err(format!(
                    "{}: value {} has element type {} of {} bytes and shape {:?}, which this program cannot run \
                     (numeric types, every dimension positive)",
                    path.display(),
                    t.name,
                    t.elem_type,
                    t.elem_bytes,
                    t.shape
                ));
            }
        }
        Ok(manifest)
    }

    /// Every tensor a node may read or write (the graph input and produced values), by name.
    pub fn tensors(&self) -> HashMap<&str, &TensorInfo> {
        self.inputs
            .iter()
            .chain(&self.values)
            .map(|t| (t.name.as_str(), t))
            .collect()
    }

    /// The bytes each graph input gets in every run, the same for graphsched and ONNX Runtime:
    /// for a float input a fixed pseudo-random pattern in [-1, 1) (its own for each input); any
    /// other input is zeros (valid indices and lengths, where random bytes would not be).
    pub fn input_bytes(&self) -> Vec<Vec<u8>> {
        self.inputs.iter().enumerate().map(|(i, t)| pattern(t, i)).collect()
    }
}

/// Input `index`'s bytes (see [`Manifest::input_bytes`]).
fn pattern(input: &TensorInfo, index: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ (index as u64).wrapping_mul(0xd1b5_4a32_d192_ed03);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    if input.elem_type == 1 {
        (0..input.bytes() / 4)
            .flat_map(|_| ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).to_ne_bytes())
            .collect()
    } else {
        vec![0; input.bytes()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"{"model": "m.onnx", "optimization": "all", "prepared": "prepared.onnx",
        "weights_bytes": 256,
        "inputs": [{"name": "x", "elem_type": 1, "elem_bytes": 4, "shape": [1, 3, 4, 4]}],
        "outputs": ["y"],
        "values": [{"name": "y", "elem_type": 7, "elem_bytes": 8, "shape": [2, 5]}],
        "nodes": [{"name": "n", "op": "Relu", "domain": "", "file": "nodes/0000.onnx",
                   "inputs": ["x"], "outputs": ["y"]}]}"#;

    fn manifest_in(dir: &Path, text: &str) -> Result<Manifest, String> {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("manifest.json"), text).unwrap();
        Manifest::load(dir)
    }

    #[test]
    fn a_manifest_gives_sizes_from_shapes_and_a_fixed_input() {
        let dir = std::env::temp_dir().join(format!("gs-onnx-manifest-{}", std::process::id()));
        let m = manifest_in(&dir, MANIFEST).unwrap();
        assert_eq!(m.inputs[0].bytes(), 3 * 16 * 4);
        assert_eq!(m.tensors()["y"].bytes(), 80);
        let bytes = m.input_bytes().remove(0);
        assert_eq!(bytes.len(), 192);
        assert_eq!(bytes, m.input_bytes()[0], "both runtimes must see the same input");
        let floats: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert!(floats.iter().all(|x| (-1.0..1.0).contains(x)));
        assert!(floats.windows(2).any(|w| w[0] != w[1]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_or_broken_manifest_is_named() {
        let dir = std::env::temp_dir().join(format!("gs-onnx-broken-{}", std::process::id()));
        let missing = Manifest::load(&dir.join("nowhere")).unwrap_err();
        assert!(
            missing.contains("manifest.json") && missing.contains("prepare.py"),
            "{missing}"
        );
        let broken = manifest_in(&dir, "{\"model\": 3}").unwrap_err();
        assert!(broken.contains("is not a manifest"), "{broken}");
        let no_inputs = MANIFEST.replace(
            r#""inputs": [{"name": "x", "elem_type": 1, "elem_bytes": 4, "shape": [1, 3, 4, 4]}],"#,
            r#""inputs": [],"#,
        );
        let refused = manifest_in(&dir, &no_inputs).unwrap_err();
        assert!(refused.contains("no graph input"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn each_input_has_bytes_of_its_own() {
        let dir = std::env::temp_dir().join(format!("gs-onnx-inputs-{}", std::process::id()));
        let two = MANIFEST.replace(
            r#""inputs": [{"#,
            r#""inputs": [{"name": "ids", "elem_type": 7, "elem_bytes": 8, "shape": [1, 6]}, {"name": "z", "elem_type": 1, "elem_bytes": 4, "shape": [1, 3, 4, 4]}, {"#,
        );
        let m = manifest_in(&dir, &two).unwrap();
        let bytes = m.input_bytes();
        assert_eq!(bytes.iter().map(Vec::len).collect::<Vec<_>>(), [48, 192, 192]);
        assert!(
            bytes[0].iter().all(|&b| b == 0),
            "integer inputs are zeros: valid indices"
        );
        assert_ne!(
            bytes[1], bytes[2],
            "two float inputs of one shape get different patterns"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
