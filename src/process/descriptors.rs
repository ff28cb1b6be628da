//! The process's open-file limit, raised at start: the soft limit to the hard one, as nginx's
//! `worker_rlimit_nofile` and HAProxy do, so that the descriptor budget
//! (`config::descriptors`) is drawn from all the operator allowed.

use crate::config::descriptors::open_file_limit;

/// Raises the soft `RLIMIT_NOFILE` to the hard one, saying so; returns the soft limit now.
pub fn raise_open_file_limit() -> u64 {
    let (soft, hard) = open_file_limit();
    if soft >= hard {
        return soft;
    }
    let raised = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: `raised` is a valid rlimit; raising the soft limit up to the hard one needs no
    // privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(soft, hard, %error, "cannot raise the open-file limit; the budget is drawn from the soft one");
        return soft;
    }
    tracing::info!(
        from = soft,
        to = hard,
        "open-file limit raised to the hard limit"
    );
    hard
}
