//! The benchmark's private scratch directory (configs, logs, nginx's pid and temp files), removed
//! when the comparison ends.

use std::path::{Path, PathBuf};

use anyhow::Context;

pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// A fresh directory under the system temp directory, readable by all so that proxies which
    /// drop privileges to another user (nginx's workers) can still reach their files.
    pub fn create() -> anyhow::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        remove_abandoned();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("herdsman-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(ScratchDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the directory (its configs and logs) for a person to read: renamed to
    /// `herdsman-bench-kept-…`, which no later run removes, and returned. Processes still writing
    /// into it follow the rename.
    pub fn keep(self) -> anyhow::Result<PathBuf> {
        let name = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("herdsman-bench-"))
            .unwrap_or("dir")
            .to_string();
        let kept = self
            .path
            .with_file_name(format!("herdsman-bench-kept-{name}"));
        std::fs::rename(&self.path, &kept)
            .with_context(|| format!("renaming {} to {}", self.path.display(), kept.display()))?;
        std::mem::forget(self);
        Ok(kept)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes the scratch directories of earlier runs that were killed before they could clean up
/// (their processes died with them; their directories did not). Only directories whose owning
/// process no longer exists are touched.
fn remove_abandoned() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("herdsman-bench-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
