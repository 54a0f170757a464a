//! cloud-init seed disks: small FAT images labelled `cidata` (NoCloud) or `config-2`
//! (ConfigDrive) holding the files the guest's cloud-init reads.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// Writes a FAT image at `path` with `label` and these (path, contents) files.
pub fn write_fat_image(path: &Path, label: &str, files: &[(&str, Vec<u8>)]) -> std::io::Result<()> {
    const SIZE: u64 = 2 * 1024 * 1024;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    file.set_len(SIZE)?;
    let mut label_bytes = [b' '; 11];
    for (slot, byte) in label_bytes
        .iter_mut()
        .zip(label.to_ascii_uppercase().bytes())
    {
        *slot = byte;
    }
    // 2048-byte sectors: the guest mounts the seed from a cdrom (2 KiB blocks) as well
    // as from a disk; FAT with 512-byte sectors does not mount on a cdrom.
    fatfs::format_volume(
        &mut file,
        fatfs::FormatVolumeOptions::new()
            .volume_label(label_bytes)
            .bytes_per_sector(2048),
    )?;
    file.seek(SeekFrom::Start(0))?;
    let fs = fatfs::FileSystem::new(&mut file, fatfs::FsOptions::new())?;
    let root = fs.root_dir();
    for (name, contents) in files {
        let mut dir = root.clone();
        let parts: Vec<&str> = name.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            dir = match dir.open_dir(part) {
                Ok(d) => d,
                Err(_) => dir.create_dir(part)?,
            };
        }
        let mut out = dir.create_file(parts[parts.len() - 1])?;
        out.truncate()?;
        out.write_all(contents)?;
    }
    drop(root);
    fs.unmount()?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn files_can_be_read_back() {
        let dir = std::env::temp_dir().join(format!("seed-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("seed.img");
        write_fat_image(
            &path,
            "cidata",
            &[
                ("meta-data", b"instance-id: x\n".to_vec()),
                ("openstack/latest/user_data", b"hi".to_vec()),
            ],
        )
        .unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let fs = fatfs::FileSystem::new(file, fatfs::FsOptions::new()).unwrap();
        assert_eq!(fs.volume_label().trim(), "CIDATA");
        let mut text = String::new();
        fs.root_dir()
            .open_file("openstack/latest/user_data")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "hi");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
