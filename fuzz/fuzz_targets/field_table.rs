//! Field tables: the nesting guard on arbitrary bytes, then amq-protocol's parser on what the
//! guard lets through, and a round trip of what parses.
#![no_main]

use amq_protocol::types::generation::gen_field_table;
use amq_protocol::types::parsing::parse_field_table;
use libfuzzer_sys::fuzz_target;
use warren::amqp::nesting;

fuzz_target!(|data: &[u8]| {
    if nesting::check_table(data).is_err() {
        return;
    }
    if let Ok((_, table)) = parse_field_table(data) {
        let bytes = cookie_factory::gen_simple(gen_field_table(&table), Vec::new())
            .expect("a parsed table generates");
        let (_, again) = parse_field_table(bytes.as_slice()).expect("a generated table parses");
        // Compared as bytes: a NaN value is not equal to itself.
        let twice = cookie_factory::gen_simple(gen_field_table(&again), Vec::new())
            .expect("a parsed table generates");
        assert_eq!(bytes, twice);
    }
});
