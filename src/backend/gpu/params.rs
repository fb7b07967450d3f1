//! Typed kernel parameters: one `#[repr(C)]` struct per kernel family, uploaded as the uniform block `P` of each
//! dispatch. The WGSL `struct Params` of a family is generated from the same field list (`wgsl_fields`),
//! so host and shader cannot disagree on a field; `tests/wgsl.rs` checks naga's layout of every generated struct
//! against Rust's offsets. Fields are `u32`, `f32`, `vec4<u32>` (`[u32; 4]`), arrays of `vec4<u32>` (arrays of
//! scalars would have a 16-byte stride in a uniform block) or a struct of such fields shared by several families
//! (`kernels/rope.rs`' `RopeAngles`), placed so every vec4 and struct starts at a multiple of 16 bytes.
//! Units are elements unless a field says otherwise.

/// A Rust field type and its WGSL spelling in a uniform struct.
pub(crate) trait WgslType {
    /// The WGSL type.
    fn wgsl() -> String;

    /// The WGSL declaration the type needs ahead of `struct Params` (a struct of fields shared by several
    /// families), if any.
    fn decl() -> String {
        String::new()
    }
}

impl WgslType for u32 {
    fn wgsl() -> String {
        "u32".into()
    }
}

impl WgslType for f32 {
    fn wgsl() -> String {
        "f32".into()
    }
}

impl WgslType for [u32; 4] {
    fn wgsl() -> String {
        "vec4<u32>".into()
    }
}

impl<const N: usize> WgslType for [[u32; 4]; N] {
    fn wgsl() -> String {
        format!("array<vec4<u32>, {N}>")
    }
}

/// One kernel family's parameters as both sides lay them out.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct ParamsLayout {
    /// The Rust struct's name.
    pub name: &'static str,
    /// The generated WGSL `struct Params`.
    pub wgsl: String,
    /// `(field, byte offset)` in Rust.
    pub offsets: Vec<(&'static str, usize)>,
    /// Size of the Rust struct in bytes.
    pub size: usize,
}

/// A kernel family's uniform block: a `#[repr(C)]` struct of `u32`, `f32` and `vec4<u32>` fields whose WGSL
/// `struct Params` is generated from the same field list. Made by [`params!`](crate::backend::gpu::params).
pub(crate) trait ParamsBlock: bytemuck::Pod + std::fmt::Debug + PartialEq + Send + Sync + 'static {
    /// The Rust struct's name.
    const NAME: &'static str;
    /// `struct Params { .. }` in WGSL, the fields in the Rust order.
    fn wgsl_fields() -> String;
    /// `(field, byte offset)` of every field as Rust lays them out.
    fn offsets() -> Vec<(&'static str, usize)>;

    /// Both sides' layouts, for the layout test.
    fn layout() -> ParamsLayout {
        ParamsLayout {
            name: Self::NAME,
            wgsl: Self::wgsl_fields(),
            offsets: Self::offsets(),
            size: std::mem::size_of::<Self>(),
        }
    }
}

/// Declares kernel-family parameter structs: each a `#[repr(C)]` [`ParamsBlock`] with its WGSL twin. Used by the
/// family files in `kernels/`, each for its own struct.
macro_rules! params {
    ($($(#[doc = $doc:literal])* $name:ident { $($(#[doc = $fdoc:literal])* $field:ident : $ty:ty,)* })*) => {
        $(
            $(#[doc = $doc])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
            pub(crate) struct $name {
                $($(#[doc = $fdoc])* pub $field: $ty,)*
            }

            impl $crate::backend::gpu::params::ParamsBlock for $name {
                const NAME: &'static str = stringify!($name);

                fn offsets() -> Vec<(&'static str, usize)> {
                    vec![$((stringify!($field), std::mem::offset_of!($name, $field))),*]
                }

                fn wgsl_fields() -> String {
                    use $crate::backend::gpu::params::WgslType;
                    // each shared struct declared once, however many fields are of it
                    let decls: Vec<String> = vec![$(<$ty as WgslType>::decl()),*];
                    let mut s = String::new();
                    for (i, d) in decls.iter().enumerate() {
                        if !decls[..i].contains(d) {
                            s.push_str(d);
                        }
                    }
                    s.push_str("struct Params {\n");
                    $(s.push_str(&format!("    {}: {},\n", stringify!($field), <$ty as WgslType>::wgsl()));)*
                    s.push_str("}\n");
                    s
                }
            }
        )*
    };
}
pub(crate) use params;

/// The parameters of one dispatch: its family's [`ParamsBlock`], kept as the bytes uploaded as the uniform block
/// with the struct's type, so a pass that changes them (splitting) reads them back as that struct only.
#[derive(Clone, PartialEq)]
pub(crate) struct Params {
    type_id: std::any::TypeId,
    name: &'static str,
    bytes: Vec<u8>,
}

impl Params {
    /// A dispatch's parameters.
    pub(crate) fn new<P: ParamsBlock>(p: P) -> Params {
        Params { type_id: std::any::TypeId::of::<P>(), name: P::NAME, bytes: bytemuck::bytes_of(&p).to_vec() }
    }

    /// The bytes uploaded as the uniform block.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The parameters as `P`, when they are of that struct.
    pub(crate) fn get<P: ParamsBlock>(&self) -> Option<P> {
        (self.type_id == std::any::TypeId::of::<P>()).then(|| bytemuck::pod_read_unaligned(&self.bytes))
    }
}

impl std::fmt::Debug for Params {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} bytes)", self.name, self.bytes.len())
    }
}

/// `v` as a `vec4<u32>` of u32s.
pub(crate) fn vec4(v: [usize; 4]) -> [u32; 4] {
    v.map(|x| x as u32)
}

/// Sets element `k` of a `[[u32; 4]; N]` array of packed scalars.
pub(crate) fn set_packed<const N: usize>(a: &mut [[u32; 4]; N], k: usize, v: usize) {
    a[k / 4][k % 4] = v as u32;
}

/// Element `k` of a `[[u32; 4]; N]` array of packed scalars.
pub(crate) fn get_packed<const N: usize>(a: &[[u32; 4]; N], k: usize) -> u32 {
    a[k / 4][k % 4]
}
