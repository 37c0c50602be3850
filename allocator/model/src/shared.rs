//! Files shared by every job that holds a device of some types, and no
//! other job: AMD's `/dev/kfd`, one compute interface for all of a node's
//! AMD GPUs ([`CderType::shared_files`]). Both cderd's own device cgroups
//! and the SLURM plugin (inside SLURM's) fence them by number.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::config::CderType;
use crate::device::DeviceNumber;

/// One shared file and the types whose devices open it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFile {
    /// The file (`kfd_path`).
    pub path: PathBuf,
    /// The CDER types whose devices open it (two AMD types share one kfd).
    pub types: BTreeSet<String>,
    /// Where its driver's major is listed while the file does not exist
    /// yet (the first type's `proc_devices`).
    pub proc_devices: PathBuf,
}

impl SharedFile {
    /// The shared files of the configured types, one entry per path.
    pub fn of_types(cders: &[CderType]) -> Vec<SharedFile> {
        let mut out: Vec<SharedFile> = Vec::new();
        for cder in cders {
            for path in cder.shared_files() {
                match out.iter_mut().find(|f| f.path == path) {
                    Some(f) => {
                        f.types.insert(cder.name().to_string());
                    }
                    None => out.push(SharedFile {
                        path,
                        types: BTreeSet::from([cder.name().to_string()]),
                        proc_devices: cder.proc_devices.clone(),
                    }),
                }
            }
        }
        out
    }

    /// Whether a job holding devices of `held` types may open it.
    pub fn opened_by<'a>(&self, mut held: impl Iterator<Item = &'a str>) -> bool {
        held.any(|t| self.types.contains(t))
    }

    /// The number it will have once it exists: its driver registers the
    /// major under the file's name (amdgpu's `kfd`) and uses minor 0.
    /// `None` when the driver is not loaded: no such file can appear until
    /// root loads it.
    pub fn registered_number(&self) -> Option<DeviceNumber> {
        let name = self.path.file_name()?.to_str()?;
        let text = std::fs::read_to_string(&self.proc_devices).ok()?;
        char_major(&text, name).map(|major| DeviceNumber { major, minor: 0 })
    }

    /// The number to deny: the file's own, else the registered one.
    pub fn number(&self) -> Option<DeviceNumber> {
        DeviceNumber::of_path(&self.path).or_else(|| self.registered_number())
    }

    /// How fences name it in messages: `kfd of gpgpu`.
    pub fn name(&self) -> String {
        let file =
            self.path.file_name().map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into());
        format!("{file} of {}", self.types.iter().cloned().collect::<Vec<_>>().join(","))
    }

    /// Whether the file exists (as anything: a plain file is no device).
    pub fn exists(&self) -> bool {
        Path::new(&self.path).exists()
    }
}

/// The major of the character-device driver `name` in `/proc/devices`'s
/// text (its "Character devices:" section, `<major> <name>` lines).
pub fn char_major(proc_devices: &str, name: &str) -> Option<u32> {
    proc_devices
        .lines()
        .skip_while(|l| l.trim() != "Character devices:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .find_map(|l| l.trim().split_once(' ').filter(|(_, n)| n.trim() == name).and_then(|(m, _)| m.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn one_entry_per_file_and_the_registered_major() {
        let dir = tempfile::tempdir().unwrap();
        let majors = dir.path().join("devices");
        std::fs::write(&majors, "Character devices:\n  1 mem\n235 kfd\n\nBlock devices:\n240 kfd\n").unwrap();
        let kfd = dir.path().join("kfd");
        let text = format!(
            "[[cder]]\nname = \"mi250\"\nvendor = \"amd\"\ndiscovery = \"static\"\nkfd_path = {kfd:?}\nproc_devices = {majors:?}\n\
             [[cder]]\nname = \"mi100\"\nvendor = \"amd\"\ndiscovery = \"static\"\nkfd_path = {kfd:?}\n\
             [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n"
        );
        let config = Config::parse(&text, Path::new("cder.toml")).unwrap();
        let shared = SharedFile::of_types(&config.cders);
        assert_eq!(shared.len(), 1, "{shared:?}");
        assert_eq!(shared[0].name(), "kfd of mi100,mi250");
        assert!(shared[0].opened_by(["gpgpu", "mi100"].into_iter()));
        assert!(!shared[0].opened_by(["gpgpu"].into_iter()));
        assert!(!shared[0].exists());
        assert_eq!(shared[0].number(), Some(DeviceNumber { major: 235, minor: 0 }), "a block major is no answer");
        std::fs::write(&majors, "Character devices:\n  1 mem\n").unwrap();
        assert_eq!(shared[0].number(), None);
        // An existing file's own number wins.
        let null = SharedFile { path: "/dev/null".into(), ..shared[0].clone() };
        assert_eq!(null.number(), Some(DeviceNumber { major: 1, minor: 3 }));
    }
}
