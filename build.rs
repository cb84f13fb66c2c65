// Cargo's cdylib carries no SONAME; without one, C programs linked against it record the
// library's build path instead of a name the dynamic loader can find.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgraphsched.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
