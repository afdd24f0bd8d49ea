//! Wall-clock time as the broker stamps it: Unix milliseconds for delays and queue activity,
//! Unix seconds for `x-death` times. Timers that must follow tokio's (pausable) clock use
//! `tokio::time::Instant` where they run instead.

/// Unix time in milliseconds (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Unix time in seconds (0 if the clock is before 1970).
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
