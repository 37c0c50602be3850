//! POSIX access ACLs on cderd's own files: a shared GPU's device file and
//! its MPS directories are open to exactly the uids of its sharers, never to
//! every local user.
//!
//! The ACL is the `system.posix_acl_access` extended attribute, in the
//! kernel's format (`include/uapi/linux/posix_acl_xattr.h`): a little-endian
//! header (version 2), then one 8-byte entry per line of `getfacl`'s output
//! (tag, permissions, id), ordered by tag and, for named users, by uid.
//! Writing it also sets the file's permission bits (owner, mask as group,
//! other) in one step, so a change of sharers never passes through a mode
//! that opens the file wider or closes it to a sharer.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Read permission in an entry.
pub const READ: u16 = 4;
/// Write permission in an entry.
pub const WRITE: u16 = 2;
/// Execute (search, for a directory) permission in an entry.
pub const EXECUTE: u16 = 1;

const NAME: &str = "system.posix_acl_access";
const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// The id of the entries that name no user (owner, group, mask, other).
const UNDEFINED_ID: u32 = u32::MAX;

/// An access ACL: the owner's, the owning group's and others' permissions,
/// and those of each named user (uid → permissions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    /// `user::` — the file's owner.
    pub owner: u16,
    /// `group::` — the file's group.
    pub group: u16,
    /// `other::`.
    pub other: u16,
    /// `user:<uid>:` entries.
    pub users: BTreeMap<u32, u16>,
}

impl Acl {
    /// The ACL of permission bits `mode` (e.g. `0o600`), with no named user.
    pub fn from_mode(mode: u32) -> Acl {
        let bits = |shift: u32| ((mode >> shift) & 0o7) as u16;
        Acl { owner: bits(6), group: bits(3), other: bits(0), users: BTreeMap::new() }
    }

    /// The mask: what the named users and the group may at most do (their union).
    pub fn mask(&self) -> u16 {
        self.users.values().fold(self.group, |m, p| m | p) & 0o7
    }

    /// The permission bits the kernel shows for this ACL (the mask in the
    /// group's place when there are named users).
    pub fn mode(&self) -> u32 {
        let group = if self.users.is_empty() { self.group } else { self.mask() };
        u32::from(self.owner & 7) << 6 | u32::from(group & 7) << 3 | u32::from(self.other & 7)
    }

    /// The extended attribute's value. Without named users there is no
    /// mask entry (a minimal ACL, which the kernel keeps as the mode alone).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = VERSION.to_le_bytes().to_vec();
        let mut entry = |tag: u16, perm: u16, id: u32| {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&(perm & 7).to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        };
        entry(USER_OBJ, self.owner, UNDEFINED_ID);
        for (&uid, &perm) in &self.users {
            entry(USER, perm, uid);
        }
        entry(GROUP_OBJ, self.group, UNDEFINED_ID);
        if !self.users.is_empty() {
            entry(MASK, self.mask(), UNDEFINED_ID);
        }
        entry(OTHER, self.other, UNDEFINED_ID);
        out
    }

    /// Reads an attribute's value back (`None`: not an access ACL this
    /// module writes: named groups, another version, a torn value).
    pub fn decode(bytes: &[u8]) -> Option<Acl> {
        let (header, entries) = bytes.split_first_chunk::<4>()?;
        if u32::from_le_bytes(*header) != VERSION || entries.len() % 8 != 0 {
            return None;
        }
        let mut acl = Acl::default();
        for e in entries.chunks_exact(8) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            match tag {
                USER_OBJ => acl.owner = perm,
                USER => {
                    acl.users.insert(id, perm);
                }
                GROUP_OBJ => acl.group = perm,
                MASK => {}
                OTHER => acl.other = perm,
                _ => return None,
            }
        }
        Some(acl)
    }
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// Writes `acl` as `path`'s access ACL (which sets its permission bits too).
/// Fails where the file system keeps no ACLs (`EOPNOTSUPP`).
pub fn set(path: &Path, acl: &Acl) -> std::io::Result<()> {
    let name = CString::new(NAME).expect("no NUL in the name");
    let value = acl.encode();
    let file = c_path(path)?;
    // SAFETY: both strings are NUL-terminated and live across the call;
    // the value is a valid buffer of its length.
    let rc = unsafe { libc::setxattr(file.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Removes `path`'s access ACL, leaving its mode; none there, or a file
/// system without ACLs, is fine.
pub fn remove(path: &Path) -> std::io::Result<()> {
    let name = CString::new(NAME).expect("no NUL in the name");
    let file = c_path(path)?;
    // SAFETY: both strings are NUL-terminated and live across the call.
    let rc = unsafe { libc::removexattr(file.as_ptr(), name.as_ptr()) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => Ok(()),
        _ => Err(e),
    }
}

/// `path`'s access ACL as the kernel keeps it (`None`: no extended entries).
pub fn get(path: &Path) -> std::io::Result<Option<Acl>> {
    let name = CString::new(NAME).expect("no NUL in the name");
    let file = c_path(path)?;
    let mut buf = vec![0u8; 4 + 8 * 64];
    // SAFETY: both strings are NUL-terminated; the buffer is writable for its length.
    let n = unsafe { libc::getxattr(file.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => Ok(None),
            _ => Err(e),
        };
    }
    buf.truncate(n as usize);
    Acl::decode(&buf)
        .map(Some)
        .ok_or_else(|| std::io::Error::other(format!("{NAME}: an ACL this reader does not know")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    fn sharers(uids: &[u32], perm: u16) -> Acl {
        Acl { users: uids.iter().map(|&u| (u, perm)).collect(), ..Acl::from_mode(0o600) }
    }

    #[test]
    fn encoding_is_the_kernels() {
        let acl = sharers(&[4322, 4321], READ | WRITE);
        let bytes = acl.encode();
        // Header, owner, 4321, 4322 (ascending), group, mask, other.
        assert_eq!(bytes.len(), 4 + 6 * 8);
        assert_eq!(&bytes[..4], &[2, 0, 0, 0]);
        assert_eq!(&bytes[4..12], &[1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&bytes[12..20], &[2, 0, 6, 0, 0xe1, 0x10, 0, 0]);
        assert_eq!(&bytes[20..28], &[2, 0, 6, 0, 0xe2, 0x10, 0, 0]);
        assert_eq!(&bytes[28..36], &[4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&bytes[36..44], &[0x10, 0, 6, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&bytes[44..52], &[0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(acl.mode(), 0o660, "the mask shows as the group bits");
        assert_eq!(Acl::decode(&bytes), Some(acl));
        // No named user: no mask, the mode as it is.
        let minimal = Acl::from_mode(0o640);
        assert_eq!(minimal.encode().len(), 4 + 3 * 8);
        assert_eq!(minimal.mode(), 0o640);
        assert_eq!(Acl::decode(&[1, 0, 0, 0]), None);
    }

    /// What the kernel and `getfacl` make of it, where both are at hand
    /// (the file system of the temp dir must keep ACLs: tmpfs and ext4 do).
    #[test]
    fn the_kernel_and_getfacl_read_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvidia0");
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let acl = sharers(&[4321, 65533], READ | WRITE);
        if let Err(e) = set(&path, &acl) {
            assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
            cder_testkit::missing(&format!("a temp dir that keeps ACLs ({} does not)", dir.path().display()));
            return;
        }
        assert_eq!(get(&path).unwrap(), Some(acl.clone()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o660, "setting the ACL set the mode's group bits to the mask");
        match Command::new("getfacl").args(["-n", "-c", "-p"]).arg(&path).output() {
            Ok(out) if out.status.success() => {
                let text = String::from_utf8_lossy(&out.stdout);
                let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
                assert_eq!(
                    lines,
                    ["user::rw-", "user:4321:rw-", "user:65533:rw-", "group::---", "mask::rw-", "other::---"],
                    "{text}"
                );
            }
            _ => {
                cder_testkit::missing("getfacl (Debian's acl package; deploy/install-deps.sh) to compare with");
            }
        }
        // Fewer sharers: rewritten in place; none: the mode alone again.
        set(&path, &sharers(&[65533], READ | WRITE)).unwrap();
        assert_eq!(get(&path).unwrap().unwrap().users.keys().copied().collect::<Vec<_>>(), [65533]);
        set(&path, &Acl::from_mode(0o600)).unwrap();
        assert_eq!(get(&path).unwrap(), None, "a minimal ACL is the mode alone");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o600);
        set(&path, &acl).unwrap();
        remove(&path).unwrap();
        remove(&path).unwrap();
        assert_eq!(get(&path).unwrap(), None);
    }
}
