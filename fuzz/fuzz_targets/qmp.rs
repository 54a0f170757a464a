//! What QEMU's monitor writes, through the client's own framing and parsing: lines come
//! out exactly as `\n` splits them (however the reads fall), overlong ones are skipped,
//! and every line is classified without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qemu::qmp::wire::{parse_message, read_line, Line, Message};

const LIMIT: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&capacity, stream)) = data.split_first() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let lines = runtime.block_on(async {
        let capacity = usize::from(capacity % 16) + 1;
        let mut reader = tokio::io::BufReader::with_capacity(capacity, stream);
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, LIMIT).await.expect("reading memory") {
                Line::End => return out,
                line => out.push(line),
            }
        }
    });
    let mut expected: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    if expected.last().is_some_and(|l| l.is_empty()) {
        expected.pop();
    }
    assert_eq!(lines.len(), expected.len());
    for (line, want) in lines.iter().zip(expected) {
        match line {
            Line::Text(text) => {
                assert_eq!(text.as_slice(), want);
                if let Message::Reply(id, _) = parse_message(text) {
                    let value: serde_json::Value = serde_json::from_slice(text).expect("JSON");
                    assert_eq!(value["id"].as_u64(), Some(id));
                }
            }
            Line::TooLong => assert!(want.len() > LIMIT),
            Line::End => unreachable!(),
        }
    }
});
