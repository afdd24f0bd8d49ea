//! The frame decoder on arbitrary bytes: it must return frames, ask for more, or fail cleanly,
//! and never consume more than it was given.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use warren::amqp::codec;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    for frame_max in [4096, 131_072] {
        let mut b = buf.clone();
        while let Ok(Some(_)) = codec::decode(&mut b, frame_max) {}
    }
    buf.clear();
});
