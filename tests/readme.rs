//! The README's C example is `c_examples/hello.c`, which ctest compiles and runs: keep them equal.

#[test]
fn readme_example_is_the_tested_one() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let hello = std::fs::read_to_string(root.join("c_examples/hello.c")).unwrap();
    assert!(
        readme.contains(&format!("```c\n{hello}```")),
        "README's C example differs from c_examples/hello.c"
    );
}
