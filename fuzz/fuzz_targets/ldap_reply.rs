//! Phase 1's scans read a BDII's replies straight from the socket's bytes
//! (`cder_jdl::bdii::wire`); a BDII is any site's server, so untrusted. Any
//! byte stream must frame into messages that parse or fail with an error,
//! never a panic, an out-of-bounds read or a length past the buffer.
#![no_main]

use cder_jdl::bdii::wire::{message_len, Message, NameCache};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut names = NameCache::default();
    let mut rest = data;
    while let Ok(Some(len)) = message_len(rest) {
        assert!(len <= rest.len() && len >= 2, "framed {len} bytes of {}", rest.len());
        if let Ok((_, Message::Entry(e))) = Message::parse(&rest[..len], &mut names) {
            // Whatever was kept is text the offers can read.
            assert!(e.iter().all(|(n, _)| n.chars().all(|c| !c.is_ascii_uppercase())));
        }
        rest = &rest[len..];
    }
});
