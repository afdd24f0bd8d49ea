//! The whole connection state machine: an arbitrary client byte stream from the protocol
//! header on, through a real connection of a real broker.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    warren_fuzz::run_stream(data);
});
