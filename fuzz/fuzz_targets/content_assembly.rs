//! Content assembly: after a valid handshake and basic.publish, arbitrary header and body
//! frames (or anything else) must end in a delivered message, a clean close, or a wait for more.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = warren_fuzz::publish_prefix();
    input.extend_from_slice(data);
    warren_fuzz::run_stream(&input);
});
