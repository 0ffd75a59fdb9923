//! The GNU build id of an ELF object (`NT_GNU_BUILD_ID`, what `readelf -n` and `file`
//! print): the linker's hash of the output, so two plugins with one build id are one
//! build. The plugin reads its own from memory (`spank::ffi`), `colloc` reads a file.

/// Note type of the build id (`NT_GNU_BUILD_ID` in `<elf.h>`).
const NT_GNU_BUILD_ID: u32 = 3;
/// Program header type of a note segment (`PT_NOTE`).
const PT_NOTE: u32 = 4;

/// The build id in a run of ELF notes (the contents of a `PT_NOTE` segment), as lower-case
/// hex. `None` when there is none or the notes are cut short.
pub fn from_notes(mut notes: &[u8]) -> Option<String> {
    // Each note: namesz, descsz, type (4 bytes each, native order), the name padded to 4
    // bytes, the descriptor padded to 4 bytes.
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let pad = |n: usize| n.checked_add(3).map(|v| v & !3);
    while notes.len() >= 12 {
        let namesz = usize::try_from(word(notes, 0)?).ok()?;
        let descsz = usize::try_from(word(notes, 4)?).ok()?;
        let kind = word(notes, 8)?;
        let name_end = 12usize.checked_add(pad(namesz)?)?;
        let desc_end = name_end.checked_add(pad(descsz)?)?;
        if desc_end > notes.len() {
            return None;
        }
        let name = &notes[12..12 + namesz];
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" && descsz > 0 {
            let desc = &notes[name_end..name_end + descsz];
            return Some(desc.iter().map(|b| format!("{b:02x}")).collect());
        }
        notes = &notes[desc_end..];
    }
    None
}

/// The build id of an ELF64 little-endian file (x86_64, aarch64), from its note segments.
/// `None` for anything else or a file without one.
pub fn from_elf(file: &[u8]) -> Option<String> {
    if file.get(..6)? != b"\x7fELF\x02\x01" {
        return None; // not ELF, or not 64-bit little-endian
    }
    let u16_at = |at: usize| -> Option<u16> {
        Some(u16::from_le_bytes(file.get(at..at + 2)?.try_into().ok()?))
    };
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(file.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<usize> {
        usize::try_from(u64::from_le_bytes(file.get(at..at + 8)?.try_into().ok()?)).ok()
    };
    let phoff = u64_at(0x20)?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? != PT_NOTE {
            continue;
        }
        let offset = u64_at(ph + 0x08)?;
        let size = u64_at(ph + 0x20)?;
        let notes = file.get(offset..offset.checked_add(size)?)?;
        if let Some(id) = from_notes(notes) {
            return Some(id);
        }
    }
    None
}

/// The build id of the ELF file at `path`. Only its first MiB is read: linkers put the
/// note segments right after the program headers.
pub fn of_file(path: &std::path::Path) -> Option<String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(1 << 20)
        .read_to_end(&mut bytes)
        .ok()?;
    from_elf(&bytes)
}

/// The short form shown in tables: the first 12 hex digits (as `git` abbreviates).
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend((name.len() as u32).to_ne_bytes());
        v.extend((desc.len() as u32).to_ne_bytes());
        v.extend(kind.to_ne_bytes());
        v.extend(name);
        v.resize(v.len().next_multiple_of(4), 0);
        v.extend(desc);
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    #[test]
    fn the_gnu_build_id_note_is_found_among_others() {
        let mut notes = note(b"GNU\0", 1, &[0; 16]); // NT_GNU_ABI_TAG
        notes.extend(note(b"stapsdt\0", 3, &[1, 2, 3]));
        notes.extend(note(b"GNU\0", 3, &[0xde, 0xad, 0xbe, 0xef, 0x01]));
        assert_eq!(from_notes(&notes).as_deref(), Some("deadbeef01"));
        assert_eq!(from_notes(&notes[..notes.len() - 4]), None, "cut short");
        assert_eq!(from_notes(&[]), None);
        assert_eq!(from_notes(&[0xff; 12]), None, "absurd sizes");
        assert_eq!(short("0123456789abcdef"), "0123456789ab");
        assert_eq!(short("abc"), "abc");
    }

    #[test]
    fn this_test_binary_has_the_id_readelf_shows() {
        // The test executable is linked like colloc and the plugin (cc passes --build-id
        // on Debian and RHEL): what `readelf -n` prints is what we read.
        let exe = std::env::current_exe().unwrap();
        let ours = of_file(&exe).expect("a build id");
        assert!(ours.len() >= 16 && ours.chars().all(|c| c.is_ascii_hexdigit()));
        if let Ok(out) = std::process::Command::new("readelf")
            .arg("-n")
            .arg(&exe)
            .output()
        {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains(&format!("Build ID: {ours}")), "{text}");
        }
        assert_eq!(from_elf(b"#!/bin/sh\n"), None);
        assert_eq!(from_elf(b"\x7fELF\x02\x01"), None, "truncated header");
    }
}
