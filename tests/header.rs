//! The committed C header must be exactly what cbindgen generates from the code.
//! Regenerate it with `GS_BLESS=1 cargo test --test header`.

use std::path::Path;

#[test]
fn committed_header_matches_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let path = root.join("include/graphsched.h");
    if std::env::var_os("GS_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/graphsched.h");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    if committed != generated {
        let first = committed
            .iter()
            .zip(&generated)
            .position(|(a, b)| a != b)
            .unwrap_or(committed.len().min(generated.len()));
        let line = 1 + generated[..first].iter().filter(|&&b| b == b'\n').count();
        panic!(
            "include/graphsched.h differs from what the code generates (first difference at line {line}).\n\
             Regenerate it with `GS_BLESS=1 cargo test --test header` and commit it; do not edit it by hand."
        );
    }
}

#[test]
fn version_string_macro_matches_cargo() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(root.join("include/graphsched.h")).unwrap();
    let want = format!("#define GS_VERSION_STRING \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(header.contains(&want), "header lacks `{want}`");
    for (name, value) in [
        ("GS_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("GS_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("GS_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        assert!(
            header.contains(&format!("#define {name} {value}\n")),
            "header's {name} is not {value}"
        );
    }
    let v = |s: &str| s.parse::<u32>().unwrap();
    let number = v(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + v(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + v(env!("CARGO_PKG_VERSION_PATCH"));
    assert!(header.contains(&format!("#define GS_VERSION_NUMBER {number}\n")));
    assert_eq!(graphsched::ffi::gs_version_number(), number);
}

#[test]
fn every_name_the_header_defines_is_prefixed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(root.join("include/graphsched.h")).unwrap();
    for line in header.lines() {
        if let Some(rest) = line.strip_prefix("#define ") {
            let name = rest.split_whitespace().next().unwrap();
            assert!(
                name.starts_with("GS_") || name == "GRAPHSCHED_H",
                "unprefixed macro {name}"
            );
        }
        if let Some(rest) = line.strip_prefix("typedef struct ") {
            assert!(rest.starts_with("gs_"), "unprefixed type in `{line}`");
        }
    }
}
