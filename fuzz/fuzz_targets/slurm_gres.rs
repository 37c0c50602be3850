//! SLURM's GRES text as `cder_request::gres` reads it for the plugins, the
//! GLUE provider and cderd: GRES lists and items, counts with suffixes,
//! index lists, TRES entries, `scontrol -o` lines and gres.conf records.
//! Node admins write slurm.conf and gres.conf, users write `--gres` (which
//! reaches `tres_per_node`) and free texts that scontrol prints (`Comment=`,
//! job names), so every input must be read or refused without a panic, an
//! overflow or a blow-up; beyond that:
//! - an error's column points at its token in the text given;
//! - an accepted index list is sorted, without duplicates, within its bound;
//! - an accepted count is below SLURM's NO_VAL64;
//! - every `scontrol -o` field is a slice of its line, and `get` is the first.
#![no_main]

use cder_request::gres::{self, Detail, GresError, ScontrolLine, MAX_INDICES};
use libfuzzer_sys::fuzz_target;

fn points_at_its_token(text: &str, e: &GresError) {
    let at = e.column - 1;
    assert!(at <= text.len(), "{e} past {text:?}");
    assert!(
        text.get(at..).is_some_and(|rest| rest.starts_with(&e.token)),
        "{e} does not point at its token in {text:?}"
    );
}

fn check_indices(idx: &[u32]) {
    assert!(idx.len() <= MAX_INDICES);
    assert!(idx.windows(2).all(|w| w[0] < w[1]), "{idx:?} not sorted and unique");
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match gres::parse_list(text) {
        Ok(items) => {
            for item in items {
                assert!(!item.name.is_empty());
                if let Some(Detail::Indices(idx)) = &item.detail {
                    check_indices(idx);
                }
            }
        }
        Err(e) => points_at_its_token(text, &e),
    }
    match gres::parse_index_list(text) {
        Ok(idx) => check_indices(&idx),
        Err(e) => points_at_its_token(text, &e),
    }
    match gres::parse_count(text) {
        Ok(n) => assert!(n < u64::MAX),
        Err(e) => points_at_its_token(text, &e),
    }
    for entry in gres::tres_entries(text) {
        assert!(text.get(entry.column - 1..).is_some_and(|r| r.len() >= entry.name.len()));
        if let Err(e) = entry.item {
            points_at_its_token(text, &e);
        }
    }
    for line in text.lines() {
        let parsed = ScontrolLine::parse(line);
        let range = line.as_ptr() as usize..=line.as_ptr() as usize + line.len();
        for (key, value, column) in &parsed.fields {
            assert!(!key.is_empty());
            assert!(
                range.contains(&(value.as_ptr() as usize)) && range.contains(&(value.as_ptr() as usize + value.len()))
            );
            assert_eq!(line.get(column - 1..column - 1 + key.len()), Some(*key));
            assert_eq!(
                parsed.get(key).map(|v| v.as_ptr()),
                parsed.fields.iter().find(|f| f.0 == *key).map(|f| f.1.as_ptr())
            );
        }
    }
    if let Ok(records) = cder_request::gres_conf::parse(text) {
        for r in records {
            assert!(r.line >= 1 && !r.fields.is_empty());
            assert!(r.fields.iter().all(|(k, _)| !k.is_empty()));
        }
    }
});
