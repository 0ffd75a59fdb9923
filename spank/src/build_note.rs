//! The plugin's GNU build id note where the linker writes none (zig 0.13, the release
//! build for glibc 2.28): `colloc status --cluster` groups nodes by the build id of the
//! plugin that published, read from this note in memory (`ffi::own_build_id`) and from
//! the file (`colloc_core::buildid::of_file`). The 20 bytes are a hash of what went into
//! the plugin, computed by build.rs.

/// An ELF note: `NT_GNU_BUILD_ID` (3), name "GNU", 20 bytes of id.
#[repr(C, align(4))]
pub struct Note {
    namesz: u32,
    descsz: u32,
    kind: u32,
    name: [u8; 4],
    desc: [u8; 20],
}

const fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("COLLOC_BUILD_NOTE_ID is not lowercase hex"),
    }
}

const fn id() -> [u8; 20] {
    let s = env!("COLLOC_BUILD_NOTE_ID").as_bytes();
    assert!(s.len() == 40, "COLLOC_BUILD_NOTE_ID is not 20 bytes");
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 20 {
        out[i] = hex(s[2 * i]) << 4 | hex(s[2 * i + 1]);
        i += 1;
    }
    out
}

/// The note itself, in a note section of its own: lld drops input sections named
/// `.note.gnu.build-id`, and LLVM gives any `.note*` section the type SHT_NOTE, so the
/// linker puts it into a PT_NOTE segment, where both readers look.
#[used]
#[link_section = ".note.colloc.build-id"]
pub static BUILD_ID_NOTE: Note = Note {
    namesz: 4,
    descsz: 20,
    kind: 3,
    name: *b"GNU\0",
    desc: id(),
};
